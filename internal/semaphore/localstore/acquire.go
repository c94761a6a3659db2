//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// Acquire implements semaphore.Store. The first waiter in line holds the
// key's queue lock and is woken by inotify when a permit's file is closed
// or released; the waiters behind it sleep in the kernel on the queue
// lock.
func (s *Store) Acquire(ctx context.Context, req semaphore.Request) (semaphore.Lease, error) {
	if err := errors.Join(req.Validate(), noOrder(req)); err != nil {
		return nil, err
	}
	start := time.Now()
	for range maxPublish {
		lease, err := s.acquire(ctx, req, start)
		if !errors.Is(err, errKeyMoved) {
			return lease, err
		}
	}
	return nil, fmt.Errorf("key %q: its directory in %s was replaced each time semrun looked", req.Key, s.path)
}

// acquire is Acquire, called at start, in the key's directory as it is
// now. It is errKeyMoved when that directory is removed or replaced
// meanwhile.
func (s *Store) acquire(ctx context.Context, req semaphore.Request, start time.Time) (semaphore.Lease, error) {
	k, err := s.openKey(req.Key, req.Permits)
	if err != nil {
		return nil, err
	}
	defer k.close()
	l, err := s.acquireIn(ctx, k, req)
	if err != nil && k.current() != nil {
		// The directory was removed meanwhile (removeUnused): a file
		// missing or unlinked there is no fault; start again, unless the
		// wait is over, which is the fault then.
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wait for key %q: %w", req.Key, ctx.Err())
		}
		err = errKeyMoved
	}
	// Once the grant lock and the line are left, so that no one waits
	// for the event.
	if l != nil {
		k.note(l.event(semaphore.EventGrant, time.Since(start)))
	} else if e, ok := outcome(req, err, time.Since(start)); ok {
		k.note(e)
	}
	if l == nil {
		return nil, err // not a nil *lease in an interface
	}
	return l, nil
}

// outcome is the event of a call that got no permit, err, after waited;
// ok is false for one that is none: a refusal of what it asked, a
// failure, a call started again in the key's new directory.
func outcome(req semaphore.Request, err error, waited time.Duration) (semaphore.Event, bool) {
	e := semaphore.Event{Key: req.Key, HolderInfo: req.Holder, Permits: req.Permits, Weight: req.Takes()}
	var paused *semaphore.PausedError
	var busy *semaphore.BusyError
	switch {
	case req.NoWait && errors.As(err, &paused):
		e.Kind, e.Reason = semaphore.EventBusy, paused.Pause.Reason
		if e.Reason == "" {
			e.Reason = "paused"
		}
	case req.NoWait && errors.As(err, &busy):
		e.Kind = semaphore.EventBusy // every permit was held: no reason
	case req.NoWait && errors.Is(err, semaphore.ErrBusy):
		e.Kind, e.Reason = semaphore.EventBusy, "grant lock held" // tryGrant
	case req.NoWait:
		return e, false
	case errors.Is(err, context.DeadlineExceeded):
		e.Kind, e.Waited = semaphore.EventTimeout, waited
	case errors.Is(err, context.Canceled):
		e.Kind, e.Waited = semaphore.EventLeave, waited
	default:
		return e, false
	}
	return e, true
}

// acquireIn is acquire in the key's directory k.
func (s *Store) acquireIn(ctx context.Context, k *keyDir, req semaphore.Request) (*lease, error) {
	a := &attempt{s: s, k: k, req: req, capacity: req.Permits}
	defer a.close()
	var err error
	if a.permits, err = k.openPermits(); err != nil {
		return nil, err
	}
	if a.queue, err = k.open(queueFile, os.O_RDWR|os.O_CREATE); err != nil {
		return nil, err
	}
	// Without a draft, a holder has no record: status shows fewer holders
	// than permits held, and that is all.
	a.draft, _ = k.makeDraft()
	// Nobody in line: take a free permit now, or be first in line.
	lease, held, err := a.try(ctx, a.joinLine)
	if lease != nil || err != nil {
		return lease, err
	}
	if req.NoWait {
		return nil, &semaphore.BusyError{Key: req.Key, Held: held, Capacity: a.capacity}
	}
	return a.wait(ctx, held)
}

