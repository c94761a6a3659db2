package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	hostclock "github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// These tests are about the line of waiters the Redis store keeps: its
// order, its waiter leases, and the wake-ups pushed to the waiters' lists.
// (TestStoreWaitersServedInOrder checks the order across stores.)

// inLine returns how many waiters stand in key's line (its queue's ZCARD).
func inLine(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	return zcard(t, c, protocol.NewKeys(testPrefix, key).Queue)
}

// waitListening waits until n waiters stand in key's line, and until as
// many clients of the server block on a wake list (BLPOP) after asking.
func waitListening(t *testing.T, c *redis.Client, key string, n int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d waiters in line for %s", n, key), func() bool { return inLine(t, c, key) == n })
	waitBlocked(t, c, int(n))
}

// waitBlocked waits until at least n clients of c's server block in BLPOP,
// as CLIENT LIST says: flag b, last command blpop. Redis does not say on
// which list: on a server other tests share, others' waiters count too.
func waitBlocked(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d clients blocked in BLPOP", n), func() bool {
		list, err := c.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatalf("CLIENT LIST: got error %v, want the clients", err)
		}
		blocked := 0
		for line := range strings.Lines(list) {
			fields := map[string]string{}
			for field := range strings.FieldsSeq(line) {
				name, value, _ := strings.Cut(field, "=")
				fields[name] = value
			}
			if fields["cmd"] == "blpop" && strings.Contains(fields["flags"], "b") {
				blocked++
			}
		}
		return blocked >= n
	})
}

// wakeKeyOf is the wake list of the waiter whose member (what the queue
// holds: protocol.Member of its id) is m, under a key's wake-list prefix,
// as lib.lua names it: ":" and the first 16 hex digits of m's SHA-1.
func wakeKeyOf(channel, m string) string {
	sum := sha1.Sum([]byte(m))
	return channel + ":" + hex.EncodeToString(sum[:8])
}

// wakeLists returns the wake lists under a key's wake-list prefix, found by
// SCAN (never KEYS).
func wakeListsOf(t *testing.T, c *redis.Client, channel string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(context.Background(), 0, channel+":*", 100).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN MATCH %s:*: got error %v, want nil", channel, err)
	}
	return out
}

// waitersOf waits until Status shows n waiters of key, and returns them.
func waitersOf(t *testing.T, st semaphore.Store, key string, n int) []semaphore.Waiter {
	t.Helper()
	var w []semaphore.Waiter
	waitFor(t, 10*time.Second, fmt.Sprintf("%d waiters in Status", n), func() bool {
		w = statusOf(t, st, key).Waiters
		return len(w) == n
	})
	return w
}

// TestRedisWakeUpIsPushed: a release pushes the turn of the waiter whose
// turn it is to its wake list, where it blocks, so it gets in at once, not
// at its next look (~3s away with a 10s waiter lease).
func TestRedisWakeUpIsPushed(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	got, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitListening(t, raw, key, 1)

	release(t, h)
	released := time.Now()
	r := receive(t, got, 10*time.Second, "waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("waiter after the holder released: got %v, want a permit", r.Err)
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("waiter got the permit %v after the release, want within 1s (woken by its wake list, not its ~3s re-check)", d)
	}
	if l := wakeListsOf(t, raw, protocol.NewKeys(testPrefix, key).Wake); len(l) != 0 {
		t.Errorf("wake lists once the waiter got in: got %v, want none (read, or dropped on the grant)", l)
	}
}

