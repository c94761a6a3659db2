package semaphoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// eventRules are the rules of what a store tells of its keys' past
// (semaphore.Events, KeyStatus.Counts), which every store runs.
var eventRules = []rule{
	{"EventsOfARun", ruleEventsOfARun},
	{"EventsOfBusyAndTimeout", ruleEventsOfBusyAndTimeout},
	{"EventsOfAnOperator", ruleEventsOfAnOperator},
	{"EventsOldestFirstAcrossKeys", ruleEventsOldestFirstAcrossKeys},
	{"EventsSince", ruleEventsSince},
	{"EventsFollow", ruleEventsFollow},
	{"EventLogIsCapped", ruleEventLogIsCapped},
	{"WaiterToldRecentHold", ruleWaiterToldRecentHold},
}

// EventsOf returns the events q finds, without following, failing t on
// an error or a hang.
func EventsOf(t testing.TB, st semaphore.Store, q semaphore.EventQuery) []semaphore.Event {
	t.Helper()
	q.Follow = false
	var got []semaphore.Event
	var err error
	if !within(t, 15*time.Second, fmt.Sprintf("Events(%+v) returned", q), func() {
		err = st.Events(Context(t, 10*time.Second), q, func(e semaphore.Event) error {
			got = append(got, e)
			return nil
		})
	}) {
		t.FailNow()
	}
	if err != nil {
		t.Fatalf("Events(%+v): got error %v, want nil", q, err)
	}
	return got
}

// kinds are the kinds of events, in their order.
func kinds(events []semaphore.Event) []semaphore.EventKind {
	var k []semaphore.EventKind
	for _, e := range events {
		k = append(k, e.Kind)
	}
	return k
}

// countsOf are a key's counters as Status reports them, zero when none.
func countsOf(t testing.TB, st semaphore.Store, key string) semaphore.Counts {
	t.Helper()
	s := StatusOf(t, st, key)
	if s.Counts == nil {
		return semaphore.Counts{}
	}
	return *s.Counts
}

// ruleEventsOfARun: a grant and a release are events, saying who held
// the permit (its public id, host, pid, label), its token, and how the
// command ended and how long it held; the counters and histograms count
// them.
func ruleEventsOfARun(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	who := semaphore.HolderInfo{Host: "host-a", PID: 4242, Command: "render", Label: "https://ci.example/jobs/7"}
	before := time.Now()
	l := Acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: who})
	s := StatusOf(t, st, key)
	if len(s.Holders) != 1 {
		t.Fatalf("Status with one holder: got %+v", s)
	}
	id := s.Holders[0].ID
	time.Sleep(50 * time.Millisecond)
	if err := l.Finish(Context(t, 5*time.Second), 3); err != nil {
		t.Fatalf("Finish(3): %v", err)
	}
	got := EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if !slices.Equal(kinds(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease}) {
		t.Fatalf("events of a run: got %+v, want a grant, then a release", got)
	}
	for _, e := range got {
		if e.Key != key || e.Holder != id || e.Host != who.Host || e.PID != who.PID || e.Label != who.Label || e.Token != l.Token() || e.Permits != 2 || e.Weight != 1 {
			t.Errorf("%s event: got %+v, want key %q, holder %q, %+v, token %d, 2 permits, weight 1", e.Kind, e, key, id, who, l.Token())
		}
		// The store's clock may differ from this host's by a little.
		if e.Time.Before(before.Add(-time.Minute)) || e.Time.After(time.Now().Add(time.Minute)) {
			t.Errorf("%s event at %v: want about now (%v)", e.Kind, e.Time, before)
		}
	}
	rel := got[1]
	if rel.ExitStatus == nil || *rel.ExitStatus != 3 || rel.Held < 40*time.Millisecond || rel.Held > time.Minute {
		t.Errorf("release event: got exit status %v, held %v, want 3, held about 50ms", rel.ExitStatus, rel.Held)
	}
	if got[0].Time.After(rel.Time) {
		t.Errorf("grant at %v after the release at %v, want oldest first", got[0].Time, rel.Time)
	}

	// A permit given back without a command says no exit status.
	Release(t, Acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: who}))
	got = EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if len(got) != 4 || got[3].Kind != semaphore.EventRelease || got[3].ExitStatus != nil {
		t.Errorf("events after a Release: got %+v, want 4, the last a release with no exit status", got)
	}

	c := countsOf(t, st, key)
	if c.Grants != 2 || c.Wait.Count() != 2 || c.Held.Count() != 2 || c.Held.Sum < 40*time.Millisecond || c.Busy != 0 || c.Timeouts != 0 {
		t.Errorf("counts after two runs: got %+v, want 2 grants, 2 waits, 2 holds summing to 50ms or more, nothing else", c)
	}
	if c.RecentHold <= 0 {
		t.Errorf("RecentHold after two holds: got %v, want more than 0", c.RecentHold)
	}
}

