//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// lease is a grant held: locks on its permits, and a locked file that
// says who holds it.
type lease struct {
	locks *heldPermits
	token int64
	// What it was granted, for Hold to write in the hold's record and
	// Finish in a cooling's.
	key             string
	permits, weight int
	sinceMS         int64
	granted         time.Time // sinceMS, with the monotonic clock, for how long it was held
	holder          semaphore.HolderInfo
	minHold         time.Duration
	// k is the key's directory, through a descriptor of the lease's own;
	// nil when it could not be opened and the permit needs none (no
	// record, no min hold).
	k *keyDir
	// record is the holder's file (see makeRecord), name in k; nil when
	// it could not be made. id is the holder's public id, which it
	// says; empty without a record: no one can revoke what status does
	// not show.
	record *os.File
	name   string
	id     string

	// mu keeps Renew from looking through k while giveBack closes it;
	// revoked is what Renew found once it was revoked.
	mu       sync.Mutex
	revoked  error
	once     sync.Once
	released atomic.Bool
	err      error
	// held: the permit was made a hold (Hold), once: two holds of one
	// permit would each let their runs in.
	held atomic.Bool
}

func (l *lease) Token() int64 { return l.token }

// Deadline is zero: the kernel holds the lock for as long as the holder
// lives, and nothing can take it away.
func (l *lease) Deadline() clock.Instant { return clock.Instant{} }

// Renew has nothing to renew: the permit holds until it is released. It
// looks whether an operator revoked it (a *semaphore.RevokedError then),
// which its holder learns by calling it every second (runner.CheckEvery):
// one stat of a file that is missing unless it was.
func (l *lease) Renew(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released.Load() {
		return fmt.Errorf("renew: released: %w", semaphore.ErrLost)
	}
	if l.revoked != nil || l.id == "" || l.record == nil {
		return l.revoked // no record, or a hold's now (Hold): nothing to revoke it by
	}
	l.revoked = l.k.revoked(l.key, l.id)
	return l.revoked
}

// Files are the permits' file or files, and the holder's: with them, a
// child keeps the permits held, and shown by status, until the last process
// of its job has exited, even when semrun is killed. All are read-only.
func (l *lease) Files() []*os.File {
	files := l.locks.files()
	if l.record != nil {
		files = append(files, l.record)
	}
	return files
}

// Bound is zero: nothing renews a lock, so nothing can stop renewing it.
// The holder stops its command at its max runtime.
func (l *lease) Bound() clock.Instant { return clock.Instant{} }

// Finish gives the permit back, leaving it cooling (cool.go) when its
// min hold is still to pass; a permit made a hold's does not cool.
func (l *lease) Finish(_ context.Context, exitStatus int) error { return l.giveBack(true, exitStatus) }

func (l *lease) Release(context.Context) error { return l.giveBack(false, -1) }

// giveBack gives the permit back, cooling first when cool is set, and
// notes it; exitStatus is how its command ended, -1 when none ran.
func (l *lease) giveBack(cool bool, exitStatus int) error {
	l.once.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.released.Store(true)
		// Removed before the permits are given back, never after, when the
		// next holder's could be there.
		l.dropRecord()
		if l.id != "" && l.k != nil {
			_ = unix.Unlinkat(int(l.k.dir.Fd()), revokePrefix+l.id, 0) // its revoke, if any, has done its work
		}
		var cooling time.Duration
		var err error
		if cool && !l.held.Load() {
			// Visible before the permits are unlocked, never after: see
			// cool.go.
			cooling, err = l.cool(exitStatus)
		}
		l.err = errors.Join(err, l.locks.release())
		if l.k != nil {
			// Once the permits are free, so that the next holder need not
			// wait for it; a hold's permit is given back when the hold
			// ends (EndHold).
			if !l.held.Load() {
				e := l.event(semaphore.EventRelease, 0)
				e.Held, e.Cooling = time.Since(l.granted), cooling
				if exitStatus >= 0 {
					e.ExitStatus = &exitStatus
				}
				l.k.note(e)
			}
			l.k.close()
		}
	})
	return l.err
}

// event is an event of kind of the lease's holder, after waited.
func (l *lease) event(kind semaphore.EventKind, waited time.Duration) semaphore.Event {
	return semaphore.Event{
		Kind: kind, Key: l.key, Holder: l.id, HolderInfo: l.holder, Permits: l.permits, Weight: l.weight,
		Token: l.token, Waited: waited,
	}
}

// cool leaves the permit cooling until its min hold after its grant,
// unless that has passed, and says how long it cools.
func (l *lease) cool(exitStatus int) (time.Duration, error) {
	ends := l.sinceMS + l.minHold.Milliseconds()
	now := time.Now().UnixMilli()
	if l.minHold <= 0 || now >= ends {
		return 0, nil
	}
	r := coolRecord{
		record:     record{ID: l.id, HolderInfo: l.holder, Permits: l.permits, Weight: l.weight, Token: l.token, SinceMS: l.sinceMS},
		EndsMS:     ends,
		ExitStatus: min(max(exitStatus, -1), 255),
	}
	if err := l.k.publishCooling(r); err != nil {
		return 0, fmt.Errorf("key %q: given back at once, not kept for its min hold: %w", l.key, err)
	}
	return time.Duration(ends-now) * time.Millisecond, nil
}

// dropRecord removes the holder's record, if any: at a release, or when
// the permit becomes a hold, whose own record says who holds it then.
func (l *lease) dropRecord() {
	if l.record == nil {
		return
	}
	_ = unix.Unlinkat(int(l.k.dir.Fd()), l.name, 0)
	_, _ = flock(l.record, unix.LOCK_UN)
	l.record.Close()
	l.record = nil
}
