//go:build unix

package keeper

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Owner is --owner-pid's process, watched for its exit: through a pidfd
// where the system has one (Linux 5.3 and later), which no new process
// can take the pid of; else by asking every second whether the pid
// still exists.
type Owner struct {
	pid int
	fd  *os.File // the pidfd; nil without one
}

// ErrNoProcess means no process has the pid asked for.
var ErrNoProcess = errors.New("no such process")

// FindOwner finds the process pid (a positive pid), and opens a pidfd of
// it where it can, for the keeper to inherit.
func FindOwner(pid int) (*Owner, error) {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil, ErrNoProcess
	}
	o := &Owner{pid: pid}
	if fd, err := pidfdOpen(pid); err == nil {
		o.fd = os.NewFile(uintptr(fd), "owner pidfd")
	}
	return o, nil
}

// owner is the owner the keeper was handed: its pidfd as descriptor 5,
// when it came.
func (p *Parent) owner() *Owner {
	o := &Owner{pid: p.OwnerPID}
	if p.OwnerFD {
		o.fd = os.NewFile(ownerFD, "owner pidfd")
	}
	return o
}

// HasFD tells whether a pidfd of the owner is handed to the keeper.
func (o *Owner) HasFD() bool { return o.file() != nil }

// file is the pidfd to hand to the keeper; nil without one.
func (o *Owner) file() *os.File {
	if o == nil {
		return nil
	}
	return o.fd
}

// Close lets go of the owner's pidfd.
func (o *Owner) Close() {
	if o != nil && o.fd != nil {
		o.fd.Close()
	}
}

// exited tells whether the owner has exited: its pidfd reads as ready,
// or its pid is gone. A zombie has exited.
func (o *Owner) exited() bool {
	if o.fd != nil {
		fds := []unix.PollFd{{Fd: int32(o.fd.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	}
	return errors.Is(syscall.Kill(o.pid, 0), syscall.ESRCH)
}