// TestRedisLostWakeUpCoveredByRecheck: a wake-up nobody reads (its list
// lost, say to a failover) costs the waiter no more than its next look,
// every third of its waiter lease.
func TestRedisLostWakeUpCoveredByRecheck(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 30*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	held := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}).(*lease)
	// TTL 3s: a waiter lease of 3s, so a look about every second.
	got, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 3 * time.Second}, 20*time.Second)
	waitListening(t, raw, key, 1)

	// The holder's release pushes the waiter's turn, and its wake list is
	// deleted in the same transaction, before the blocked BLPOP is served:
	// the wake-up reaches nobody.
	z := members(t, raw, k)
	if len(z) != 1 {
		t.Fatalf("holders: got %v, want one", z)
	}
	waiters, err := raw.ZRange(ctx, k.Queue, 0, -1).Result()
	if err != nil || len(waiters) != 1 {
		t.Fatalf("ZRANGE %s: got (%v, %v), want one waiter", k.Queue, waiters, err)
	}
	list := wakeKeyOf(k.Wake, waiters[0])
	var released *redis.Cmd
	var pushed, deleted *redis.IntCmd
	if _, err := raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
		released = protocol.Eval(ctx, p, k, protocol.ReleaseArgs{ID: held.id})
		pushed = p.LLen(ctx, list)
		deleted = p.Del(ctx, list)
		return nil
	}); err != nil {
		t.Fatalf("release, then DEL the wake list, in MULTI: got error %v, want nil", err)
	}
	start := time.Now()
	if r, err := protocol.DecodeRelease(released.Val()); err != nil || !r.Released {
		t.Fatalf("release script: got (%+v, %v), want released", r, err)
	}
	if n := pushed.Val(); n != 1 {
		t.Fatalf("the waiter's wake list right after the release: got length %d, want 1 (its turn pushed)", n)
	}
	if n := deleted.Val(); n != 1 {
		t.Fatalf("DEL of the waiter's wake list: got %d, want 1 (the wake-up lost)", n)
	}
	r := receive(t, got, 10*time.Second, "waiter whose wake-up was lost")
	if r.Err != nil {
		t.Fatalf("waiter whose wake-up was lost: got %v, want a permit", r.Err)
	}
	// Its look comes ~0.9-1.1s (a third of 3s, jittered) after it
	// blocked (~0.1s before the release), not at once: nothing woke it.
	if d := time.Since(start); d > 2*time.Second || d < 300*time.Millisecond {
		t.Errorf("waiter got the permit %v after a release it did not hear, want between 0.3s and 2s (its ~1s re-check, not a wake-up)", d)
	}
	t.Logf("waiter got the permit %v after a release it did not hear", time.Since(start))
}

// TestRedisVanishedWaiterStallsNoOne: a waiter that took its place and
// vanished (killed, host lost) holds up those behind it for no longer than
// its waiter lease.
func TestRedisVanishedWaiterStallsNoOne(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	// TTL 1s: a waiter lease of 1s, for the vanished waiter and the others.
	infoA := semaphore.HolderInfo{Host: "a", PID: 1, Command: "first"}
	infoB := semaphore.HolderInfo{Host: "b", PID: 2, Command: "behind"}
	first, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: infoA}, 20*time.Second)
	waitersOf(t, st, key, 1)
	if pos := enqueue(t, raw, key, "VANISHED0WAITER", 1, time.Second); pos != 2 {
		t.Fatalf("vanishing waiter's place: got %d, want 2", pos)
	}
	enqueued := time.Now()
	behind, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: infoB}, 20*time.Second)
	w := waitersOf(t, st, key, 3)
	if !reflect.DeepEqual(w[0].HolderInfo, infoA) || !reflect.DeepEqual(w[1].HolderInfo, (semaphore.HolderInfo{})) || !reflect.DeepEqual(w[2].HolderInfo, infoB) {
		t.Fatalf("line: got %+v, want the first waiter, the vanishing one, the one behind", w)
	}

	release(t, h)
	ra := receive(t, first, 5*time.Second, "first waiter after the holder released")
	if ra.Err != nil {
		t.Fatalf("first waiter after the holder released: got %v, want a permit", ra.Err)
	}
	release(t, ra.L)
	released := time.Now()
	// The vanished waiter's turn now: it is handed the permit, with the 1s
	// lease it asked for, and never reads it; the permit lapses after that.
	rb := receive(t, behind, 5*time.Second, "waiter behind a vanished one")
	if rb.Err != nil {
		t.Fatalf("waiter behind a vanished one: got %v, want a permit", rb.Err)
	}
	t.Logf("the waiter behind got in %v after the release, %v after the vanished waiter took its place", time.Since(released), time.Since(enqueued))
	if d := time.Since(enqueued); d < 900*time.Millisecond {
		t.Errorf("waiter behind a vanished one got in %v after it took its place, want not before its 1s waiter lease lapsed", d)
	}
	if s := statusOf(t, st, key); len(s.Waiters) != 0 || len(s.Holders) != 1 || !reflect.DeepEqual(s.Holders[0].HolderInfo, infoB) {
		t.Errorf("Status once the waiter behind got in: got %+v, want it the only holder and no waiter", s)
	}
}

