package redisstore

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"

	hostclock "github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// These tests run the same embedded scripts on miniredis, whose clock the
// test sets: TIME answers m.SetTime's instant, and key TTLs only run down
// on m.FastForward. clock.advance moves both together, like real time.

type clocked struct {
	t   *testing.T
	m   *miniredis.Miniredis
	now time.Time

	mu sync.Mutex
	// blpops counts the BLPOPs the server got, by list.
	blpops map[string]int
	// onCommand, when set, hears every command the server gets.
	onCommand func(cmd string, args []string)
}

// base is a whole millisecond, so lease arithmetic in ms is exact.
var base = time.Date(2031, 3, 4, 5, 6, 7, 8_000_000, time.UTC)

func newClock(t *testing.T) (*clocked, *Store) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(base)
	c := &clocked{t: t, m: m, now: base, blpops: map[string]int{}}
	m.Server().SetPreHook(func(_ *server.Peer, cmd string, args ...string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if strings.EqualFold(cmd, "BLPOP") && len(args) > 0 {
			c.blpops[args[0]]++
		}
		if c.onCommand != nil {
			c.onCommand(strings.ToUpper(cmd), args)
		}
		return false
	})
	return c, newStore(t, "redis://"+m.Addr(), Options{})
}

// waitBlocked waits until the server got a BLPOP of list: the waiter
// blocks on it, or has read what was there.
func (c *clocked) waitBlocked(list string) {
	c.t.Helper()
	waitFor(c.t, 5*time.Second, "a BLPOP of "+list, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.blpops[list] > 0
	})
}

func (c *clocked) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.m.SetTime(c.now)
	c.m.FastForward(d)
}

func (c *clocked) ms() float64 { return float64(c.now.UnixMilli()) }

// advanceTouched moves the clock d on, as advance does, but in steps of a
// third of ttl (the longest lease the key's holders asked), with a caller
// asking for busy, with NoWait, after each step but the last, and getting
// ErrBusy: the way waiters and renewing holders keep a busy key touched.
// A key left untouched for more than half that lease makes the scripts take
// the silence for a step of the server's clock and push the holders'
// leases back (rebase in lib.lua); on a key touched this often they lapse
// at their expiry. The last step is not followed by a call, so the test's
// own next call is the first to look at the end of d.
func (c *clocked) advanceTouched(st semaphore.Store, busy semaphore.Request, ttl, d time.Duration) {
	c.t.Helper()
	busy.NoWait = true
	step := (ttl / 3).Truncate(time.Millisecond)
	for ; d > step; d -= step {
		c.advance(step)
		if _, err := st.Acquire(ctxTimeout(c.t, 5*time.Second), busy); !errors.Is(err, semaphore.ErrBusy) {
			c.t.Fatalf("no-wait Acquire touching the key at %v: got %v, want ErrBusy", c.now.Sub(base), err)
		}
	}
	c.advance(d)
}

// holders returns the permit ids of k, failing the test on a wrong type.
func (c *clocked) holders(k protocol.Keys) []string {
	c.t.Helper()
	if !c.m.Exists(k.Holders) {
		return nil
	}
	ids, err := c.m.ZMembers(k.Holders)
	if err != nil {
		c.t.Fatalf("ZMEMBERS %s: got error %v, want nil", k.Holders, err)
	}
	return ids
}

func (c *clocked) score(k protocol.Keys, id string) float64 {
	c.t.Helper()
	s, err := c.m.ZScore(k.Holders, id)
	if err != nil {
		c.t.Fatalf("ZSCORE %s %s: got error %v, want nil", k.Holders, id, err)
	}
	return s
}

// only returns the single holder of k.
func (c *clocked) only(k protocol.Keys) string {
	c.t.Helper()
	ids := c.holders(k)
	if len(ids) != 1 {
		c.t.Fatalf("holders of %s: got %q, want exactly one", k.Holders, ids)
	}
	return ids[0]
}

const leaseTTL = 10 * time.Second

