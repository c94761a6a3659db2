package semaphoretest

import (
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// keeper is what the rules say of a hold's keeper.
var keeper = semaphore.HolderInfo{Host: "keeper-host", PID: 4242, Label: "https://ci.example/runs/9"}

// startHold takes a permit of key with NoWait, makes it a hold and
// attaches to it as a keeper would. The original lease is let go as
// semrun acquire lets it go: unreleased, its process gone.
func startHold(t *testing.T, st semaphore.Store, req semaphore.Request) (semaphore.Handle, semaphore.Lease, semaphore.HoldInfo) {
	t.Helper()
	l := Acquire(t, st, req)
	h, err := st.Hold(Context(t, 5*time.Second), l, keeper)
	if err != nil {
		t.Fatalf("Hold: got error %v", err)
	}
	if h.Key != req.Key || h.Secret == "" {
		t.Fatalf("Hold: got handle for key %q with secret %q, want key %q and a secret", h.Key, h.Secret, req.Key)
	}
	k, info, err := st.Attach(Context(t, 5*time.Second), h, true)
	if err != nil {
		t.Fatalf("Attach as the keeper: got error %v", err)
	}
	t.Cleanup(func() { _ = k.Release(Context(t, 5*time.Second)) })
	abandon(l)
	return h, k, info
}

// abandon drops a lease as a process that exits does: with no release,
// but the files that hold it closed.
func abandon(l semaphore.Lease) {
	for _, f := range l.Files() {
		f.Close()
	}
}

// endedAs checks that err is a *HoldEndedError with state.
func endedAs(t *testing.T, what string, err error, state semaphore.HoldState) {
	t.Helper()
	var ended *semaphore.HoldEndedError
	if !errors.As(err, &ended) || ended.End.State != state || !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("%s: got %v, want a hold %s (ErrLost)", what, err, state)
	}
}

// ruleHoldKeepsPermit: a hold takes its permits, tells who attaches what it
// was granted, and status shows its keeper.
func ruleHoldKeepsPermit(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 3, Weight: 2, TTL: 10 * time.Second, NoWait: true}
	_, k, info := startHold(t, st, req)
	if info.Key != key || info.Permits != 3 || info.Weight != 2 || info.Token != k.Token() || info.Token <= 0 || info.TTL <= 0 {
		t.Fatalf("Attach: got %+v (lease token %d), want key %q, 3 permits, weight 2, the grant's token and a TTL", info, k.Token(), key)
	}
	s := StatusOf(t, st, key)
	if s.Held != 2 || len(s.Holders) != 1 {
		t.Fatalf("Status of a held hold: got %+v, want one holder taking 2", s)
	}
	if h := s.Holders[0]; !h.Hold || h.Host != keeper.Host || h.PID != keeper.PID || h.Label != keeper.Label || h.Token != info.Token {
		t.Fatalf("Status holder: got %+v, want the hold, its keeper's host, pid and label, token %d", h.HolderInfo, info.Token)
	}
	if _, err := AcquireWithin(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 3, Weight: 2, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire of 2 of 3 beside a hold of 2: got %v, want ErrBusy", err)
	}
	if err := k.Renew(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("keeper's Renew: got %v, want nil", err)
	}
}

