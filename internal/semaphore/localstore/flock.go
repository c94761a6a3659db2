//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// flock applies how (unix.LOCK_*) to f. It reports false, without error,
// when LOCK_NB was asked and the lock is held elsewhere.
func flock(f *os.File, how int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lockErr = unix.Flock(int(fd), how)
			if !errors.Is(lockErr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if errors.Is(lockErr, unix.EWOULDBLOCK) {
		return false, nil
	}
	if lockErr != nil {
		return false, fmt.Errorf("lock %s: %w", f.Name(), lockErr)
	}
	return true, nil
}

// lockWait takes an exclusive lock on f, waiting in the kernel, which wakes
// the waiter when the lock is dropped. It gives up when ctx ends. On any
// error it owns f: it closes f (when ctx ended, dropping a lock obtained
// after that at once).
func lockWait(ctx context.Context, f *os.File) error {
	if ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB); ok || err != nil {
		if err != nil {
			f.Close()
		}
		return err // the usual case, without a goroutine
	}
	got := make(chan error, 1)
	go func() {
		_, err := flock(f, unix.LOCK_EX)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
		}
		return err
	case <-ctx.Done():
		go func() {
			if <-got == nil {
				_, _ = flock(f, unix.LOCK_UN)
			}
			f.Close()
		}()
		return ctx.Err()
	}
}
