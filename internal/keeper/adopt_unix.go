//go:build unix

package keeper

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Adopt is what semrun acquire told this process, its keeper, on its
// descriptor 3. Once that has been read, the keeper lets go of everything
// else it inherited: every descriptor but its own pipes (and the owner's
// pidfd) is closed, so that a caller's pipe, lock or mount is not kept
// open by it, and its stdio is the null device. A message that cannot be
// read leaves everything as it was, for the error to be seen.
func Adopt() (*Parent, error) {
	if _, err := unix.FcntlInt(inFD, unix.F_GETFD, 0); err != nil {
		return nil, errors.New("nothing on descriptor 3")
	}
	in := os.NewFile(inFD, "keeper message")
	p, err := readMessage(in)
	if err != nil {
		in.Close()
		return nil, err
	}
	keep := []int{inFD, readyFD}
	if p.OwnerFD {
		keep = append(keep, ownerFD)
	}
	if err := detach(keep); err != nil {
		in.Close()
		return nil, err
	}
	p.ready = os.NewFile(readyFD, "keeper ready")
	return p, nil
}

// detach puts the null device on stdin, stdout and stderr, and closes
// every descriptor above them that this process inherited but keep. An
// inherited descriptor is one that crossed exec, which a descriptor marked
// close-on-exec cannot: Go opens every file of its own so, and none of
// those is touched.
func detach(keep []int) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	for fd := range 3 {
		if err := unix.Dup2(int(null.Fd()), fd); err != nil {
			return err
		}
	}
	for _, fd := range openFDs() {
		if fd < 3 || slices.Contains(keep, fd) {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_ = unix.Close(fd)
		}
	}
	return nil
}

// Settle makes / the keeper's directory, so that it keeps no mount of its
// caller's busy: once the relative paths of its settings are absolute.
func Settle() error { return os.Chdir("/") }