func TestClockRenewOneMsBeforeExpiry(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})
	id := c.only(k)
	if got, want := c.score(k, id), c.ms()+float64(leaseTTL.Milliseconds()); got != want {
		t.Fatalf("lease expiry: got %v ms, want now+TTL = %v ms", got, want)
	}

	c.advance(leaseTTL - time.Millisecond)
	if err := a.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew 1ms before expiry: got %v, want nil", err)
	}
	if got, want := c.score(k, id), c.ms()+float64(leaseTTL.Milliseconds()); got != want {
		t.Errorf("lease expiry after renew: got %v ms, want now+TTL = %v ms", got, want)
	}
	// Renewed: the old expiry passes without losing the permit.
	c.advance(time.Millisecond)
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire at the original expiry of a renewed lease: got %v, want ErrBusy", err)
	}
	if err := a.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("second Renew: got %v, want nil", err)
	}
}

func TestClockLeaseLapsesAtExpiry(t *testing.T) {
	c, st := newClock(t)
	ctx := ctxTimeout(t, 5*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})
	aID := c.only(k)
	expiry := c.score(k, aID)

	// Another caller keeps asking while a stops renewing, so the silence
	// never looks like a clock step: no push back.
	c.advanceTouched(st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL}, leaseTTL, leaseTTL) // now == expiry: the lease has lapsed
	if c.ms() != expiry {
		t.Fatalf("internal: clock %v ms, want exactly the expiry %v ms", c.ms(), expiry)
	}
	status, err := st.Status(ctx, []string{key})
	if err != nil || status[0].Held != 0 {
		t.Errorf("Status at expiry: got (%+v, %v), want held 0", status, err)
	}
	if err := a.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("Renew at now == expiry: got %v, want ErrLost", err)
	}
	if got := c.score(k, aID); got != expiry {
		t.Errorf("expiry after a failed renew: got %v, want it untouched at %v", got, expiry)
	}

	b := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})
	bID := c.only(k)
	if bID == aID {
		t.Fatalf("holder after a new acquire at expiry: got the old permit %q, want a new one", aID)
	}
	if fields, _ := c.m.HKeys(k.Info); slices.Contains(fields, aID) {
		t.Errorf("info fields after the sweep: got %q, want the lapsed permit's record gone", fields)
	}
	if b.Token() <= a.Token() {
		t.Errorf("token of the new holder: got %d, want more than %d", b.Token(), a.Token())
	}
	release(t, a) // stale: must not free b's permit
	if got := c.holders(k); !slices.Equal(got, []string{bID}) {
		t.Errorf("holders after the lapsed holder released: got %q, want only %q", got, bID)
	}
}

func TestClockRenewAfterExpiry(t *testing.T) {
	c, st := newClock(t)
	ctx := ctxTimeout(t, 5*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})

	// Another caller keeps asking while a is silent: on a key nobody
	// touched for so long, a's renewal would find its lease pushed back
	// (rebase in lib.lua).
	c.advanceTouched(st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL}, leaseTTL, leaseTTL+time.Millisecond)
	if err := a.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("Renew 1ms after expiry: got %v, want ErrLost", err)
	}

	// Unused, the keys expire on their own; a late renew does not revive them.
	c.advance(2 * time.Second)
	for _, rk := range k.List() {
		if c.m.Exists(rk) {
			t.Errorf("key %s %v after the last lease lapsed: got it still there, want it expired", rk, 2*time.Second)
		}
	}
	if err := a.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("Renew after the keys expired: got %v, want ErrLost", err)
	}
	if keys := stateKeys(testPrefix, c.m.Keys()); len(keys) != 0 {
		t.Errorf("keys after a renew of an expired lease: got %q, want none but the keys' past", keys)
	}
}