// TestRedisGivenUpWaiterLeavesLine: a waiter whose wait ends leaves the
// line before Acquire returns, and the one behind moves up.
func TestRedisGivenUpWaiterLeavesLine(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	infoA := semaphore.HolderInfo{Host: "a", PID: 1, Command: "gives up"}
	infoB := semaphore.HolderInfo{Host: "b", PID: 2, Command: "behind"}
	const patience = 1500 * time.Millisecond
	first, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Holder: infoA}, patience)
	started := time.Now()
	waitersOf(t, st, key, 1)
	behind, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Holder: infoB}, 20*time.Second)
	w := waitersOf(t, st, key, 2)
	if time.Since(started) >= patience {
		t.Fatalf("internal: the second waiter took its place only after the first gave up; want a longer patience than %v", patience)
	}
	if !reflect.DeepEqual(w[0].HolderInfo, infoA) || !reflect.DeepEqual(w[1].HolderInfo, infoB) || w[1].Position != 2 {
		t.Fatalf("line: got %+v, want the one that gives up first, the other at position 2", w)
	}

	r := receive(t, first, 5*time.Second, "waiter whose deadline passed")
	if !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("waiter whose deadline passed: got (%v, %v), want context.DeadlineExceeded", r.L, r.Err)
	}
	if d := time.Since(started); d > patience+time.Second {
		t.Errorf("waiter with a deadline %v away returned after %v, want soon after its deadline", patience, d)
	}
	// At once: no lease needs to lapse.
	s := statusOf(t, st, key)
	if len(s.Waiters) != 1 || !reflect.DeepEqual(s.Waiters[0].HolderInfo, infoB) || s.Waiters[0].Position != 1 {
		t.Fatalf("waiters right after the first gave up: got %+v, want only the other, at position 1", s.Waiters)
	}
	release(t, h)
	rb := receive(t, behind, 2*time.Second, "waiter now first in line, after the holder released")
	if rb.Err != nil {
		t.Fatalf("waiter now first in line, after the holder released: got %v, want a permit", rb.Err)
	}
}

// TestRedisStatusShowsLine: Status lists the waiters in the order they
// came, with their place, weight, capacity and who they are.
func TestRedisStatusShowsLine(t *testing.T) {
	t.Parallel()
	srv, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	infoH := semaphore.HolderInfo{Host: "holder", PID: 10, Command: "hold all"}
	h := hold(t, st, semaphore.Request{Key: key, Permits: 3, Weight: 3, TTL: 30 * time.Second, Holder: infoH})
	want := []semaphore.Waiter{
		{HolderInfo: semaphore.HolderInfo{Host: "w1", PID: 11, Command: "light"}, Permits: 3, Weight: 1, Position: 1},
		{HolderInfo: semaphore.HolderInfo{Host: "w2", PID: 12, Command: `say "hi" {x}`}, Permits: 3, Weight: 2, Position: 2},
		{HolderInfo: semaphore.HolderInfo{Host: "w3", PID: 13, Command: "heavy"}, Permits: 3, Weight: 3, Position: 3},
	}
	for i, w := range want {
		// Each from a store of its own, as from a process of its own.
		other := newStore(t, srv.URL(), Options{})
		startAcquire(t, other, semaphore.Request{Key: key, Permits: w.Permits, Weight: w.Weight, TTL: 30 * time.Second, Holder: w.HolderInfo}, 20*time.Second)
		waitersOf(t, st, key, i+1)
		time.Sleep(5 * time.Millisecond) // the next waits from a later millisecond
	}
	s := statusOf(t, st, key)
	if s.Held != 3 || s.Capacity != 3 || len(s.Holders) != 1 || !reflect.DeepEqual(s.Holders[0].HolderInfo, infoH) || s.Holders[0].Weight != 3 || s.Holders[0].Token != h.Token() {
		t.Errorf("Status holders: got held %d, capacity %d, %+v, want held 3, capacity 3, one holder %+v of weight 3", s.Held, s.Capacity, s.Holders, infoH)
	}
	if len(s.Waiters) != len(want) {
		t.Fatalf("Status waiters: got %+v, want %d", s.Waiters, len(want))
	}
	for i, w := range s.Waiters {
		if w.Waited < 0 || w.Waited > 10*time.Second || i > 0 && w.Waited > s.Waiters[i-1].Waited {
			t.Errorf("waiter %d waited %v, want in [0, 10s] and no more than the one before it (%v)", i+1, w.Waited, s.Waiters[max(i-1, 0)].Waited)
		}
		w.Waited = 0
		if !reflect.DeepEqual(w, want[i]) {
			t.Errorf("waiter %d: got %+v, want %+v", i+1, w, want[i])
		}
	}
}