// attempt is one caller's try for a permit of a key.
type attempt struct {
	s     *Store
	k     *keyDir
	req   semaphore.Request
	grant *os.File
	queue *os.File
	// inLine: the queue lock is this caller's: it is first in line.
	inLine bool
	// unregister removes the caller's wait file (see register); nil
	// while it has none.
	unregister func()
	permits    *keyPermits // kept open while waiting
	told       bool        // the capacity was checked
	draft      *draft      // the holder's record to be; nil when it could not be made
	granted    bool
	// coolEnd is when the first cooling ends, as the last try found;
	// zero with none.
	coolEnd time.Time
	// The key's settings as the last try read them (policy.go): capacity
	// is the N the caller is admitted against, the stored one when stored
	// is set, else its own; paused is the pause in force, nil when none,
	// and pauseEnd when it ends by itself; names are the names of the
	// key's slots, as read. skipped: a file that is no policy was said.
	capacity int
	stored   bool
	names    []string
	paused   *semaphore.Pause
	pauseEnd time.Time
	skipped  bool
	// recentHold is how long the key's recent holds lasted, as the wait
	// began (Counts.RecentHold).
	recentHold time.Duration
}

// joinLine takes the queue lock, without waiting for it, and tells whether
// the caller may take a free permit now: nobody was in line. A caller that
// will not wait also may when the lock is taken but nobody waits: a wait
// given up inside a long-lived process holds the lock for an instant once
// its turn comes (a blocked flock cannot be interrupted); a caller that
// takes the lock and finds no permit registers as a waiter before it drops
// the grant lock (try).
func (a *attempt) joinLine() (bool, error) {
	ok, err := flock(a.queue, unix.LOCK_EX|unix.LOCK_NB)
	a.inLine = ok
	if ok || err != nil || !a.req.NoWait {
		return ok, err
	}
	return !a.k.anyLocked(waitPrefix), nil
}