func TestClockStatusAtTheEdge(t *testing.T) {
	c, st := newClock(t)
	ctx := ctxTimeout(t, 5*time.Second)
	key := uniqueKey(t)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 4, TTL: leaseTTL, Holder: semaphore.HolderInfo{Host: "h", PID: 7, Command: "c"}})

	// Touched, as a busy key is: no silence pushes the lease back.
	c.advanceTouched(st, semaphore.Request{Key: key, Permits: 4, Weight: 4, TTL: leaseTTL}, leaseTTL, leaseTTL-time.Millisecond)
	status, err := st.Status(ctx, []string{key})
	if err != nil || len(status) != 1 || len(status[0].Holders) != 1 {
		t.Fatalf("Status 1ms before expiry: got (%+v, %v), want one holder", status, err)
	}
	h := status[0].Holders[0]
	want := semaphore.Holder{ID: h.ID, HolderInfo: semaphore.HolderInfo{Host: "h", PID: 7, Command: "c"}, Permits: 4, Weight: 1, Token: a.Token(), Age: leaseTTL - time.Millisecond, ExpiresIn: time.Millisecond, Slots: semaphore.Slots{Numbers: []int{0}}}
	if !reflect.DeepEqual(h, want) || len(h.ID) != 10 || status[0].Capacity != 4 || status[0].Held != 1 {
		t.Errorf("Status 1ms before expiry: got %+v (capacity %d, held %d), want %+v (capacity 4, held 1)", h, status[0].Capacity, status[0].Held, want)
	}
	c.advance(time.Millisecond)
	status, err = st.Status(ctx, []string{key})
	if err != nil || status[0].Held != 0 || len(status[0].Holders) != 0 || status[0].Capacity != 4 {
		t.Errorf("Status at expiry: got (%+v, %v), want no holder, capacity 4", status, err)
	}
}

func TestClockTokensSeededFromClock(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	req := semaphore.Request{Key: key, Permits: 3, TTL: leaseTTL}

	var last int64
	check := func(l semaphore.Lease, when string) {
		t.Helper()
		if floor := c.now.UnixMicro(); l.Token() < floor {
			t.Errorf("token %s: got %d, want at least the server time %d µs", when, l.Token(), floor)
		}
		if l.Token() <= last {
			t.Errorf("token %s: got %d, want more than the previous %d", when, l.Token(), last)
		}
		last = l.Token()
	}
	// Three grants in the same server microsecond.
	for range 3 {
		check(acquire(t, st, req), "at a frozen clock")
	}

	// All keys expire once the leases lapse and nobody renews.
	c.advance(leaseTTL + 2*time.Second)
	if c.m.Exists(k.Token) {
		t.Fatalf("token key after every lease lapsed: got it still there, want it expired")
	}
	check(acquire(t, st, req), "after the keys expired")

	c.m.FlushAll()
	c.advance(time.Millisecond)
	check(acquire(t, st, req), "after FLUSHALL")
}

func TestClockKeysOutliveLongestLease(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second})
	c.advance(5 * time.Second)
	short := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: leaseTTL})

	// The long lease has 25s left; the short grant must not cut the keys' TTL below it.
	for _, rk := range []string{k.Holders, k.Info, k.Token} {
		if got := c.m.TTL(rk); got < 25*time.Second {
			t.Errorf("TTL of %s: got %v, want at least the longest lease's remaining 25s", rk, got)
		}
	}
	c.advance(5 * time.Second)
	if err := short.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew: got %v, want nil", err)
	}
	for _, rk := range []string{k.Holders, k.Info, k.Token} {
		if got := c.m.TTL(rk); got < 20*time.Second {
			t.Errorf("TTL of %s after renewing the shorter lease: got %v, want at least the longest lease's remaining 20s", rk, got)
		}
	}
	// Both leases lapse; soon after, nothing is left.
	c.advance(21 * time.Second)
	if keys := stateKeys(testPrefix, c.m.Keys()); len(keys) > 0 {
		t.Errorf("keys 1s after the last lease lapsed: got %q, want none but the keys' past", keys)
	}
}

