//go:build unix

package localstore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// lease is a held permit: locks on its seats, and a locked file that
// says who holds it.
type lease struct {
	seats *heldSeats
	token int64
	// record is the holder's file (see makeRecord), name in the key's
	// directory dir; nil when it could not be made.
	record *os.File
	dir    *os.File
	name   string

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

// Files are the seats' file or files, and the holder's: with them, a
// child keeps the seats held, and shown by status, until the last process
// of its job has exited, even when semrun is killed. All are read-only.
func (l *lease) Files() []*os.File {
	files := l.seats.files()
	if l.record != nil {
		files = append(files, l.record)
	}
	return files
}

func (l *lease) Release(context.Context) error {
	l.once.Do(func() {
		l.released.Store(true)
		if l.record != nil {
			// Removed before the seats are given back, never after, when
			// the next holder's could be there.
			_ = unix.Unlinkat(int(l.dir.Fd()), l.name, 0)
			_, _ = flock(l.record, unix.LOCK_UN)
			l.record.Close()
			l.dir.Close()
		}
		l.err = l.seats.release()
	})
	return l.err
}
