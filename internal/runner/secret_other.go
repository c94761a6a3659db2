//go:build !linux

package runner

// ProtectSecrets has no equivalent here; macOS and the BSDs do not show
// another process's environment through a file, only to ps -E of the
// same user.
func ProtectSecrets() {}