func TestClockWaiterWakesWhenLeaseLapses(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})

	// A waiter's place needs renewing every third of its waiter lease, at
	// most WaiterLease: asking a 1s lease makes it look every ~330ms.
	// (The server clock stands still, so it cannot time a look by the
	// holder's lease.)
	done, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}, 10*time.Second)
	// However long the waiter looks, the permit stays taken.
	select {
	case r := <-done:
		t.Fatalf("waiter before the lease lapsed: got (%v, %v), want it still waiting", r.L, r.Err)
	case <-time.After(800 * time.Millisecond):
	}
	// On a real clock the waiter's looks would come every ~330ms of server
	// time as well; this clock jumps, so another caller asks at every
	// third of the lease on the way, lest the scripts take a 10s silence
	// for a clock step and push the lease back (rebase in lib.lua). The
	// look that finds the lease lapsed is the waiter's own.
	c.advanceTouched(st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL}, leaseTTL, leaseTTL)
	r := receive(t, done, 5*time.Second, "waiter after the lease lapsed")
	if r.Err != nil {
		t.Fatalf("waiter after the lease lapsed: got %v, want a permit", r.Err)
	}
	if r.L.Token() <= a.Token() {
		t.Errorf("waiter's token: got %d, want more than %d", r.L.Token(), a.Token())
	}
}

// TestClockSweepWakesWaiter: whoever next looks at a semaphore sweeps the
// lapsed holder away, and the script pushes the turn that made to the
// waiter's wake list: it need not wait for its own next look (~3s away here).
func TestClockSweepWakesWaiter(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	// Shorter than the waiter's lease (WaiterLease, 10s), which must not
	// lapse as well.
	const holderTTL = 5 * time.Second
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: holderTTL})
	var (
		mu    sync.Mutex
		waits []semaphore.WaitState
	)
	onWait, waiting := signal()
	done, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL, OnWait: func(s semaphore.WaitState) {
		mu.Lock()
		waits = append(waits, s)
		mu.Unlock()
		onWait()
	}}, 20*time.Second)
	select {
	case <-waiting:
	case <-time.After(5 * time.Second):
		t.Fatalf("waiter: OnWait not called after 5s, want it waiting")
	}
	c.waiterInLine(protocol.NewKeys(testPrefix, key))

	// Others ask while the holder is silent (the waiter's own look is ~3s
	// of real time away, and the server's clock jumps): touched this often,
	// the key's silence is not taken for a clock step, and the lease is not
	// pushed back (rebase in lib.lua).
	c.advanceTouched(st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL}, holderTTL, holderTTL)
	// Another caller looks: it may not pass the waiter, but it wakes it.
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait Acquire with a waiter first in line: got %v, want ErrBusy", err)
	}
	woken := time.Now()
	r := receive(t, done, 5*time.Second, "waiter after another caller swept the lapsed holder")
	if r.Err != nil {
		t.Fatalf("waiter after another caller swept the lapsed holder: got %v, want a permit", r.Err)
	}
	if d := time.Since(woken); d > time.Second {
		t.Errorf("waiter got the permit %v after the sweep, want within 1s (woken by its wake list, not its ~3s re-check)", d)
	}
	if r.L.Token() <= a.Token() {
		t.Errorf("waiter's token: got %d, want more than %d", r.L.Token(), a.Token())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []semaphore.WaitState{{Held: 1, Capacity: 1, Position: 1, Waiting: 1}}; !slices.Equal(waits, want) {
		t.Errorf("OnWait calls: got %+v, want %+v", waits, want)
	}
}

