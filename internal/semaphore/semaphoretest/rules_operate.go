package semaphoretest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// operateRules are the rules of an operator's hand on a key
// (semaphore.Operator), which every store runs.
var operateRules = []rule{
	{"StoredCapacityWins", ruleStoredCapacityWins},
	{"WeightOverStoredCapacity", ruleWeightOverStoredCapacity},
	{"LoweredCapacityStopsNoHolder", ruleLoweredCapacityStopsNoHolder},
	{"PausedKeyIsBusy", rulePausedKeyIsBusy},
	{"PausedWaiterGrantedAfterResume", rulePausedWaiterGrantedAfterResume},
	{"PauseEndsByItself", rulePauseEndsByItself},
	{"RevokeTellsTheHolder", ruleRevokeTellsTheHolder},
	{"RevokeUnknownHolder", ruleRevokeUnknownHolder},
}

// operated fails t when an operator's call failed.
func operated(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: got error %v, want nil", what, err)
	}
}

// busyNow fails t unless a no-wait Acquire of req is busy.
func busyNow(t *testing.T, st semaphore.Store, req semaphore.Request, when string) {
	t.Helper()
	req.NoWait = true
	if l, err := AcquireWithin(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		if l != nil {
			Release(t, l)
		}
		t.Fatalf("no-wait Acquire (n=%d) %s: got (%v, %v), want ErrBusy", req.Permits, when, l, err)
	}
}

// ruleStoredCapacityWins: a stored capacity is what every caller is
// admitted against, lower or higher than its own N, until unset.
func ruleStoredCapacityWins(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 10*time.Second)
	operated(t, "SetCapacity(1) of a key never used", st.SetCapacity(ctx, key, 1))
	if s := StatusOf(t, st, key); s.StoredCapacity != 1 || s.Held != 0 {
		t.Fatalf("Status once set to 1: got %+v, want stored capacity 1, none held", s)
	}
	five := semaphore.Request{Key: key, Permits: 5, TTL: 10 * time.Second}
	a := Hold(t, st, five)
	busyNow(t, st, five, "on a key set to 1, one holding")
	if s := StatusOf(t, st, key); s.StoredCapacity != 1 || s.Held != 1 {
		t.Errorf("Status set to 1, one holding: got %+v, want stored capacity 1, 1 held", s)
	}

	operated(t, "SetCapacity(0)", st.SetCapacity(ctx, key, 0))
	b := Hold(t, st, five) // its own 5 again
	if s := StatusOf(t, st, key); s.StoredCapacity != 0 || s.Held != 2 {
		t.Errorf("Status once unset: got %+v, want no stored capacity, 2 held", s)
	}
	Release(t, a)
	Release(t, b)

	operated(t, "SetCapacity(2)", st.SetCapacity(ctx, key, 2))
	one := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	Hold(t, st, one)
	Hold(t, st, one) // the stored 2, above its own 1
	busyNow(t, st, one, "on a key set to 2, two holding")
}

// ruleWeightOverStoredCapacity: a caller whose weight is more than the
// stored capacity is refused, waiting or not, naming its weight.
func ruleWeightOverStoredCapacity(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	operated(t, "SetCapacity(2)", st.SetCapacity(Context(t, 10*time.Second), key, 2))
	for _, noWait := range []bool{true, false} {
		req := semaphore.Request{Key: key, Permits: 5, Weight: 3, TTL: 10 * time.Second, NoWait: noWait}
		l, err := AcquireWithin(t, st, 10*time.Second, req)
		var bad *semaphore.SettingError
		if !errors.As(err, &bad) || bad.Setting != semaphore.WeightSetting || bad.Value != 3 || errors.Is(err, semaphore.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
			if l != nil {
				Release(t, l)
			}
			t.Errorf("Acquire (no-wait %v) of weight 3 on a key set to 2: got (%v, %v), want a *SettingError of its weight, 3, at once", noWait, l, err)
		}
	}
}

