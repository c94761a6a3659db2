//go:build unix

package keeper

import "golang.org/x/sys/unix"

// maxScanned bounds scanFDs: Go raises the limit of open files to the
// hard one, which can be in the millions.
const maxScanned = 1 << 16

// scanFDs lists the open descriptors below the limit of open files (at
// most maxScanned) by asking each: where no directory lists them.
func scanFDs() []int {
	limit := uint64(maxScanned)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		limit = min(limit, uint64(rl.Cur)) // RLIM_INFINITY, -1 on some systems, counts as the most
	}
	var fds []int
	for fd := range int(limit) {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}