// TestClockWaiterLeaseLapsesAtExpiry: a waiter that vanished keeps its
// place until its waiter lease lapses, and not a millisecond longer: a
// release at that very instant hands it nothing.
func TestClockWaiterLeaseLapsesAtExpiry(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	raw := rawClient(t, c.m.Addr())
	req := semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL, NoWait: true}
	a := acquire(t, st, req)
	if pos := enqueue(t, raw, key, "GHOST", 1, time.Second); pos != 1 {
		t.Fatalf("vanishing waiter's place: got %d, want 1", pos)
	}
	c.advance(time.Second - time.Millisecond)
	s := statusOf(t, st, key)
	if len(s.Waiters) != 1 || s.Waiters[0].Position != 1 || s.Waiters[0].Waited != time.Second-time.Millisecond {
		t.Fatalf("Status 1ms before the waiter lease lapses: got waiters %+v, want one at position 1, waited 999ms", s.Waiters)
	}
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait Acquire 1ms before the waiter lease lapses: got %v, want ErrBusy", err)
	}
	c.advance(time.Millisecond)
	if s := statusOf(t, st, key); len(s.Waiters) != 0 {
		t.Errorf("Status when the waiter lease lapses: got waiters %+v, want none", s.Waiters)
	}
	// The release sweeps the lapsed waiter before handing the permit on.
	release(t, a)
	if got := c.holders(k); len(got) != 0 {
		t.Errorf("holders after a release at the waiter lease's lapse: got %q, want none (nothing handed to the vanished waiter)", got)
	}
	b := acquire(t, st, req)
	if b.Token() <= a.Token() {
		t.Errorf("token after the vanished waiter: got %d, want more than %d", b.Token(), a.Token())
	}
	if c.m.Exists(k.Queue) {
		t.Errorf("queue key once nobody waits: got it still there, want it gone")
	}
}

// TestClockKeysOutliveWaiterLease: a waiter's lease keeps every key alive
// past the holders' leases, so a waiter never finds its place gone while
// it renews it.
func TestClockKeysOutliveWaiterLease(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	ks := protocol.NewKeys(testPrefix, key)
	raw := rawClient(t, c.m.Addr())
	acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 2 * time.Second})
	enqueue(t, raw, key, "GHOST", 1, 10*time.Second)
	for _, rk := range ks.List() {
		if got := c.m.TTL(rk); got < 10*time.Second {
			t.Errorf("TTL of %s with a waiter lease of 10s: got %v, want at least 10s", rk, got)
		}
	}
	// The holder lapses and its lapse is swept: the waiter's lease still
	// keeps the keys.
	c.advance(5 * time.Second)
	if s := statusOf(t, st, key); s.Held != 0 || len(s.Waiters) != 1 {
		t.Fatalf("Status after the holder lapsed: got %+v, want no holder and one waiter", s)
	}
	c.advance(4 * time.Second)
	for _, rk := range []string{ks.Queue, ks.Waiters, ks.Token} {
		if !c.m.Exists(rk) {
			t.Errorf("key %s 9s into a 10s waiter lease: got it gone, want it there", rk)
		}
	}
	// The waiter lease lapses; soon after, nothing is left.
	c.advance(2*time.Second + time.Millisecond)
	if keys := stateKeys(testPrefix, c.m.Keys()); len(keys) > 0 {
		t.Errorf("keys 1s after the waiter lease lapsed: got %q, want none but the keys' past", keys)
	}
}