// ruleEventsOfBusyAndTimeout: a caller that would not wait and got
// nothing, a waiter whose deadline passed and one that was interrupted
// are events, and counted.
func ruleEventsOfBusyAndTimeout(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, Holder: semaphore.HolderInfo{Host: "h", PID: 9, Label: "nightly"}}
	Hold(t, st, req)
	busyNow(t, st, req, "with its one permit held")
	if _, err := AcquireWithin(t, st, 300*time.Millisecond, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until a deadline while busy: got %v, want context.DeadlineExceeded", err)
	}
	res, stop := StartAcquire(t, st, req, time.Minute)
	WaitFor(t, 5*time.Second, "the third caller waiting", func() bool {
		s := StatusOf(t, st, key)
		return s.Held == 1 && len(s.Waiters)+s.Unlisted >= 1
	})
	time.Sleep(100 * time.Millisecond)
	stop()
	if r := Receive(t, res, 15*time.Second, "an Acquire interrupted"); r.Err == nil {
		t.Fatalf("Acquire interrupted: got a permit, want an error")
	}
	var got []semaphore.Event
	WaitFor(t, 5*time.Second, "the leave event", func() bool {
		got = EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
		return len(got) >= 4
	})
	if !slices.Equal(kinds(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventBusy, semaphore.EventTimeout, semaphore.EventLeave}) {
		t.Fatalf("events: got %+v, want grant, busy, timeout, leave", got)
	}
	for _, e := range got[1:] {
		if e.Host != "h" || e.PID != 9 || e.Label != "nightly" || e.Holder != "" || e.Token != 0 {
			t.Errorf("%s event: got %+v, want host h, pid 9, label nightly, no holder nor token", e.Kind, e)
		}
	}
	if w := got[2].Waited; w < 250*time.Millisecond || w > time.Minute {
		t.Errorf("timeout event: waited %v, want about 300ms", w)
	}
	c := countsOf(t, st, key)
	if c.Grants != 1 || c.Busy != 1 || c.Timeouts != 1 {
		t.Errorf("counts: got %+v, want 1 grant, 1 busy answer, 1 timeout", c)
	}
}

