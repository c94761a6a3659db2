//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// lease is a held permit: exclusive flocks on its seats' files.
type lease struct {
	seats []*os.File
	token int64

	once     sync.Once
	released atomic.Bool
	err      error
}

func (l *lease) Token() int64 { return l.token }

// Deadline is zero: the kernel holds the lock for as long as the holder lives.
func (l *lease) Deadline() clock.Instant { return clock.Instant{} }

// Renew has nothing to renew: the permit holds until it is released.
func (l *lease) Renew(context.Context) error {
	if l.released.Load() {
		return fmt.Errorf("renew: released: %w", semaphore.ErrLost)
	}
	return nil
}

// Files are the seats' files: with them, a child keeps the seats held until
// the last process of its job has exited, even when semrun is killed.
func (l *lease) Files() []*os.File { return l.seats }

func (l *lease) Release(context.Context) error {
	l.once.Do(func() {
		l.released.Store(true)
		var errs []error
		for _, seat := range l.seats {
			// The record is cleared before the lock is dropped, never
			// after, when it could be the next holder's.
			_ = seat.Truncate(0)
			_, err := flock(seat, unix.LOCK_UN)
			// The close alone may not wake the first waiter in line:
			// processes the child left may still have the file open.
			ring(seat)
			errs = append(errs, err, seat.Close())
		}
		l.err = errors.Join(errs...)
	})
	return l.err
}
