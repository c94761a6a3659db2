package semaphoretest

import (
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// crashRules are the rules of holders that crashed (SIGKILL: neither
// renewed nor released, their files closed) and of the silence after
// them, when nobody calls the key: a min hold still cools, and status
// reads a key as a grant and a renewal would, so that the operator's
// window (key drain) is exclusive.
var crashRules = []rule{
	{"CrashedHolderCools", ruleCrashedHolderCools},
	{"CrashedWaiterHandedAPermitCools", ruleCrashedWaiterHandedAPermitCools},
	{"StatusShowsWhatARenewalKeeps", ruleStatusShowsWhatARenewalKeeps},
	{"LapsedStaysLost", ruleLapsedStaysLost},
	{"LapsedHoldOnAPausedKeyStaysLost", ruleLapsedHoldOnAPausedKeyStaysLost},
}

// crashTTL is the lease of the crash rules: short, so that a silence past
// it, and past what a store's leases may be pushed back by after a
// silence it cannot tell from a step of its clock, is a few seconds.
const crashTTL = time.Second

// pastCrash is a silence past a crashTTL lease, past what it is pushed
// back by (a lease more), and past the life of a store's records were it
// the lease's (a second more).
const pastCrash = 2*crashTTL + 500*time.Millisecond

// crashMinHold is the min hold of the crash rules: longer than pastCrash,
// with room for a loaded machine to look at the key before it ends.
const crashMinHold = pastCrash + 5*time.Second

// cooledAfterCrash checks that key, whose holder granted at start with
// crashMinHold crashed and whose key nobody called since, is busy and
// shows the permit taken, then frees once the min hold has passed, not
// before.
func cooledAfterCrash(t *testing.T, st semaphore.Store, key string, start time.Time) {
	t.Helper()
	other := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	busyNow(t, st, other, "after its holder crashed and a silence, within its min hold")
	if s := StatusOf(t, st, key); s.Held != 1 || len(s.Holders)+len(s.Cooling) != 1 {
		t.Errorf("Status after the holder crashed, within its min hold: got %+v, want its permit taken (held or cooling)", s)
	}
	other.NoWait = true
	var got semaphore.Lease
	WaitFor(t, crashMinHold+10*time.Second, "a no-wait Acquire granted once the min hold passed", func() bool {
		l, err := AcquireWithin(t, st, 5*time.Second, other)
		if err != nil && !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("no-wait Acquire after the crash: got %v, want a permit or ErrBusy", err)
		}
		got = l
		return l != nil
	})
	if since := time.Since(start); since < crashMinHold-coolSlack {
		t.Errorf("granted %v after the crashed holder's grant, want no sooner than its min hold, %v", since, crashMinHold)
	}
	Release(t, got)
}

// ruleCrashedHolderCools: a holder with a min hold that crashed keeps the
// key taken until its min hold has passed, even when nobody calls the key
// in between: once per window stays once per window.
func ruleCrashedHolderCools(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	start := time.Now()
	abandon(Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: crashTTL, MinHold: crashMinHold}))
	time.Sleep(pastCrash)
	cooledAfterCrash(t, st, key, start)
}

// ruleCrashedWaiterHandedAPermitCools: so does a waiter that was handed
// its permit by a release and crashed: its min hold counts from then.
func ruleCrashedWaiterHandedAPermitCools(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	first := Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	onWait, waiting := Signal()
	got, stop := StartAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: crashTTL, MinHold: crashMinHold,
		OnWait: func(semaphore.WaitState) { onWait() }}, 20*time.Second)
	defer stop()
	if b.Kind.InLine {
		MustWait(t, got, waiting, "the waiter")
	}
	start := time.Now()
	Release(t, first)
	r := Receive(t, got, 10*time.Second, "the waiter's grant once the holder released")
	if r.Err != nil {
		t.Fatalf("waiter: got %v, want a permit", r.Err)
	}
	abandon(r.L)
	time.Sleep(pastCrash)
	cooledAfterCrash(t, st, key, start)
}

// ruleStatusShowsWhatARenewalKeeps: a holder that stopped renewing (its
// process frozen, or cut off), on a key nobody calls, is shown by status
// for as long as its renewal would keep it: a store that pushes leases
// back after a silence (Redis, which cannot tell one from a step of its
// clock) shows the lease as pushed.
func ruleStatusShowsWhatARenewalKeeps(t *testing.T, b *Backend, st semaphore.Store) {
	if !b.Kind.Leases {
		t.Skip("a permit that is no lease does not lapse while its holder lives")
	}
	key := UniqueKey(t)
	l := Hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 2 * time.Second})
	// Past the lease, within what a silence may push it back by: a
	// renewal may still keep it, and so does status.
	time.Sleep(2500 * time.Millisecond)
	asked := time.Now()
	s := StatusOf(t, st, key)
	err := l.Renew(Context(t, 5*time.Second))
	shown := len(s.Holders) == 1
	switch {
	case !shown && err == nil:
		t.Errorf("a holder silent past its lease: Status shows none (%+v), and its renewal right after kept it, want it shown", s)
	case shown && err != nil && s.Holders[0].ExpiresIn > time.Since(asked):
		t.Errorf("a holder silent past its lease: Status shows it for %v more (%+v), and its renewal right after failed: %v, want it kept", s.Holders[0].ExpiresIn, s, err)
	}
}

// ruleLapsedStaysLost: once status shows a silent holder gone, nothing
// brings it back: its renewal fails (a lease's: a permit that is no lease
// is gone with its holder's process), and the key is free.
func ruleLapsedStaysLost(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	l := Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: crashTTL})
	abandon(l)
	WaitFor(t, 4*pastCrash, "status showing the silent holder gone", func() bool { return StatusOf(t, st, key).Held == 0 })
	if err := l.Renew(Context(t, 5*time.Second)); b.Kind.Leases && !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("renewal of a holder status shows gone: got %v, want ErrLost", err)
	}
	Release(t, Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
}

// ruleLapsedHoldOnAPausedKeyStaysLost: key drain's promise. A hold whose
// keeper died or froze, on a paused key, shown gone by status, stays lost:
// a run under its handle is refused, and its end says lost.
func ruleLapsedHoldOnAPausedKeyStaysLost(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	l := Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: crashTTL})
	h, err := st.Hold(Context(t, 5*time.Second), l, keeper)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	k, _, err := st.Attach(Context(t, 5*time.Second), h, true)
	if err != nil {
		t.Fatalf("Attach as the keeper: %v", err)
	}
	operated(t, "Pause", st.Pause(Context(t, 5*time.Second), key, "draining", 0))
	// acquire and the keeper die, or freeze.
	abandon(l)
	abandon(k)
	WaitFor(t, 4*pastCrash, "status showing the hold gone", func() bool {
		s := StatusOf(t, st, key)
		return len(s.Holders) == 0 && s.Unlisted == 0
	})
	_, _, err = st.Attach(Context(t, 5*time.Second), h, false)
	endedAs(t, "a run under the handle once status showed the hold gone", err, semaphore.HoldLost)
	endedAs(t, "the keeper back once status showed the hold gone", k.Renew(Context(t, 5*time.Second)), semaphore.HoldLost)
	end, now, err := st.EndHold(Context(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || now || end.State != semaphore.HoldLost {
		t.Fatalf("EndHold once status showed the hold gone: got (%+v, %v, %v), want lost, not now", end, now, err)
	}
	operated(t, "Resume", st.Resume(Context(t, 5*time.Second), key))
	Release(t, Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
}