func TestClockWaiterRechecksWhenEarliestLeaseCanLapse(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})
	busy := semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL, NoWait: true}

	// One look at the semaphore is one script run.
	var runs atomic.Int64
	c.m.Server().SetPreHook(func(_ *server.Peer, cmd string, _ ...string) bool {
		if cmd == "EVALSHA" || cmd == "EVAL" {
			runs.Add(1)
		}
		return false
	})
	n0 := runs.Load()
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait acquire: got %v, want ErrBusy", err)
	}
	if got := runs.Load() - n0; got != 1 {
		t.Fatalf("script runs of a no-wait acquire: got %d, want 1", got)
	}

	// The lease lapses 5ms from now on the server's (frozen) clock: the
	// waiter must look again after about 5ms, not on its slower backoff
	// schedule (10, 20, 40, 80, 160ms...), which would leave a crashed
	// holder's permit idle for up to a polling period. Others ask on the
	// way, as a busy key's waiters do, so that the silence is not taken
	// for a clock step that pushes the lease back (rebase in lib.lua).
	c.advanceTouched(st, busy, leaseTTL, leaseTTL-5*time.Millisecond)
	done := make(chan error, 1)
	ctx := ctxTimeout(t, time.Minute)
	go func() {
		l, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: leaseTTL})
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	// Time the waiter's first 30 looks: one every ~5ms, against one every
	// few seconds (a third of its place's lease) without the recheck. The
	// bound, a look per 200ms, leaves room for a loaded machine.
	const looks = 30
	n1, began := runs.Load(), time.Now()
	for runs.Load()-n1 < looks && time.Since(began) < 30*time.Second {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(began)
	c.advance(5 * time.Millisecond)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter after the lease lapsed: got %v, want a permit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("waiter after the lease lapsed: still waiting after 30s, want a permit")
	}
	if took > looks*200*time.Millisecond {
		t.Errorf("%d looks at a lease lapsing in 5ms took %v, want under %v: a look every ~5ms", looks, took.Round(time.Millisecond), looks*200*time.Millisecond)
	}
}

// scriptRuns counts, from now on, the runs of the named scripts on c's
// server, by EVALSHA of their hash or EVAL of their source, and returns a
// reader of the counts. It loads the scripts first, so that no run is an
// EVALSHA refused with NOSCRIPT and then an EVAL.
func (c *clocked) scriptRuns(names ...string) func(name string) int64 {
	c.t.Helper()
	raw := rawClient(c.t, c.m.Addr())
	byKey := map[string]string{}
	for _, name := range names {
		sc := scriptNamed(c.t, name)
		if err := raw.ScriptLoad(context.Background(), sc.Source()).Err(); err != nil {
			c.t.Fatalf("SCRIPT LOAD %s: got error %v, want nil", name, err)
		}
		byKey[sc.Hash()] = name
		byKey[sc.Source()] = name
	}
	runs := map[string]int64{}
	c.mu.Lock()
	c.onCommand = func(cmd string, args []string) {
		if (cmd == "EVALSHA" || cmd == "EVAL") && len(args) > 0 {
			if name, ok := byKey[args[0]]; ok {
				runs[name]++
			}
		}
	}
	c.mu.Unlock()
	return func(name string) int64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return runs[name]
	}
}

// waiterInLine waits until one waiter stands in k's line and blocks on
// its wake list, and returns its permit id.
func (c *clocked) waiterInLine(k protocol.Keys) string {
	c.t.Helper()
	var ids []string
	waitFor(c.t, 5*time.Second, "one waiter in line", func() bool {
		var err error
		ids, err = c.m.ZMembers(k.Queue)
		return err == nil && len(ids) == 1
	})
	c.waitBlocked(wakeKeyOf(k.Wake, ids[0]))
	return ids[0]
}

// setWaiterTTL rewrites the ttl of id's waiter record, "<lease expiry ms>
// <N> <weight> <since ms> <ttl ms> <meta>": the lease of the permit a
// script hands it. A short one stands for a waiter that reads its turn
// late, its lease partly or wholly gone.
func (c *clocked) setWaiterTTL(k protocol.Keys, id string, ttl time.Duration) {
	c.t.Helper()
	rec := c.m.HGet(k.Waiters, id)
	f := strings.SplitN(rec, " ", 6)
	if len(f) != 6 {
		c.t.Fatalf("waiter record of %s: got %q, want 5 integers and meta", id, rec)
	}
	f[4] = strconv.FormatInt(ttl.Milliseconds(), 10)
	c.m.HSet(k.Waiters, id, strings.Join(f, " "))
}