// ruleEventsOfAnOperator: what an operator does is an event: capacity
// stored and unset, pause and resume, revoke.
func ruleEventsOfAnOperator(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 10*time.Second)
	operated(t, "SetCapacity(2)", st.SetCapacity(ctx, key, 2))
	operated(t, "Pause", st.Pause(ctx, key, "db upgrade", time.Hour))
	operated(t, "Resume", st.Resume(ctx, key))
	operated(t, "SetCapacity(0)", st.SetCapacity(ctx, key, 0))
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: semaphore.HolderInfo{Host: "h", PID: 5}}
	l := Hold(t, st, req)
	id := StatusOf(t, st, key).Holders[0].ID
	operated(t, "Revoke", st.Revoke(ctx, key, id, "stuck", false))
	// Revoked again before it let go: still one revoke, for the first
	// reason, which the holder hears.
	operated(t, "Revoke again", st.Revoke(ctx, key, id, "stuck, really", false))
	WaitFor(t, 5*time.Second, "the revoked holder's Renew failing", func() bool {
		return errors.Is(l.Renew(Context(t, 5*time.Second)), semaphore.ErrLost)
	})
	Release(t, l)

	got := EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	want := []semaphore.EventKind{semaphore.EventCapacity, semaphore.EventPause, semaphore.EventResume, semaphore.EventCapacity,
		semaphore.EventGrant, semaphore.EventRevoke, semaphore.EventRelease}
	if !slices.Equal(kinds(got), want) {
		t.Fatalf("events: got %+v, want %v", got, want)
	}
	if got[0].Capacity != 2 || got[3].Capacity != 0 {
		t.Errorf("capacity events: got %+v and %+v, want capacity 2, then 0", got[0], got[3])
	}
	if p := got[1]; p.Reason != "db upgrade" || p.Until != time.Hour {
		t.Errorf("pause event: got %+v, want reason %q, until 1h", p, "db upgrade")
	}
	if r := got[5]; r.Holder != id || r.Reason != "stuck" || r.Forced || r.Host != "h" || r.PID != 5 {
		t.Errorf("revoke event: got %+v, want holder %q (host h, pid 5), reason %q, not forced", r, id, "stuck")
	}
	if c := countsOf(t, st, key); c.Revokes != 1 || c.Grants != 1 {
		t.Errorf("counts: got %+v, want 1 grant, 1 revoke", c)
	}
}

// ruleEventsOldestFirstAcrossKeys: the events of several keys, and of
// every key when none is named, come oldest first.
func ruleEventsOldestFirstAcrossKeys(t *testing.T, _ *Backend, st semaphore.Store) {
	a, b := UniqueKey(t), UniqueKey(t)
	for _, key := range []string{a, b, a} {
		Release(t, Acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
		time.Sleep(5 * time.Millisecond) // a store's clock counts milliseconds
	}
	for _, keys := range [][]string{{a, b}, {b, a}, nil} {
		got := EventsOf(t, st, semaphore.EventQuery{Keys: keys})
		var order []string
		for _, e := range got {
			if e.Key == a || e.Key == b {
				order = append(order, e.Key)
			}
		}
		if want := []string{a, a, b, b, a, a}; !slices.Equal(order, want) {
			t.Errorf("Events(%q): got keys %q, want %q", keys, order, want)
		}
		if !slices.IsSortedFunc(got, func(x, y semaphore.Event) int { return x.Time.Compare(y.Time) }) {
			t.Errorf("Events(%q): got %+v, want oldest first", keys, got)
		}
	}
	known, err := st.Keys(Context(t, 10*time.Second))
	if err != nil || !slices.Contains(known, a) || !slices.Contains(known, b) {
		t.Errorf("Keys: got (%q, %v), want both keys used", known, err)
	}
}

// ruleEventsSince: Since leaves out what is older. The line is drawn
// between two runs a second apart, at the middle: Since is measured from
// then to the moment of asking, plus half a second, so that only a call
// that takes the store more than half a second to read its clock could
// draw it elsewhere.
func ruleEventsSince(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	Release(t, Acquire(t, st, req))
	time.Sleep(time.Second)
	line := time.Now()
	Release(t, Acquire(t, st, req))
	since := time.Since(line) + 500*time.Millisecond
	if got := EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}, Since: since}); len(got) != 2 {
		t.Errorf("Events since %v ago, half a second before the second run: got %+v, want its grant and release", since, got)
	}
	if got := EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}, Since: time.Hour}); len(got) != 4 {
		t.Errorf("Events since an hour ago: got %+v, want all 4", got)
	}
}

