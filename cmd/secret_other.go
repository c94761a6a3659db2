//go:build !linux

package cmd

// protectSecrets has no equivalent here; macOS and the BSDs do not show
// another process's environment through a file, only to ps -E of the
// same user.
func protectSecrets() {}