// TestClockHandedOverLeaseRunsFromRelease: the lease a release hands a
// waiter runs from the release on the server's clock, and the waiter's
// deadline counts it from its own last ask, by the server time that ask
// carried: 4s of server time between the two move the deadline 4s on. The
// waiter asks nothing more.
func TestClockHandedOverLeaseRunsFromRelease(t *testing.T) {
	c, st := newClock(t)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	runs := c.scriptRuns("acquire", "renew")
	const ttl = 30 * time.Second
	h := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})

	before := hostclock.Now()
	// TTL 30s: a waiter lease of 10s, so no look of its own for ~3s.
	done, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl}, 20*time.Second)
	id := c.waiterInLine(k)
	asked := runs("acquire")
	c.advance(4 * time.Second) // on the server's clock only
	release(t, h)
	released := hostclock.Now()
	r := receive(t, done, 5*time.Second, "waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("waiter after the holder released: got %v, want a permit", r.Err)
	}
	if n := runs("acquire") - asked; n != 0 {
		t.Errorf("acquire script runs of the waiter after the release: got %d, want 0 (its permit handed over)", n)
	}
	if n := runs("renew"); n != 0 {
		t.Errorf("renew script runs: got %d, want 0 (a lease handed over with 30s left needs no renewal first)", n)
	}
	if got := c.only(k); got != id {
		t.Fatalf("holder after the release: got %q, want the waiter %q", got, id)
	}
	// Claimed for 2s until the waiter took its turn; the lease it took
	// runs a TTL from the release.
	if got, want := c.score(k, id), c.ms()+2000; got != want {
		t.Errorf("claim expiry handed over: got %v ms, want release time + 2s = %v ms", got, want)
	}
	if got, want := c.m.HGet(k.Info, "#claim "+id), strconv.FormatInt(int64(c.ms())+ttl.Milliseconds(), 10); got != want {
		t.Errorf("lease expiry handed over: got %q ms, want release time + TTL = %s ms", got, want)
	}
	if r.L.Token() <= h.Token() {
		t.Errorf("token handed over: got %d, want more than %d", r.L.Token(), h.Token())
	}
	// The waiter asked at server time S, sent between before and released;
	// its lease lapses at S+4s+TTL. Less 1ms: readings of the server's
	// clock are whole milliseconds, so semrun takes a span between two as
	// 1ms shorter than it reads.
	lo, hi := before.Add(4*time.Second+ttl-time.Millisecond), released.Add(4*time.Second+ttl)
	if d := r.L.Deadline(); d.Before(lo) || d.After(hi) {
		t.Errorf("Deadline of the lease handed over: got %v after the waiter started, want in [4s+TTL, %v] (its ask + 4s + TTL)", d.Sub(before), hi.Sub(before))
	}
}

// lateHandover is a waiter handed its permit when only left remained of its
// place's lease, as when it reads its turn late.
type lateHandover struct {
	c         *clocked
	st        *Store
	k         protocol.Keys
	key, id   string
	h         semaphore.Lease        // the holder that released
	r         semaphoretest.Acquired // what the waiter's Acquire returned
	runs      func(name string) int64
	asked     int64 // the waiter's acquire runs before the release
	releasing hostclock.Instant
}

// handOverLate makes one: a holder of a ttl lease, a waiter behind it whose
// place's lease is cut to left, then the holder's release.
func handOverLate(t *testing.T, ttl, left time.Duration, what string) lateHandover {
	t.Helper()
	x := lateHandover{key: uniqueKey(t)}
	x.c, x.st = newClock(t)
	x.k = protocol.NewKeys(testPrefix, x.key)
	x.runs = x.c.scriptRuns("acquire", "renew")
	x.h = acquire(t, x.st, semaphore.Request{Key: x.key, Permits: 1, TTL: ttl})
	done, _ := startAcquire(t, x.st, semaphore.Request{Key: x.key, Permits: 1, TTL: ttl}, 20*time.Second)
	x.id = x.c.waiterInLine(x.k)
	x.asked = x.runs("acquire")
	x.c.setWaiterTTL(x.k, x.id, left)
	x.releasing = hostclock.Now()
	release(t, x.h)
	x.r = receive(t, done, 5*time.Second, what)
	if x.r.Err != nil {
		t.Fatalf("%s: got %v, want a permit", what, x.r.Err)
	}
	return x
}