// ruleLoweredCapacityStopsNoHolder: lowering the stored capacity below
// the holders stops none of them, and grants nothing until fewer hold
// it than that, whichever permits they hold.
func ruleLoweredCapacityStopsNoHolder(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 10*time.Second)
	operated(t, "SetCapacity(3)", st.SetCapacity(ctx, key, 3))
	req := semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second}
	holders := []semaphore.Lease{Hold(t, st, req), Hold(t, st, req), Hold(t, st, req)}
	operated(t, "SetCapacity(1) under 3 holders", st.SetCapacity(ctx, key, 1))
	for i, l := range holders {
		if err := l.Renew(Context(t, 5*time.Second)); err != nil {
			t.Errorf("Renew of holder %d once lowered to 1: got %v, want nil (no holder is stopped)", i, err)
		}
	}
	if s := StatusOf(t, st, key); s.StoredCapacity != 1 || s.Held != 3 {
		t.Errorf("Status once lowered to 1 under 3 holders: got %+v, want stored capacity 1, 3 held", s)
	}
	for i, l := range holders {
		busyNow(t, st, req, "with "+semaphore.Count(3-i, "holder")+" on a key lowered to 1")
		Release(t, l) // the first one's permit first: a free permit is not enough
	}
	Hold(t, st, req)
}

// rulePausedKeyIsBusy: a paused key grants nothing; a caller that will
// not wait is told why; its holders run on; Status shows the pause.
func rulePausedKeyIsBusy(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 10*time.Second)
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}
	h := Hold(t, st, req)
	const reason = "db upgrade"
	operated(t, "Pause", st.Pause(ctx, key, reason, 0))

	req.NoWait = true
	l, err := AcquireWithin(t, st, 5*time.Second, req)
	var paused *semaphore.PausedError
	if !errors.As(err, &paused) || !errors.Is(err, semaphore.ErrBusy) || paused.Key != key || paused.Pause.Reason != reason || paused.Pause.EndsIn != 0 {
		if l != nil {
			Release(t, l)
		}
		t.Fatalf("no-wait Acquire of a paused key with a permit free: got (%v, %v), want a *PausedError of key %q, reason %q, no end, wrapping ErrBusy", l, err, key, reason)
	}
	if err := h.Renew(Context(t, 5*time.Second)); err != nil {
		t.Errorf("Renew of a holder while paused: got %v, want nil (holders run on)", err)
	}
	if s := StatusOf(t, st, key); s.Paused == nil || s.Paused.Reason != reason || s.Paused.EndsIn != 0 || s.Held != 1 {
		t.Errorf("Status while paused: got %+v (pause %+v), want paused with reason %q, no end, 1 held", s, s.Paused, reason)
	}

	operated(t, "Resume", st.Resume(ctx, key))
	Release(t, Acquire(t, st, req))
	if s := StatusOf(t, st, key); s.Paused != nil {
		t.Errorf("Status once resumed: got pause %+v, want none", s.Paused)
	}
	operated(t, "Resume of a key not paused", st.Resume(ctx, key))
}

// rulePausedWaiterGrantedAfterResume: a waiter keeps waiting while the
// key is paused, told so and why, and is granted once it is resumed.
func rulePausedWaiterGrantedAfterResume(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const reason = "maintenance"
	operated(t, "Pause", st.Pause(Context(t, 10*time.Second), key, reason, 0))

	var mu sync.Mutex
	var told *semaphore.WaitState
	sawPause, paused := Signal()
	got, _ := StartAcquire(t, st, semaphore.Request{
		Key: key, Permits: 1, TTL: 10 * time.Second,
		OnWait: func(s semaphore.WaitState) {
			if s.Paused {
				mu.Lock()
				told = &s
				mu.Unlock()
				sawPause()
			}
		},
	}, 60*time.Second)
	select {
	case r := <-got:
		t.Fatalf("Acquire of a paused key: got (%v, %v), want it to wait", r.L, r.Err)
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire of a paused key: OnWait not told of the pause after 10s, want it told")
	}
	mu.Lock()
	if told.Pause.Reason != reason {
		t.Errorf("OnWait while paused: got %+v, want the pause's reason %q", *told, reason)
	}
	mu.Unlock()
	select {
	case r := <-got:
		t.Fatalf("Acquire of a paused key, a moment later: got (%v, %v), want it still waiting", r.L, r.Err)
	case <-time.After(300 * time.Millisecond):
	}

	operated(t, "Resume", st.Resume(Context(t, 10*time.Second), key))
	if r := Receive(t, got, 10*time.Second, "waiter once the key was resumed"); r.Err != nil {
		t.Fatalf("waiter once the key was resumed: got %v, want a permit", r.Err)
	}
}