// TestRedisOnWaitFollowsLine: OnWait reports the waiter's place and how
// many wait as the line moves: someone ahead gives up, someone ahead gets in.
func TestRedisOnWaitFollowsLine(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	_, stopFirst := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitersOf(t, st, key, 1)
	second, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitersOf(t, st, key, 2)

	var (
		mu     sync.Mutex
		states []semaphore.WaitState
	)
	last := func() semaphore.WaitState {
		mu.Lock()
		defer mu.Unlock()
		if len(states) == 0 {
			return semaphore.WaitState{}
		}
		return states[len(states)-1]
	}
	// TTL 1s: a waiter lease of 1s, so the third looks every ~330ms.
	third, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, OnWait: func(s semaphore.WaitState) {
		mu.Lock()
		states = append(states, s)
		mu.Unlock()
	}}, 20*time.Second)
	place := func(pos, waiting int) func() bool {
		return func() bool { s := last(); return s.Position == pos && s.Waiting == waiting }
	}
	// The bounds only catch a hang: a loaded machine took more than 5s.
	waitFor(t, 30*time.Second, "OnWait: third of 3", place(3, 3))
	stopFirst() // the first gives up
	waitFor(t, 30*time.Second, "OnWait: second of 2, after the first gave up", place(2, 2))
	release(t, h) // the second gets in
	r := receive(t, second, 30*time.Second, "second waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("second waiter after the holder released: got %v, want a permit", r.Err)
	}
	waitFor(t, 30*time.Second, "OnWait: first of 1, after the one ahead got in", place(1, 1))
	release(t, r.L)
	if r := receive(t, third, 5*time.Second, "third waiter after the others"); r.Err != nil {
		t.Fatalf("third waiter after the others: got %v, want a permit", r.Err)
	}

	mu.Lock()
	defer mu.Unlock()
	// Where a look fell between a release and the grant it allowed,
	// Held may have been 0 for a moment; the places are these, in order.
	var places []string
	for i, s := range states {
		if s.Capacity != 1 || s.Held < 0 || s.Held > 1 {
			t.Errorf("OnWait call %d: got %+v, want capacity 1, held 0 or 1", i, s)
		}
		if i > 0 && s == states[i-1] {
			t.Errorf("OnWait calls %d and %d: got %+v twice, want a call only on a change", i-1, i, s)
		}
		p := strconv.Itoa(s.Position) + "/" + strconv.Itoa(s.Waiting)
		if len(places) == 0 || places[len(places)-1] != p {
			places = append(places, p)
		}
	}
	if want := []string{"3/3", "2/2", "1/1"}; !slices.Equal(places, want) {
		t.Errorf("places OnWait reported (position/waiting): got %v, want %v (all calls: %+v)", places, want, states)
	}
}

// TestRedisHeavyWaiterNotStarved: a waiter that needs every permit is not
// passed by light callers who come after it, however busy they keep the
// semaphore.
func TestRedisHeavyWaiterNotStarved(t *testing.T) {
	t.Parallel()
	srv, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	const n, lights = 3, 4

	var (
		grants atomic.Int64
		wg     sync.WaitGroup
		errs   = make(chan error, lights)
	)
	stores := make([]*Store, lights)
	for i := range stores {
		stores[i] = newStore(t, srv.URL(), Options{})
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(func() { stop(); wg.Wait() }) // before the stores close
	for i, s := range stores {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second, Holder: semaphore.HolderInfo{PID: i}})
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("light caller %d: got %w, want a permit", i, err)
					}
					return
				}
				grants.Add(1)
				time.Sleep(20 * time.Millisecond)
				if err := l.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("light caller %d: release: got %w, want nil", i, err)
					return
				}
			}
		})
	}
	waitFor(t, 10*time.Second, "light callers cycling", func() bool { return grants.Load() >= 2*lights })

	start := time.Now()
	heavy, err := st.Acquire(ctxTimeout(t, 10*time.Second), semaphore.Request{Key: key, Permits: n, Weight: n, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("heavy waiter (weight %d) among light callers: got %v after %v, want a permit", n, err, time.Since(start))
	}
	t.Logf("heavy waiter got in after %v", time.Since(start))
	if s := statusOf(t, st, key); s.Held != n || len(s.Holders) != 1 || s.Holders[0].Weight != n {
		t.Errorf("Status while the heavy waiter holds: got %+v, want held %d by it alone", s, n)
	}
	before := grants.Load()
	time.Sleep(50 * time.Millisecond)
	if got := grants.Load(); got != before {
		t.Errorf("light grants while the heavy waiter holds every permit: got %d, want 0", got-before)
	}
	release(t, heavy)
	waitFor(t, 5*time.Second, "light callers cycling again after the heavy one", func() bool { return grants.Load() >= before+lights })
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// commandCalls sums the calls INFO commandstats counts for cmds.
func commandCalls(t *testing.T, c *redis.Client, cmds ...string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: got error %v, want nil", err)
	}
	var sum int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains(cmds, strings.TrimPrefix(name, "cmdstat_")) {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats line %q: got %v, want calls=N", line, err)
		}
		sum += n
	}
	return sum
}

