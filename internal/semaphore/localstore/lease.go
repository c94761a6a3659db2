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
	coolAfter       semaphore.CoolAfter
	slots           semaphore.Slots
	// cool names the permit's cooling in k, pending while it holds
	// (cool.go); empty without a min hold, or once given back.
	cool string
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
// min hold is still to pass and its command's status, exitStatus, is
// one that cools (Request.MinHoldAfter); a permit made a hold's does not
// cool.
func (l *lease) Finish(_ context.Context, exitStatus int) error { return l.giveBack(true, exitStatus) }

// Release gives the permit back at once: no command ran under it.
func (l *lease) Release(context.Context) error { return l.giveBack(false, -1) }

// giveBack gives the permit back, cooling first when cool is set and its
// command's status, exitStatus (-1 when none ran), cools; and notes it.
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
		// Settled before the permits are unlocked, never after: see
		// cool.go.
		if cool && !l.held.Load() && l.coolAfter.Cools(exitStatus) {
			cooling, err = l.finishCooling(exitStatus)
		} else {
			err = l.dropCooling()
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
		Token: l.token, Waited: waited, Slots: cloneSlots(l.slots),
	}
}

// coolRecord is the permit's cooling, its command's status exitStatus.
func (l *lease) coolRecord(exitStatus int) coolRecord {
	return coolRecord{
		record:     record{ID: l.id, HolderInfo: l.holder, Permits: l.permits, Weight: l.weight, Token: l.token, SinceMS: l.sinceMS}.withSlots(l.slots),
		EndsMS:     l.sinceMS + l.minHold.Milliseconds(),
		ExitStatus: min(max(exitStatus, -1), 255),
		Seats:      spanRuns(l.locks.permitSpans()),
	}
}

// pendCooling leaves the permit's cooling, pending while it is held, its
// command's status unknown; under the grant lock, at its grant.
func (l *lease) pendCooling() error {
	name, err := l.k.publishCooling(l.coolRecord(-1))
	if err != nil {
		return fmt.Errorf("no grant without its cooling (--min-hold): %w", err)
	}
	l.cool = name
	return nil
}

// finishCooling leaves the permit cooling until its min hold after its
// grant, with its command's status, unless that has passed, and says how
// long it cools. A cooling that could not be written anew still cools,
// its status unknown.
func (l *lease) finishCooling(exitStatus int) (time.Duration, error) {
	r := l.coolRecord(exitStatus)
	now := time.Now().UnixMilli()
	if l.cool == "" || now >= r.EndsMS {
		return 0, l.dropCooling()
	}
	_ = l.k.rewriteCooling(l.cool, r)
	l.cool = ""
	return time.Duration(r.EndsMS-now) * time.Millisecond, nil
}

// dropCooling removes the permit's cooling, if any: it owes none.
func (l *lease) dropCooling() error {
	if l.cool == "" {
		return nil
	}
	err := unix.Unlinkat(int(l.k.dir.Fd()), l.cool, 0)
	l.cool = ""
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("key %q: remove its cooling record %s: %w; it stays taken until its min hold passed", l.key, l.k.path, err)
	}
	return nil
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

// Slots are the permits it locks (slots.go).
func (l *lease) Slots() semaphore.Slots { return cloneSlots(l.slots) }
