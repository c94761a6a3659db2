//go:build !unix

package runner

// missingInterpreter: scripts have no #! line to follow here.
func missingInterpreter(string) string { return "" }