// TestRedisCommandsPerGrantStayFlat: a release wakes the waiters whose
// turn it is, not every waiter, so what a grant costs the server does not
// grow with the line.
func TestRedisCommandsPerGrantStayFlat(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	perGrant := func(waiters int) float64 {
		key := uniqueKey(t)
		h := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		t.Cleanup(func() { cancel(); wg.Wait() })
		for range waiters {
			wg.Go(func() {
				// TTL 30s: a waiter lease of 10s, so no look of their own
				// for ~3s, longer than the test runs.
				l, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		waitersOf(t, st, key, waiters)
		waitListening(t, raw, key, int64(waiters))
		if err := raw.ConfigResetStat(context.Background()).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: got error %v, want nil", err)
		}
		start := time.Now()
		release(t, h)
		wg.Wait()
		calls := commandCalls(t, raw, "evalsha", "eval", "blpop")
		close(errs)
		for err := range errs {
			t.Errorf("waiter: got %v, want a permit", err)
		}
		ratio := float64(calls) / float64(waiters)
		t.Logf("%d waiters: %d grants in %v, %d calls of evalsha, eval, blpop: %.2f a grant", waiters, waiters, time.Since(start), calls, ratio)
		return ratio
	}
	few, many := perGrant(10), perGrant(40)
	if many > 1.5*few+1 {
		t.Errorf("commands a grant with 40 waiters: got %.2f, want at most 1.5 × %.2f (with 10 waiters) + 1", many, few)
	}
}

// TestRedisNewHeadWakesAtLapse: a waiter that moved to the head of the line
// without being told (the one before it gave up, and it still did not fit)
// takes a crashed holder's permit when its lease lapses, not at its next
// look (at least 3s away with a 10s waiter lease).
func TestRedisNewHeadWakesAtLapse(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	// A holder that never renews: as if killed, its permit lapses after 1s.
	acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	granted := time.Now()
	_, stopFirst := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitListening(t, raw, key, 1)
	second, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitListening(t, raw, key, 2)
	stopFirst() // leaves the line; the second is first now, and not told

	r := receive(t, second, 10*time.Second, "the new first in line")
	if r.Err != nil {
		t.Fatalf("the new first in line: got %v, want a permit", r.Err)
	}
	if took := time.Since(granted); took > 2500*time.Millisecond {
		t.Errorf("the new first in line: got the crashed holder's permit %v after its grant, want soon after its 1s lease lapsed", took.Round(time.Millisecond))
	}
}

// TestRedisWithoutChannelRights: an ACL user with rights on keys only, none
// on pub/sub channels (resetchannels), gets its grants, and its waiters
// their turn: wake-ups go through lists, which need no channel rights.
func TestRedisWithoutChannelRights(t *testing.T) {
	t.Parallel()
	srv, _, raw := setup(t, Options{})
	if err := raw.Do(context.Background(), "ACL", "SETUSER", "nochan", "on", ">pw", "~*", "+@all", "resetchannels").Err(); err != nil {
		t.Fatalf("ACL SETUSER: got error %v, want nil", err)
	}
	st := newStore(t, "redis://nochan:pw@"+srv.Addr+"/0", Options{})
	key := uniqueKey(t)
	h := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	got, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitersOf(t, st, key, 1)
	release(t, h)
	r := receive(t, got, 10*time.Second, "waiter without channel rights")
	if r.Err != nil {
		t.Fatalf("waiter without channel rights after the release: got %v, want a permit", r.Err)
	}
	release(t, r.L)
}

// scriptRuns counts, by name, the runs of the store's scripts sent through
// a client it hooks: EVALSHA of a script's hash or EVAL of its source.
type scriptRuns struct {
	names map[string]string // hash and source -> name
	mu    sync.Mutex
	runs  map[string]int
}

// newScriptRuns counts the named scripts, which it loads on c's server
// first, so that no run is an EVALSHA refused with NOSCRIPT and then an EVAL.
func newScriptRuns(t *testing.T, c *redis.Client, names ...string) *scriptRuns {
	t.Helper()
	s := &scriptRuns{names: map[string]string{}, runs: map[string]int{}}
	for _, name := range names {
		sc := scriptNamed(t, name)
		if err := c.ScriptLoad(context.Background(), sc.Source()).Err(); err != nil {
			t.Fatalf("SCRIPT LOAD %s: got error %v, want nil", name, err)
		}
		s.names[sc.Hash()] = name
		s.names[sc.Source()] = name
	}
	return s
}

func (s *scriptRuns) get(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[name]
}

func (s *scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			if name, ok := s.names[fmt.Sprint(args[1])]; ok {
				s.mu.Lock()
				s.runs[name]++
				s.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

// TestRedisWaiterHandedItsPermit: a release hands the permit to the waiter
// blocked on its wake list, which returns its lease without asking the
// store again, with a deadline no later than the lease the store gave it.
func TestRedisWaiterHandedItsPermit(t *testing.T) {
	t.Parallel()
	srv, st, raw := setup(t, Options{})
	runs := newScriptRuns(t, raw, "acquire", "renew")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	c.AddHook(runs)
	waiting := wrapStore(t, c, Options{Prefix: testPrefix})
	t.Cleanup(func() { _ = waiting.Close() })
	key := uniqueKey(t)
	const ttl = 30 * time.Second
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})

	before := hostclock.Now()
	// TTL 30s: a waiter lease of 10s, so no look of its own for ~3s.
	got, _ := startAcquire(t, waiting, semaphore.Request{Key: key, Permits: 1, TTL: ttl}, 20*time.Second)
	waitListening(t, raw, key, 1)
	asked := runs.get("acquire")
	if asked == 0 {
		t.Fatalf("acquire script runs of the waiter: got 0, want at least 1 (the hook counts nothing)")
	}
	release(t, h)
	released := hostclock.Now()
	r := receive(t, got, 10*time.Second, "waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("waiter after the holder released: got %v, want a permit", r.Err)
	}
	if n := runs.get("acquire") - asked; n != 0 {
		t.Errorf("acquire script runs of the waiter after the release: got %d, want 0 (its permit handed over on its wake list)", n)
	}
	if n := runs.get("renew"); n != 0 {
		t.Errorf("renew script runs of the waiter: got %d, want 0 (a lease handed over with ~30s left needs no renewal first)", n)
	}
	s := statusOf(t, st, key)
	if len(s.Holders) != 1 || s.Holders[0].Token != r.L.Token() || len(s.Waiters) != 0 {
		t.Errorf("Status once the waiter got in: got %+v, want it the only holder, token %d, nobody waiting", s, r.L.Token())
	}
	if r.L.Token() <= h.Token() {
		t.Errorf("token handed over: got %d, want more than the releasing holder's %d", r.L.Token(), h.Token())
	}
	// The store's lease runs from the release: the local deadline is no
	// later than that (semrun takes spans of the server's clock, read in
	// whole milliseconds, as 1ms shorter); and not before the waiter's own
	// first ask plus the TTL, give or take a second for the server's clock,
	// which is not ours.
	d := r.L.Deadline()
	if latest := released.Add(ttl); d.After(latest) {
		t.Errorf("Deadline of the lease handed over: got %v after the release returned, want at most the TTL %v", d.Sub(released), ttl)
	}
	if earliest := before.Add(ttl - time.Second); d.Before(earliest) {
		t.Errorf("Deadline of the lease handed over: got %v after the waiter started, want at least the TTL %v less a second", d.Sub(before), ttl)
	}
	if l := wakeListsOf(t, raw, protocol.NewKeys(testPrefix, key).Wake); len(l) != 0 {
		t.Errorf("wake lists once the waiter got in: got %v, want none (read)", l)
	}
	release(t, r.L)
}