// wait waits in line for a permit, held being the permits held when it last
// looked.
func (a *attempt) wait(ctx context.Context, held int) (*lease, error) {
	onWait := a.req.OnWait
	if onWait == nil {
		onWait = func(semaphore.WaitState) {}
	}
	a.recentHold = a.k.recentHold()
	st := a.waitState(held)
	if a.inLine {
		st.Position = 1
	}
	onWait(st)
	if a.unregister == nil {
		var err error
		if a.unregister, err = a.register(); err != nil {
			return nil, err
		}
	}
	if !a.inLine {
		if err := lockWait(ctx, a.queue); err != nil {
			a.queue = nil // lockWait closes it
			return nil, fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
		a.inLine = true
		st.Position = 1
		onWait(st)
	}
	return a.waitForPermit(ctx, onWait, st)
}

// waitState is what the caller waits for, held being the permits held when
// it last looked.
func (a *attempt) waitState(held int) semaphore.WaitState {
	st := semaphore.WaitState{Held: held, Capacity: a.capacity, RecentHold: a.recentHold}
	if a.paused != nil {
		st.Paused, st.Pause = true, *a.paused
		st.Pause.EndsIn = st.Pause.EndsIn.Round(time.Second)
	}
	return st
}

// waitForPermit waits, first in line, for a permit, telling onWait when a
// pause begins, ends or changes (last is what it was told last). The
// watch starts before the permits are looked at, so no release between the
// two goes unnoticed; a change of settings rings it as a release does.
func (a *attempt) waitForPermit(ctx context.Context, onWait func(semaphore.WaitState), last semaphore.WaitState) (*lease, error) {
	w := watchPermits(a.k)
	// Dropping the last inotify watch of a directory makes the kernel wait
	// for a grace period (10ms and more measured): not before the child.
	defer func() { go w.close() }()
	recheck := slowRecheck
	lastEnd := a.pauseEnd
	for {
		lease, held, err := a.try(ctx, nil)
		if lease != nil || err != nil {
			return lease, err
		}
		if st := a.waitState(held); st.Paused != last.Paused || st.Pause.Reason != last.Pause.Reason || !a.pauseEnd.Equal(lastEnd) {
			st.Position = 1
			onWait(st)
			last, lastEnd = st, a.pauseEnd
		}
		woken, err := w.wait(ctx, nextLook(recheck, a))
		if err != nil {
			return nil, fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
		recheck = afterLook(recheck, woken)
	}
}

// nextLook is how long a waiter first in line waits for a release of
// the keys of as before it looks again: recheck, or less when a cooling
// or a pause ends first, since no event marks either end.
func nextLook(recheck time.Duration, as ...*attempt) time.Duration {
	wait := recheck
	for _, a := range as {
		for _, end := range []time.Time{a.coolEnd, a.pauseEnd} {
			if !end.IsZero() {
				wait = min(wait, max(time.Until(end), firstFollowup))
			}
		}
	}
	return wait
}

// afterLook is the recheck after a look: soon after a release woke the
// waiter, and ever later, up to slowRecheck, while none does.
func afterLook(recheck time.Duration, woken bool) time.Duration {
	switch {
	case woken:
		return firstFollowup
	case recheck < slowRecheck:
		return min(recheck*4, slowRecheck)
	}
	return recheck
}

// try takes the key's grant lock and, when gate (if any) lets it, a free
// permit, unless the key's settings hold it back. It returns the lease, or
// nil and how many permits are held.
func (a *attempt) try(ctx context.Context, gate func() (bool, error)) (*lease, int, error) {
	if err := a.lockGrant(ctx); err != nil {
		return nil, 0, err
	}
	defer func() { _, _ = flock(a.grant, unix.LOCK_UN) }()
	taken, held, err := a.takePermits(gate)
	if taken == nil {
		return nil, held, err
	}
	l, err := a.lease(taken)
	return l, held, err
}

// takePermits is try's under the grant lock: the permits it takes, or nil
// and how many are held. A caller of several keys takes each key's so, all
// under their grant locks (AcquireAll).
func (a *attempt) takePermits(gate func() (bool, error)) (*heldPermits, int, error) {
	a.readPolicy(time.Now())
	if w := a.req.Takes(); w > a.capacity {
		// Refused rather than left waiting: first in line, it would keep
		// everyone behind it waiting for a grant that cannot come. Refused,
		// it is no caller of the key: it records and is told nothing more.
		return nil, 0, &semaphore.SettingError{Setting: semaphore.WeightSetting, Value: w,
			Err: fmt.Errorf("more than key %q's stored capacity of %d (semrun key set): it could never be granted", a.req.Key, a.capacity)}
	}
	if !a.told {
		a.told = true
		a.checkCapacity()
	}
	if a.paused != nil && a.req.NoWait {
		return nil, 0, &semaphore.PausedError{Key: a.req.Key, Pause: *a.paused}
	}
	if gate != nil {
		ok, err := gate()
		if err != nil || !ok {
			// Someone is in line: every permit was held when it last looked.
			return nil, a.capacity, err
		}
	}
	a.coolEnd = time.Time{}
	// Paused, nothing is granted. Permits may be held past the capacity, where
	// take does not look: a stored capacity lowered or unset, or callers
	// that asked for more. Nothing is granted until fewer are held, as
	// Redis does: the holders are counted wherever they sit.
	held, err := a.heldNow()
	if err != nil || a.paused != nil || held+a.req.Takes() > a.capacity {
		return a.notNow(held, err)
	}
	taken, held, err := a.permits.take(a.capacity, a.req.Takes(), a.queue, a.inLine, a.cooling)
	if err != nil || taken == nil {
		return a.notNow(held, err)
	}
	return taken, held, nil
}

// notNow is takePermits's answer when no permit was taken, held being how
// many are held. First in line, a caller that will wait has its wait file
// there before the grant lock is dropped, so that a caller that will not
// wait sees the line (joinLine).
func (a *attempt) notNow(held int, err error) (*heldPermits, int, error) {
	if err == nil && a.inLine && !a.req.NoWait && a.unregister == nil {
		a.unregister, err = a.register()
	}
	return nil, held, err
}

// readPolicy reads the key's settings, under the grant lock; a file that
// is no policy is said once.
func (a *attempt) readPolicy(now time.Time) {
	p, err := a.k.readPolicy(now)
	if err != nil && !a.skipped {
		a.skipped = true
		a.s.warnf("key %q: skipped its settings: %v", a.req.Key, err)
	}
	a.capacity, a.stored = a.req.Permits, p.Capacity > 0
	if a.stored {
		a.capacity = p.Capacity
	}
	a.paused, a.pauseEnd = p.paused(now), p.pauseEnd()
	a.names = nil
	if a.stored {
		a.names = p.SlotNames // checked once granted (lease)
	}
}

// heldNow counts the key's permits held, wherever they are, and its
// coolings; under the grant lock.
func (a *attempt) heldNow() (int, error) {
	held, err := a.permits.held(a.capacity)
	if err != nil {
		return 0, err
	}
	return min(held+a.cooling(a.permits.anyFree).n, semaphore.MaxPermits), nil
}

// cooling counts the permits the key's coolings take, anyFree telling
// which pending ones count (cool.go), and keeps when the first ends for
// the wait; the grant lock is held.
func (a *attempt) cooling(anyFree anyFreeFunc) coolCount {
	c := a.k.cooling(time.Now(), anyFree)
	a.coolEnd = c.first
	return c
}

// lockGrant takes the key's grant lock, and checks that the key's
// directory is still the one open (see removeUnused). The lock is held
// for a fraction of a millisecond, unless its holder was stopped there:
// the wait for it can be given up, and a caller that will not wait gives
// up after grantBudget.
func (a *attempt) lockGrant(ctx context.Context) error {
	if a.grant == nil {
		f, err := a.k.open(grantFile, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return err
		}
		a.grant = f
	}
	if a.req.NoWait {
		if err := a.tryGrant(ctx); err != nil {
			return err
		}
	} else if err := lockWait(ctx, a.grant); err != nil {
		a.grant = nil // lockWait closed it
		if ctx.Err() != nil {
			return fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
		return err
	}
	if err := a.k.current(); err != nil {
		_, _ = flock(a.grant, unix.LOCK_UN)
		return err
	}
	return nil
}

// How long a caller that will not wait tries for the grant lock, and how
// often. The lock is held for tens of microseconds a grant, up to a few
// milliseconds with hundreds of holders, and callers queue for it: ten
// tries in 10ms gave busy to 6% of four callers taking and giving back
// permits that were free, and 100ms still gave busy to one in 400 on a
// loaded two-core host, whose scheduler left a holder of the lock off
// the CPU that long. Only a process stopped inside a grant makes a
// caller wait the whole second.
const (
	grantBudget = time.Second
	grantPause  = time.Millisecond
)

// tryGrant takes the grant lock without waiting in the kernel.
func (a *attempt) tryGrant(ctx context.Context) error {
	deadline := time.Now().Add(grantBudget)
	for {
		if ok, err := flock(a.grant, unix.LOCK_EX|unix.LOCK_NB); ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("key %q: another process holds its grant lock (stopped while it took a permit?): %w", a.req.Key, semaphore.ErrBusy)
		}
		if err := clock.Sleep(ctx, grantPause); err != nil {
			return fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
	}
}

// lease makes the permits taken a lease with the key's next token, and
// leaves a file saying who holds it; the grant lock is held.
func (a *attempt) lease(taken *heldPermits) (*lease, error) {
	token, err := a.nextToken()
	if err != nil {
		_ = taken.release()
		return nil, err
	}
	now := time.Now()
	l := &lease{
		locks: taken, token: token, key: a.req.Key, permits: a.capacity, weight: a.req.Takes(), sinceMS: now.UnixMilli(),
		granted: now, holder: a.req.Holder, minHold: a.req.MinHold, coolAfter: a.req.MinHoldAfter,
		slots: slotsOf(taken.permitSpans(), a.capacity, checkedNames(a.names, a.capacity)),
	}
	a.granted = true
	// The record is for status, and revokes: a permit is held by its lock.
	if a.draft != nil {
		rec := record{ID: newID(), HolderInfo: a.req.Holder, Permits: l.permits, Weight: l.weight, Token: token, SinceMS: l.sinceMS}.withSlots(l.slots)
		if f, dir, name, err := a.draft.publish(rec); err == nil {
			l.record, l.k, l.name, l.id = f, a.k.with(dir), name, rec.ID
		}
	}
	if l.k == nil {
		// For the release's event, and a cooling. A cooling, unlike a
		// record or an event, is no extra: without a directory to leave
		// it in, no grant.
		dir, err := reopenDir(a.k.dir)
		switch {
		case err == nil:
			l.k = a.k.with(dir)
		case l.minHold > 0:
			_ = taken.release()
			return nil, fmt.Errorf("key %q: key directory %s: %w", a.req.Key, a.k.path, err)
		}
	}
	if l.minHold > 0 {
		// With the grant, so that it outlives a holder that never gives
		// the permit back (cool.go).
		if err := l.pendCooling(); err != nil {
			l.dropRecord()
			l.k.close()
			_ = taken.release()
			return nil, fmt.Errorf("key %q: %w", a.req.Key, err)
		}
	}
	return l, nil
}

// nextToken hands out the key's next fencing token; the grant lock is held.
// Seeding from the clock keeps tokens rising after the lock directory is
// emptied, as /run is at boot.
func (a *attempt) nextToken() (int64, error) {
	f, err := a.k.open(tokenFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	var last int64
	if text := strings.TrimSpace(string(buf[:n])); text != "" {
		// Anything but a count could hide a token handed out: no grant
		// until someone who knows the key's users mends it.
		if last, err = strconv.ParseInt(text, 10, 64); err != nil || last < 0 {
			return 0, fmt.Errorf("key %q: its token file %s holds %q, not a fencing token; no grant until it is mended: %s", a.req.Key, f.Name(), text, tokenRepair(a.k))
		}
	}
	if last == math.MaxInt64 {
		return 0, fmt.Errorf("key %q: its fencing token is at its limit (%d); no grant until it is mended: %s", a.req.Key, last, tokenRepair(a.k))
	}
	token := max(last+1, time.Now().UnixMicro())
	if _, err := f.WriteAt(fmt.Appendf(nil, "%020d\n", token), 0); err != nil {
		return 0, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return token, nil
}

// tokenRepair says how to mend a key's token file.
func tokenRepair(k *keyDir) string {
	return fmt.Sprintf("when no one holds the key, remove %s; tokens then start again from the clock, below those handed out, which whoever checks them must be told", k.path)
}

// checkCapacity records the N this call asks for, and warns when it is
// admitted against another, stored, or else when the last caller asked
// for another; the grant lock is held.
func (a *attempt) checkCapacity() {
	if a.stored && a.capacity != a.req.Permits {
		a.s.warnf("key %q: its stored capacity of %d wins over the %s this call asks for (semrun key)", a.req.Key, a.capacity, semaphore.Count(a.req.Permits, "permit"))
	}
	f, err := a.k.open(capacityFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	previous, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err == nil && previous == a.req.Permits {
		return
	}
	if err == nil && !a.stored {
		a.s.warnf("key %q: this call asks for %s, the previous caller asked for %d", a.req.Key, semaphore.Count(a.req.Permits, "permit"), previous)
	}
	b := fmt.Appendf(nil, "%d\n", a.req.Permits)
	if _, err := f.WriteAt(b, 0); err == nil {
		_ = f.Truncate(int64(len(b)))
	}
}

// register leaves a locked file in the key's directory while the caller
// waits, so that status can count and show waiters. It also removes the
// files of waiters that are gone.
func (a *attempt) register() (func(), error) {
	a.k.removeStale(waitPrefix)
	f, name, err := a.k.makeRecord(waitPrefix, record{HolderInfo: a.req.Holder, Permits: a.req.Permits, Weight: a.req.Takes(), SinceMS: time.Now().UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", a.req.Key, err)
	}
	return func() {
		_ = unix.Unlinkat(int(a.k.dir.Fd()), name, 0)
		f.Close()
	}, nil
}

// close gives back what the attempt holds and has open, but the permits of
// the lease it returned.
func (a *attempt) close() {
	if a.draft != nil {
		a.draft.close()
	}
	if a.granted {
		a.k.sweepRecords(a.capacity)
	}
	if a.unregister != nil {
		a.unregister()
	}
	if a.inLine {
		_, _ = flock(a.queue, unix.LOCK_UN)
	}
	if a.queue != nil {
		a.queue.Close()
	}
	if a.permits != nil {
		a.permits.close()
	}
	if a.grant != nil {
		a.grant.Close()
	}
}

// errNoLine says why a lock directory refuses to order its line: its
// waiters are served as the kernel wakes them, first in line the one
// that holds the queue lock, with no order it could keep by priority.
var errNoLine = errors.New("the lock directory keeps no strict line to order (use Redis)")

// noOrder refuses what a lock directory cannot honour: a priority other
// than 0, an age, a supersede.
func noOrder(req semaphore.Request) error {
	switch {
	case req.Priority != 0:
		return &semaphore.SettingError{Setting: semaphore.PrioritySetting, Value: req.Priority, Err: errNoLine}
	case req.PriorityAge != 0:
		return &semaphore.SettingError{Setting: semaphore.PriorityAgeSetting, Value: req.PriorityAge, Err: errNoLine}
	case req.Supersede:
		return &semaphore.SettingError{Setting: semaphore.SupersedeSetting, Value: true, Err: errNoLine}
	}
	return nil
}
