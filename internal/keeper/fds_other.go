//go:build unix && !linux

package keeper

// openFDs lists the process's open descriptors: there is no /proc here
// to list them, and /dev/fd shows all of them only where fdescfs is
// mounted.
func openFDs() []int { return scanFDs() }