// TestClockShortHandoverRenewedFirst: a waiter handed a lease with less
// than half its TTL left (as when it reads its turn late) renews it before
// Acquire returns, so its command does not start with its lease about to
// lapse.
func TestClockShortHandoverRenewedFirst(t *testing.T) {
	const ttl = 30 * time.Second
	x := handOverLate(t, ttl, time.Second, "waiter handed a 1s lease")
	c, st, k, key, id, h, r, runs, asked, releasing := x.c, x.st, x.k, x.key, x.id, x.h, x.r, x.runs, x.asked, x.releasing
	if n := runs("renew"); n != 1 {
		t.Errorf("renew script runs: got %d, want 1 (the short lease renewed first)", n)
	}
	if n := runs("acquire") - asked; n != 0 {
		t.Errorf("acquire script runs of the waiter after the release: got %d, want 0", n)
	}
	if got, want := c.score(k, id), c.ms()+float64(ttl.Milliseconds()); got != want {
		t.Errorf("lease expiry after the waiter got in: got %v ms, want now + TTL = %v ms (renewed)", got, want)
	}
	if s := statusOf(t, st, key); len(s.Holders) != 1 || s.Holders[0].Token != r.L.Token() || r.L.Token() <= h.Token() {
		t.Errorf("Status once the waiter got in: got %+v, want it the only holder, token %d > %d", s, r.L.Token(), h.Token())
	}
	// Renewed after the release began: a full TTL from then at least.
	if d := r.L.Deadline(); d.Before(releasing.Add(ttl-time.Millisecond)) || d.After(hostclock.Now().Add(ttl)) {
		t.Errorf("Deadline of the renewed lease: got %v after the release began, want in [TTL, now + TTL]", d.Sub(releasing))
	}
}

// TestClockLapsedHandoverAsksAgain: a waiter whose handed lease lapsed
// before it read it (stopped longer than its TTL, here a lease of 0) finds
// its renewal lost and asks again, getting a permit of its own with a new
// token, not the lapsed one.
func TestClockLapsedHandoverAsksAgain(t *testing.T) {
	const ttl = 30 * time.Second
	x := handOverLate(t, ttl, 0, "waiter handed a lapsed lease")
	c, st, k, key, id, h, r, runs, asked, releasing := x.c, x.st, x.k, x.key, x.id, x.h, x.r, x.runs, x.asked, x.releasing
	if n := runs("renew"); n != 1 {
		t.Errorf("renew script runs: got %d, want 1 (the lapsed lease, lost)", n)
	}
	if n := runs("acquire") - asked; n != 1 {
		t.Errorf("acquire script runs of the waiter after the release: got %d, want 1 (it asked again)", n)
	}
	// h's token, then the lapsed handover's, then the waiter's own grant:
	// the clock stands still, so each is one more.
	if got, want := r.L.Token(), h.Token()+2; got != want {
		t.Errorf("token of the waiter's permit: got %d, want %d (after the lapsed handover's %d)", got, want, h.Token()+1)
	}
	if got := c.only(k); got != id {
		t.Fatalf("holder: got %q, want the waiter %q", got, id)
	}
	if got, want := c.score(k, id), c.ms()+float64(ttl.Milliseconds()); got != want {
		t.Errorf("lease expiry of the waiter's permit: got %v ms, want now + TTL = %v ms", got, want)
	}
	if s := statusOf(t, st, key); len(s.Holders) != 1 || s.Holders[0].Token != r.L.Token() || len(s.Waiters) != 0 {
		t.Errorf("Status once the waiter got in: got %+v, want it the only holder, token %d, nobody waiting", s, r.L.Token())
	}
	if d := r.L.Deadline(); d.Before(releasing.Add(ttl-time.Millisecond)) || d.After(hostclock.Now().Add(ttl)) {
		t.Errorf("Deadline of the waiter's permit: got %v after the release began, want in [TTL, now + TTL]", d.Sub(releasing))
	}
}
