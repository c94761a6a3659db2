package keeper

import (
	"os"
	"strconv"
)

// openFDs lists the process's open descriptors, as /proc shows them (the
// one that reads them among them).
func openFDs() []int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return scanFDs()
	}
	var fds []int
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}