// ruleHoldEnd: an end with no one else attached gives the permit at once to
// a waiter; the first end counts; renewals and attaches after it report it.
func ruleHoldEnd(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}
	h, k, _ := startHold(t, st, req)

	waiter, stop := StartAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}, 20*time.Second)
	defer stop()
	if b.Kind.InLine {
		WaitFor(t, 10*time.Second, "the waiter in line", func() bool { return len(StatusOf(t, st, key).Waiters) == 1 })
	}

	end, now, err := st.EndHold(Context(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || !now || end.State != semaphore.HoldReleased || end.Why != "semrun release" || end.At.IsZero() {
		t.Fatalf("EndHold: got (%+v, %v, %v), want released now, with its why and a time", end, now, err)
	}
	var got Acquired
	if b.Kind.Leases {
		// A keeper runs no command: the permit is free at once, before it
		// heard of the end.
		got = Receive(t, waiter, 10*time.Second, "the waiter's grant once the hold ended")
	}
	// The keeper learns of the end as it renews, and lets go.
	endedAs(t, "keeper's Renew after the end", k.Renew(Context(t, 5*time.Second)), semaphore.HoldReleased)
	if err := k.Release(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("keeper's Release after the end: got %v, want nil", err)
	}
	if !b.Kind.Leases {
		got = Receive(t, waiter, 10*time.Second, "the waiter's grant once the hold ended")
	}
	if got.Err != nil {
		t.Fatalf("waiter: got %v, want a permit", got.Err)
	}

	again, now, err := st.EndHold(Context(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldMaxRuntime, Why: "later"})
	if err != nil || now || again.State != semaphore.HoldReleased || again.Why != "semrun release" {
		t.Fatalf("EndHold again: got (%+v, %v, %v), want the first end, released, not now", again, now, err)
	}
	_, _, err = st.Attach(Context(t, 5*time.Second), h, false)
	endedAs(t, "Attach to an ended hold", err, semaphore.HoldReleased)
	if s := StatusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != got.L.Token() {
		t.Fatalf("Status after the end: got %+v, want the waiter alone", s.Holders)
	}
}

// ruleHoldOutlivedByRuns: an end while a run is attached leaves the permit
// taken until that run lets go, never earlier; the run learns of the end
// as it renews.
func ruleHoldOutlivedByRuns(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}
	h, k, _ := startHold(t, st, req)
	run, info, err := st.Attach(Context(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach a run: got %v", err)
	}
	if run.Token() != info.Token {
		t.Fatalf("run's token: got %d, want the hold's %d", run.Token(), info.Token)
	}
	other, _, err := st.Attach(Context(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach a second run: got %v", err)
	}
	if err := other.Release(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("second run's Release: got %v", err)
	}
	if err := run.Renew(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("run's Renew after another run left: got %v, want nil (the hold lives on)", err)
	}

	if _, _, err := st.EndHold(Context(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"}); err != nil {
		t.Fatalf("EndHold: %v", err)
	}
	if err := k.Release(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("keeper's Release: %v", err)
	}
	busy := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}
	if _, err := AcquireWithin(t, st, 5*time.Second, busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire while a run is attached to the ended hold: got %v, want ErrBusy", err)
	}
	endedAs(t, "run's Renew after the end", run.Renew(Context(t, 5*time.Second)), semaphore.HoldReleased)
	if _, err := AcquireWithin(t, st, 5*time.Second, busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire once the run heard of the end, before it let go: got %v, want ErrBusy", err)
	}
	abandon(run) // its command's files close as it exits
	if err := run.Release(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("run's Release: %v", err)
	}
	Hold(t, st, busy)
}

// ruleHoldLapses: a hold no one renews or keeps is lost, and says so.
func ruleHoldLapses(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	l := Acquire(t, st, req)
	h, err := st.Hold(Context(t, 5*time.Second), l, keeper)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	k, _, err := st.Attach(Context(t, 5*time.Second), h, true)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	// The keeper and acquire die: SIGKILL, no release.
	abandon(l)
	abandon(k)
	if b.Kind.Leases {
		// Past the lease, and past what a silent key's leases are pushed
		// back by (a clock step cannot be told from silence).
		time.Sleep(2500 * time.Millisecond)
	}
	_, _, err = st.Attach(Context(t, 5*time.Second), h, false)
	endedAs(t, "Attach to a hold whose keeper died", err, semaphore.HoldLost)
	end, now, err := st.EndHold(Context(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || now || end.State != semaphore.HoldLost {
		t.Fatalf("EndHold of a lapsed hold: got (%+v, %v, %v), want lost, not now", end, now, err)
	}
	Hold(t, st, req)
}

// ruleUnknownHandle: a handle no hold has, or one of another key, is a
// hold the store does not know (for the user: not a handle acquire
// printed here), never an error that hides it, nor a hold it ends.
func ruleUnknownHandle(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	h, _, _ := startHold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true})
	for _, bad := range []semaphore.Handle{
		{Store: h.Store, Key: key, Secret: semaphore.NewSecret()},
		{Store: h.Store, Key: key + "-other", Secret: h.Secret},
	} {
		_, _, err := st.Attach(Context(t, 5*time.Second), bad, false)
		endedAs(t, "Attach with an unknown handle", err, semaphore.HoldUnknown)
		end, now, err := st.EndHold(Context(t, 5*time.Second), bad, semaphore.HoldEnd{State: semaphore.HoldReleased})
		if err != nil || now || end.State != semaphore.HoldUnknown {
			t.Fatalf("EndHold with an unknown handle: got (%+v, %v, %v), want unknown, not now", end, now, err)
		}
	}
	if s := StatusOf(t, st, key); s.Held != 1 {
		t.Fatalf("Status after unknown handles: got %+v, want the hold still held", s)
	}
}
