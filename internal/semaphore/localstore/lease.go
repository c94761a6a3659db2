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
	// What it was granted, for Hold to write in the hold's record.
	key             string
	permits, weight int
	sinceMS         int64
	// record is the holder's file (see makeRecord), name in the key's
	// directory dir; nil when it could not be made.
	record *os.File
	dir    *os.File
	name   string

	once     sync.Once
	released atomic.Bool
	err      error
	// held: the permit was made a hold (Hold), once: two holds of one
	// seat would each let their runs in.
	held atomic.Bool
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

// Bound is zero: nothing renews a lock, so nothing can stop renewing it.
// The holder stops its command at its max runtime.
func (l *lease) Bound() clock.Instant { return clock.Instant{} }

// Finish gives the permit back.
func (l *lease) Finish(ctx context.Context, _ int) error { return l.Release(ctx) }

func (l *lease) Release(context.Context) error {
	l.once.Do(func() {
		l.released.Store(true)
		// Removed before the seats are given back, never after, when the
		// next holder's could be there.
		l.dropRecord()
		l.err = l.seats.release()
	})
	return l.err
}

// dropRecord removes the holder's record, if any: at a release, or when
// the permit becomes a hold, whose own record says who holds it then.
func (l *lease) dropRecord() {
	if l.record == nil {
		return
	}
	_ = unix.Unlinkat(int(l.dir.Fd()), l.name, 0)
	_, _ = flock(l.record, unix.LOCK_UN)
	l.record.Close()
	l.dir.Close()
	l.record = nil
}