// pauseSlack is how much sooner than asked a pause may end: stores count
// whole milliseconds.
const pauseSlack = 50 * time.Millisecond

// rulePauseEndsByItself: a pause for a while ends by itself, and a
// waiter is granted then.
func rulePauseEndsByItself(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const d = time.Second
	start := time.Now() // no later than the pause
	operated(t, "Pause for 1s", st.Pause(Context(t, 10*time.Second), key, "brief", d))
	if s := StatusOf(t, st, key); s.Paused == nil || s.Paused.Reason != "brief" || s.Paused.EndsIn <= 0 || s.Paused.EndsIn > d {
		t.Errorf("Status paused for 1s: got pause %+v, want reason \"brief\", ending in (0, %v]", s.Paused, d)
	}
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	got, _ := StartAcquire(t, st, req, 60*time.Second)
	r := Receive(t, got, d+10*time.Second, "waiter on a key paused for 1s")
	if r.Err != nil {
		t.Fatalf("waiter on a key paused for 1s: got %v, want a permit once the pause ended", r.Err)
	}
	if since := time.Since(start); since < d-pauseSlack {
		t.Errorf("waiter granted %v after a pause for %v, want no sooner than its end", since, d)
	}
	if s := StatusOf(t, st, key); s.Paused != nil {
		t.Errorf("Status once the pause ended: got pause %+v, want none", s.Paused)
	}
}

// ruleRevokeTellsTheHolder: every holder has a public id; revoking one
// makes its Renew say so, with the reason, and its permit stays taken
// until it lets go: a revoke never makes two holders.
func ruleRevokeTellsTheHolder(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}
	a := Hold(t, st, req)
	b := Hold(t, st, req)
	s := StatusOf(t, st, key)
	if len(s.Holders) != 2 || s.Holders[0].ID == "" || s.Holders[0].ID == s.Holders[1].ID {
		t.Fatalf("Status with two holders: got holders %+v, want two, with ids of their own", s.Holders)
	}
	id := s.Holders[0].ID
	if s.Holders[1].Token == a.Token() {
		id = s.Holders[1].ID
	}

	const reason = "rotate keys"
	operated(t, "Revoke", st.Revoke(Context(t, 10*time.Second), key, id, reason, false))
	var err error
	WaitFor(t, 5*time.Second, "the revoked holder's Renew failing", func() bool {
		err = a.Renew(Context(t, 5*time.Second))
		return err != nil
	})
	var revoked *semaphore.RevokedError
	if !errors.As(err, &revoked) || !errors.Is(err, semaphore.ErrLost) || revoked.Key != key || revoked.Reason != reason {
		t.Fatalf("Renew of the revoked holder: got %v, want a *RevokedError of key %q, reason %q, wrapping ErrLost", err, key, reason)
	}
	if err := b.Renew(Context(t, 5*time.Second)); err != nil {
		t.Errorf("Renew of the other holder: got %v, want nil", err)
	}
	busyNow(t, st, req, "once a holder was revoked, before it let go")

	Release(t, a)
	Release(t, Acquire(t, st, req))
	if err := st.Revoke(Context(t, 10*time.Second), key, id, reason, false); !errors.Is(err, semaphore.ErrNoHolder) {
		t.Errorf("Revoke of a holder that let go: got %v, want ErrNoHolder", err)
	}
}

// ruleRevokeUnknownHolder: no holder has an id it was not given.
func ruleRevokeUnknownHolder(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 10*time.Second)
	if err := st.Revoke(ctx, key, "NOSUCHHOLD", "", false); !errors.Is(err, semaphore.ErrNoHolder) {
		t.Errorf("Revoke on a key never used: got %v, want ErrNoHolder", err)
	}
	h := Hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	for _, id := range []string{"NOSUCHHOLD", ""} {
		if err := st.Revoke(ctx, key, id, "", true); !errors.Is(err, semaphore.ErrNoHolder) {
			t.Errorf("Revoke(%q) of a key with another holder: got %v, want ErrNoHolder", id, err)
		}
	}
	if err := h.Renew(Context(t, 5*time.Second)); err != nil {
		t.Errorf("Renew of the holder after revokes of others: got %v, want nil", err)
	}
}