// ruleEventsFollow: a follower is told of the events kept, then of each
// new one, until its context ends.
func ruleEventsFollow(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	Release(t, Acquire(t, st, req))
	f := Follow(t, st, semaphore.EventQuery{Keys: []string{key}})
	WaitFor(t, 10*time.Second, "the follower told of the 2 events kept", f.AtLeast(2))
	l := Acquire(t, st, req)
	WaitFor(t, 10*time.Second, "the follower told of a new grant", f.AtLeast(3))
	Release(t, l)
	WaitFor(t, 10*time.Second, "the follower told of a new release", f.AtLeast(4))
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
	got := f.Told()
	if want := []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease, semaphore.EventGrant, semaphore.EventRelease}; !slices.Equal(kinds(got), want) {
		t.Fatalf("followed: got %+v, want %v", got, want)
	}
	if got[2].Token != l.Token() {
		t.Errorf("followed grant: got %+v, want token %d", got[2], l.Token())
	}
	stop := errors.New("enough")
	err := st.Events(Context(t, 10*time.Second), semaphore.EventQuery{Keys: []string{key}, Follow: true}, func(semaphore.Event) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("Events whose callback fails: got %v, want that error", err)
	}
}

// ruleEventLogIsCapped: a key's log keeps about MaxEvents, the newest,
// however many callers write it at once (four stores, as four processes
// would, each taking one of the key's four permits at a time); the
// counters count the grants, not the capped log. (A store may drop an
// event it cannot record at once, and its count with it: the lock
// directory's writer waits at most 100ms for the lock of its counters,
// which a loaded machine can hold up that long: 14 of 1,000 beside two
// busy CPUs. None is counted twice.)
func ruleEventLogIsCapped(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const runs = semaphore.MaxEvents // two events each
	stores := []semaphore.Store{st, b.Open(nil), b.Open(nil), b.Open(nil)}
	_, tokens := contend(t, stores, key, 4, []int{1, 1, 1, 1}, runs/4)
	if len(tokens) != runs {
		t.Fatalf("grants: got %d, want %d", len(tokens), runs)
	}
	slices.Sort(tokens)
	got := EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if len(got) < semaphore.MaxEvents*9/10 || len(got) > semaphore.MaxEvents*5/4 {
		t.Errorf("events kept after %d: got %d, want about %d", 2*runs, len(got), semaphore.MaxEvents)
	}
	// The newest are kept: the last grant, and no grant of the oldest
	// quarter (with about half the events kept, the first half is gone).
	var kept []int64
	for _, e := range got {
		if e.Kind == semaphore.EventGrant {
			kept = append(kept, e.Token)
		}
	}
	if !slices.Contains(kept, tokens[runs-1]) {
		t.Errorf("events kept: no grant of the last token %d, want the newest kept", tokens[runs-1])
	}
	if len(kept) > 0 && slices.Min(kept) <= tokens[runs/4] {
		t.Errorf("events kept: a grant of token %d, among the oldest quarter (up to %d), want the oldest gone first", slices.Min(kept), tokens[runs/4])
	}
	if len(got) > 0 && got[len(got)-1].Kind != semaphore.EventRelease {
		t.Errorf("last event kept: got %+v, want a release", got[len(got)-1])
	}
	if c := countsOf(t, st, key); c.Grants < runs*3/4 || c.Grants > runs {
		t.Errorf("grants counted: got %d, want %d (or some less), more than the log keeps: counters are not the capped log", c.Grants, runs)
	}
}

// ruleWaiterToldRecentHold: a waiter is told how long recent holds
// lasted, for an estimate of its wait.
func ruleWaiterToldRecentHold(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	l := Acquire(t, st, req)
	time.Sleep(100 * time.Millisecond)
	Release(t, l)
	Hold(t, st, req)
	var mu sync.Mutex
	var told time.Duration
	req.OnWait = func(s semaphore.WaitState) {
		mu.Lock()
		defer mu.Unlock()
		told = max(told, s.RecentHold)
	}
	_, stop := StartAcquire(t, st, req, time.Minute)
	defer stop()
	WaitFor(t, 10*time.Second, "the waiter told of recent holds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return told > 0
	})
	if told < 90*time.Millisecond || told > time.Minute {
		t.Errorf("RecentHold told a waiter after one hold of 100ms: got %v, want about 100ms", told)
	}
}
