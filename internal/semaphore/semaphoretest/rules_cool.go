package semaphoretest

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// coolFor is the MinHold of the cooling rules: long enough that a loaded
// machine looks at the key before it ends, short enough to wait out.
const coolFor = 2 * time.Second

// coolSlack is how much earlier than its grant and MinHold a cooling may
// end: stores count whole milliseconds.
const coolSlack = 50 * time.Millisecond

// ruleMinHoldCools: a permit finished before its MinHold passed stays
// taken, as cooling, with no holder, until it has; then it is free.
func ruleMinHoldCools(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	who := semaphore.HolderInfo{Host: "h", PID: 7, Command: "backup", Label: "nightly backup"}
	req := semaphore.Request{Key: key, Permits: 2, Weight: 2, TTL: 10 * time.Second, MinHold: coolFor, Holder: who}
	start := time.Now() // no later than the grant
	l := Acquire(t, st, req)
	if err := l.Finish(Context(t, 5*time.Second), 3); err != nil {
		t.Fatalf("Finish: got error %v, want nil", err)
	}

	other := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, NoWait: true}
	if got, err := AcquireWithin(t, st, 5*time.Second, other); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire while the permit cools: got (%v, %v), want ErrBusy", got, err)
	}
	s := StatusOf(t, st, key)
	if s.Held != 2 || len(s.Holders) != 0 || len(s.Cooling) != 1 {
		t.Fatalf("Status while the permit cools: got %+v, want 2 held, no holder, one cooling", s)
	}
	c := s.Cooling[0]
	if !reflect.DeepEqual(c.HolderInfo, who) || c.Permits != 2 || c.Weight != 2 || c.ExitStatus != 3 {
		t.Errorf("cooling: got %+v, want %+v, 2 of 2 permits, exit status 3", c, who)
	}
	if c.EndsIn <= 0 || c.EndsIn > coolFor {
		t.Errorf("cooling ends in: got %v, want in (0, %v]", c.EndsIn, coolFor)
	}

	var got semaphore.Lease
	WaitFor(t, coolFor+10*time.Second, "a no-wait Acquire granted once the cooling ended", func() bool {
		l, err := AcquireWithin(t, st, 5*time.Second, other)
		if err != nil && !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("no-wait Acquire while waiting for the cooling to end: got %v, want a permit or ErrBusy", err)
		}
		got = l
		return l != nil
	})
	if since := time.Since(start); since < coolFor-coolSlack {
		t.Errorf("granted %v after the cooling permit's grant, want no sooner than its min hold, %v", since, coolFor)
	}
	if s := StatusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || len(s.Cooling) != 0 {
		t.Errorf("Status once the cooling ended and another was granted: got %+v, want that one holder, no cooling", s)
	}
	Release(t, got)
}

// ruleGiveBackWithoutCooling: Release never cools, nor does Finish
// without a MinHold.
func ruleGiveBackWithoutCooling(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	cases := []struct {
		name    string
		minHold time.Duration
		back    func(semaphore.Lease) error
	}{
		{"Release with a min hold", time.Hour, func(l semaphore.Lease) error { return l.Release(Context(t, 5*time.Second)) }},
		{"Finish without a min hold", 0, func(l semaphore.Lease) error { return l.Finish(Context(t, 5*time.Second), 0) }},
	}
	for _, c := range cases {
		req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinHold: c.minHold}
		if err := c.back(Acquire(t, st, req)); err != nil {
			t.Fatalf("%s: got error %v, want nil", c.name, err)
		}
		if s := StatusOf(t, st, key); s.Held != 0 || len(s.Cooling) != 0 {
			t.Errorf("Status after %s: got %+v, want nothing held, no cooling", c.name, s)
		}
		Release(t, Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
	}
}

// ruleWaiterServedAfterCooling: a caller that waits while a permit cools
// is granted it once the cooling ends, not long after.
func ruleWaiterServedAfterCooling(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinHold: coolFor}
	start := time.Now()
	if err := Acquire(t, st, req).Finish(Context(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: got error %v, want nil", err)
	}

	onWait, waiting := Signal()
	got, _ := StartAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second,
		OnWait: func(semaphore.WaitState) { onWait() }}, 30*time.Second)
	MustWait(t, got, waiting, "waiting Acquire while the only permit cools")
	// A few seconds: the waiter must wake up when the cooling ends, not
	// find out on a slow poll.
	r := Receive(t, got, time.Until(start.Add(coolFor))+5*time.Second, "waiting Acquire once the cooling ended")
	if r.Err != nil {
		t.Fatalf("waiting Acquire once the cooling ended: got %v, want a permit", r.Err)
	}
	if since := time.Since(start); since < coolFor-coolSlack {
		t.Errorf("waiter granted %v after the cooling permit's grant, want no sooner than its min hold, %v", since, coolFor)
	}
}

// ruleMinHoldHolderCountsOnce: a holder with a MinHold takes its weight
// while it holds, not more: its cooling to be is not counted besides it.
// Once it finishes, its cooling takes that weight instead.
func ruleMinHoldHolderCountsOnce(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	l := Acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, MinHold: time.Hour})
	other := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, NoWait: true}
	o := Acquire(t, st, other)
	if s := StatusOf(t, st, key); s.Held != 2 || len(s.Holders) != 2 || len(s.Cooling) != 0 {
		t.Errorf("Status with a holder with a min hold and another: got %+v, want 2 held, 2 holders, no cooling", s)
	}
	Release(t, o)
	if err := l.Finish(Context(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: got error %v, want nil", err)
	}
	if s := StatusOf(t, st, key); s.Held != 1 || len(s.Holders) != 0 || len(s.Cooling) != 1 {
		t.Errorf("Status once the holder with a min hold finished: got %+v, want 1 held, by its cooling", s)
	}
	Release(t, Acquire(t, st, other))
}

// ruleMinHoldAfterSuccess: with CoolAfterSuccess, a permit whose command
// failed is given back at once; one whose command succeeded cools, as
// does one whose command's status is unknown (-1), which may have.
func ruleMinHoldAfterSuccess(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinHold: time.Hour, MinHoldAfter: semaphore.CoolAfterSuccess}
	other := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}
	for _, status := range []int{1, 124, 143} {
		if err := Acquire(t, st, req).Finish(Context(t, 5*time.Second), status); err != nil {
			t.Fatalf("Finish(%d): got error %v, want nil", status, err)
		}
		if s := StatusOf(t, st, key); s.Held != 0 || len(s.Cooling) != 0 {
			t.Errorf("Status after Finish(%d) with CoolAfterSuccess: got %+v, want nothing held, no cooling", status, s)
		}
		Release(t, Acquire(t, st, other))
	}
	for i, status := range []int{0, -1} {
		key := UniqueKey(t) + "-" + strconv.Itoa(i)
		req, other := req, other
		req.Key, other.Key = key, key
		if err := Acquire(t, st, req).Finish(Context(t, 5*time.Second), status); err != nil {
			t.Fatalf("Finish(%d): got error %v, want nil", status, err)
		}
		s := StatusOf(t, st, key)
		if s.Held != 1 || len(s.Cooling) != 1 || s.Cooling[0].ExitStatus != status {
			t.Errorf("Status after Finish(%d) with CoolAfterSuccess: got %+v, want it cooling, exit status %d", status, s, status)
		}
		if got, err := AcquireWithin(t, st, 5*time.Second, other); !errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("no-wait Acquire after Finish(%d) with CoolAfterSuccess: got (%v, %v), want ErrBusy", status, got, err)
		}
	}
}
