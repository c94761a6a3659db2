//go:build unix

package cmd

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// owner is --owner-pid's process, watched for its exit: through a pidfd
// where the system has one (Linux 5.3 and later), which no new process
// can take the pid of; else by asking every second whether the pid
// still exists.
type owner struct {
	pid int
	fd  *os.File // the pidfd; nil without one
}

// findOwner finds the process pid, and opens a pidfd of it where it can.
func findOwner(pid int) (*owner, error) {
	if pid <= 0 {
		return nil, errors.New("must be a process id")
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil, errors.New("no such process")
	}
	o := &owner{pid: pid}
	if fd, err := pidfdOpen(pid); err == nil {
		o.fd = os.NewFile(uintptr(fd), "owner pidfd")
	}
	return o, nil
}

// ownerOf is the owner a keeper was handed: its pidfd as fd, when it came.
func ownerOf(pid int, hasFD bool) *owner {
	o := &owner{pid: pid}
	if hasFD {
		o.fd = os.NewFile(keeperOwnerFD, "owner pidfd")
	}
	return o
}

// file is the pidfd to hand to the keeper; nil without one.
func (o *owner) file() *os.File {
	if o == nil {
		return nil
	}
	return o.fd
}

func (o *owner) close() {
	if o != nil && o.fd != nil {
		o.fd.Close()
	}
}

// wait tells, once it knows, that the owner exited; false when ctx ended
// first.
func (o *owner) wait(ctx context.Context) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if o.exited() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// exited tells whether the owner has exited: its pidfd reads as ready,
// or its pid is gone. A zombie has exited.
func (o *owner) exited() bool {
	if o.fd != nil {
		fds := []unix.PollFd{{Fd: int32(o.fd.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	}
	return errors.Is(syscall.Kill(o.pid, 0), syscall.ESRCH)
}
