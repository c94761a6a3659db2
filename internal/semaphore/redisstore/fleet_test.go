package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// deadWaiterBound is what a waiter that died in line may cost those behind
// it, whatever its TTL: the README promises it.
const deadWaiterBound = 3 * time.Second

// TestRedisDeadWaiterCostsSeconds: a waiter killed in the middle of the
// line, at its head, or as its permit is handed over, holds up the waiter
// behind it for at most deadWaiterBound, though every lease is 30s: the
// permit handed to it is only claimed until it takes its turn.
func TestRedisDeadWaiterCostsSeconds(t *testing.T) {
	t.Parallel()
	srv, st, raw := setup(t, Options{})
	const ttl = 30 * time.Second
	req := func(key string) semaphore.Request { return semaphore.Request{Key: key, Permits: 1, TTL: ttl} }
	// waitFree gives the permit back, and says how long the waiter behind
	// the dead one took to get it.
	stall := func(t *testing.T, free func(), behind <-chan semaphoretest.Acquired) time.Duration {
		t.Helper()
		start := time.Now()
		free()
		r := receive(t, behind, 10*time.Second, "the waiter behind the dead one")
		if r.Err != nil {
			t.Fatalf("the waiter behind the dead one: got %v, want a permit", r.Err)
		}
		release(t, r.L)
		return time.Since(start)
	}

	t.Run("in the middle", func(t *testing.T) {
		t.Parallel()
		key := uniqueKey(t)
		h := hold(t, st, req(key))
		first, _ := startAcquire(t, st, req(key), 20*time.Second)
		waitersOf(t, st, key, 1)
		// A waiter that asks once, then is gone: its place lasts 30s.
		if pos := enqueue(t, raw, key, "DEAD0IN0THE0MIDDLE", 1, ttl); pos != 2 {
			t.Fatalf("dead waiter's place: got %d, want 2", pos)
		}
		behind, _ := startAcquire(t, st, req(key), 20*time.Second)
		waitersOf(t, st, key, 3)
		release(t, h)
		r := receive(t, first, 5*time.Second, "the first waiter")
		if r.Err != nil {
			t.Fatalf("the first waiter: got %v, want a permit", r.Err)
		}
		if d := stall(t, func() { release(t, r.L) }, behind); d > deadWaiterBound {
			t.Errorf("the waiter behind a dead one got the permit %v after it was freed, want within %v", d, deadWaiterBound)
		}
	})

	t.Run("at the head", func(t *testing.T) {
		t.Parallel()
		key := uniqueKey(t)
		h := hold(t, st, req(key))
		if pos := enqueue(t, raw, key, "DEAD0AT0THE0HEAD", 1, ttl); pos != 1 {
			t.Fatalf("dead waiter's place: got %d, want 1", pos)
		}
		behind, _ := startAcquire(t, st, req(key), 20*time.Second)
		waitersOf(t, st, key, 2)
		if d := stall(t, func() { release(t, h) }, behind); d > deadWaiterBound {
			t.Errorf("the waiter behind a dead one got the permit %v after it was freed, want within %v", d, deadWaiterBound)
		}
	})

	t.Run("as its permit is handed over", func(t *testing.T) {
		t.Parallel()
		key := uniqueKey(t)
		h := hold(t, st, req(key))
		// A real waiter, blocked on its wake list, whose connection goes
		// (as when killed): its place stays, until its turn comes.
		dying := newStore(t, srv.URL(), Options{})
		startAcquire(t, dying, req(key), 20*time.Second)
		waitersOf(t, st, key, 1)
		waitListening(t, raw, key, 1)
		_ = dying.Close()
		killBlocked(t, raw)
		behind, _ := startAcquire(t, st, req(key), 20*time.Second)
		waitersOf(t, st, key, 2)
		waitBlocked(t, raw, 1) // behind: the dying one's connection is gone
		if d := stall(t, func() { release(t, h) }, behind); d > deadWaiterBound {
			t.Errorf("the waiter behind a dead one got the permit %v after it was freed, want within %v", d, deadWaiterBound)
		}
	})
}

// killBlocked cuts the connections of every client blocked in BLPOP, as
// the death of their processes would.
func killBlocked(t *testing.T, raw *redis.Client) {
	t.Helper()
	ctx := context.Background()
	list, err := raw.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	for line := range strings.Lines(list) {
		if !strings.Contains(line, " cmd=blpop") {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if id, ok := strings.CutPrefix(field, "id="); ok {
				if err := raw.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
					t.Fatalf("CLIENT KILL ID %s: %v", id, err)
				}
			}
		}
	}
}

// TestRedisLineIsBounded: a caller that would make the line longer than
// the store takes is refused as busy, saying so, and takes no place.
func TestRedisLineIsBounded(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	st.maxLine = 2
	key := uniqueKey(t)
	hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	for range 2 {
		startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	}
	waitersOf(t, st, key, 2)
	_, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	var full *semaphore.LineError
	if !errors.As(err, &full) || !errors.Is(err, semaphore.ErrBusy) || full.Waiting != 2 || full.Max != 2 {
		t.Fatalf("a third waiter on a line of at most 2: got %v, want a *LineError (2 waiting, at most 2) that is ErrBusy", err)
	}
	if n := zcard(t, raw, protocol.NewKeys(testPrefix, key).Queue); n != 2 {
		t.Errorf("line after the refusal: got %d waiting, want 2", n)
	}
}

// TestRedisScriptWorkIsFlat: what one script does grows with the logarithm
// of the line, not with it: the commands each of the calls a grant takes
// runs inside Redis are as many with 2,000 waiters as with 20.
func TestRedisScriptWorkIsFlat(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	// work runs one round on a key with waiters in line: the holder's
	// release (which hands the permit over), the new holder's renewal, a
	// waiter at the back keeping its place, and a status. It returns the
	// commands they ran, scripts' own included.
	work := func(waiters int) int64 {
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		h := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
		ids := make([]string, waiters)
		for i := range ids {
			ids[i] = fmt.Sprintf("WAITER%05d", i)
			runAcquireArgs(t, raw, k, protocol.AcquireArgs{ID: ids[i], Permits: 1, TTL: 30 * time.Second, Wait: time.Minute})
		}
		// The head is alive, blocked on its wake list, as in a healthy
		// line: its turn is taken at once, and no roll call follows.
		head := redis.NewClient(&redis.Options{Addr: raw.Options().Addr, Protocol: 2, DisableIdentity: true, ClientName: "head-" + key})
		defer head.Close()
		popped := make(chan error, 1)
		go func() { popped <- head.BLPop(ctx, 10*time.Second, k.WakeList(ids[0])).Err() }()
		waitFor(t, 10*time.Second, "the head blocked on its wake list", func() bool {
			list, err := raw.ClientList(ctx).Result()
			return err == nil && strings.Contains(list, "name=head-"+key+" ") && strings.Contains(list, "cmd=blpop")
		})
		if err := raw.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		release(t, h)
		if err := <-popped; err != nil {
			t.Fatalf("the head's BLPOP: %v, want its turn", err)
		}
		runScript(t, raw, k, protocol.RenewArgs{ID: ids[0], TTL: 30 * time.Second})
		runAcquireArgs(t, raw, k, protocol.AcquireArgs{ID: ids[waiters-1], Permits: 1, TTL: 30 * time.Second, Wait: time.Minute})
		runScript(t, raw, k, protocol.StatusArgs{List: 10})
		return allCommandCalls(t, raw) - commandCalls(t, raw, "evalsha", "eval", "info", "config|resetstat", "config")
	}
	few, many := work(20), work(2000)
	t.Logf("commands run for a release, a renewal, a waiter's look and a status: %d with 20 waiters, %d with 2,000", few, many)
	if many > few+10 {
		t.Errorf("commands with 2,000 waiters: got %d, want about as many as with 20 (%d)", many, few)
	}
}

// allCommandCalls sums the calls of every command in INFO commandstats.
func allCommandCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: got error %v, want nil", err)
	}
	var names []string
	for line := range strings.Lines(info) {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.HasPrefix(name, "cmdstat_") {
			names = append(names, strings.TrimPrefix(name, "cmdstat_"))
		}
	}
	return commandCalls(t, c, names...)
}

// TestRedisWakeListGarbageIsDropped: elements in a waiter's wake list that
// no script wrote are dropped with backoff: a stream of them costs a few
// calls, not a hot loop; the waiter still gets its turn.
func TestRedisWakeListGarbageIsDropped(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	got, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitListening(t, raw, key, 1)
	ids, err := raw.ZRange(ctx, k.Queue, 0, -1).Result()
	if err != nil || len(ids) != 1 {
		t.Fatalf("line: got (%v, %v), want one waiter", ids, err)
	}
	list := wakeKeyOf(k.Wake, ids[0])
	before := commandCalls(t, raw, "evalsha", "eval", "blpop")
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if err := raw.RPush(ctx, list, "g x y", "garbage", "c -1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	calls := commandCalls(t, raw, "evalsha", "eval", "blpop") - before
	t.Logf("calls of a waiter fed garbage for 2s: %d", calls)
	if calls > 40 {
		t.Errorf("calls of a waiter fed garbage for 2s: got %d, want a few (backoff)", calls)
	}
	if err := raw.Del(ctx, list).Err(); err != nil {
		t.Fatal(err)
	}
	release(t, h)
	if r := receive(t, got, 10*time.Second, "the waiter fed garbage"); r.Err != nil {
		t.Errorf("the waiter fed garbage: got %v, want a permit", r.Err)
	}
}

// TestRedisTimeoutInFlightIsBusy: a caller's deadline that ends a wait
// while the store, reached before, fails (here: killed, so each try is
// refused and retried within the connect timeout) is the caller's: busy,
// not unreachable.
func TestRedisTimeoutInFlightIsBusy(t *testing.T) {
	t.Parallel()
	srv, st, _ := setup(t, Options{ConnectTimeout: 5 * time.Second})
	key := uniqueKey(t)
	acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	srv.Kill()
	_, err := st.Acquire(ctxTimeout(t, time.Second), semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, semaphore.ErrUnreachable) {
		t.Errorf("Acquire whose deadline ends while Redis, reached before, refuses: got %v, want the deadline, not unreachable", err)
	}
	// A store never reached is unreachable, whatever ends the wait.
	never := newStore(t, srv.URL(), Options{ConnectTimeout: 5 * time.Second})
	_, err = never.Acquire(ctxTimeout(t, time.Second), semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	if !errors.Is(err, semaphore.ErrUnreachable) {
		t.Errorf("Acquire of a store never reached: got %v, want ErrUnreachable", err)
	}
}

// TestWaiterLeaseGrowsWithTheLine: in a short line a waiter's lease is
// the one it asks (its TTL, at most WaiterLease); a long line stretches it
// 120ms a waiter, so that the renewals of places on a key stay under ~25 a
// second, from the first ask on.
func TestWaiterLeaseGrowsWithTheLine(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	ask := func(id string) protocol.AcquireReply {
		return runAcquireArgs(t, raw, k, protocol.AcquireArgs{ID: id, Permits: 1, TTL: 30 * time.Second, Wait: WaiterLease})
	}
	if r := ask("FIRST"); r.Wait != WaiterLease.Milliseconds() {
		t.Errorf("the first waiter's lease: got %dms, want %v", r.Wait, WaiterLease)
	}
	for i := range 199 {
		ask(fmt.Sprintf("W%03d", i))
	}
	// 200 wait before it asks again: 200 × 120ms.
	if r := ask("FIRST"); r.Wait != 24000 {
		t.Errorf("the first waiter's lease in a line of 200: got %dms, want 24000ms", r.Wait)
	}
	if r := ask("NEW"); r.Wait != 24000 || r.Position != 201 {
		t.Errorf("a newcomer's lease behind 200: got %dms at %d, want 24000ms at 201", r.Wait, r.Position)
	}
	if z, err := raw.ZScore(context.Background(), k.Leases, protocol.Member("NEW")).Result(); err != nil || int64(z)-serverMicros(t, raw)/1000 < 23000 {
		t.Errorf("the newcomer's lease in the leases set: got (%v, %v), want ~24s from now", z, err)
	}
}

// TestRedisCrowdOfDeadWaitersCostsSeconds: half of a line of 200, killed
// at once (their connections gone, their places left behind), delays the
// rest by seconds in all, not a claim each: the first turn not taken
// calls the roll, and the dead leave the line together. Whether the dead
// alternate with the living or stand together at the head.
func TestRedisCrowdOfDeadWaitersCostsSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		dead func(i, line int) bool
	}{
		{"every other one", func(i, _ int) bool { return i%2 == 1 }},
		{"the first half", func(i, line int) bool { return i < line/2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crowdStall(t, tc.dead)
		})
	}
}

// crowdStall makes a line of 200 behind 5 holders, kills the waiters dead
// says, frees the permits, and checks how long the living took in all.
func crowdStall(t *testing.T, dead func(i, line int) bool) {
	srv, st, _ := setup(t, Options{})
	const n, line = 5, 200
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: n, TTL: 30 * time.Second}
	var holders []semaphore.Lease
	for range n {
		holders = append(holders, acquire(t, st, req))
	}
	var live []<-chan semaphoretest.Acquired
	var kills []func()
	for i := range line {
		w := newStore(t, srv.URL(), Options{})
		ch, stop := startAcquire(t, w, req, time.Minute)
		waitersOf(t, st, key, i+1)
		if dead(i, line) {
			kills = append(kills, func() { _ = w.Close(); stop() })
		} else {
			live = append(live, ch)
		}
	}
	for _, kill := range kills {
		kill()
	}
	start := time.Now()
	for _, h := range holders {
		release(t, h)
	}
	for i, ch := range live {
		r := receive(t, ch, 50*time.Second, fmt.Sprintf("live waiter %d of %d", i+1, len(live)))
		if r.Err != nil {
			t.Fatalf("live waiter %d: got %v, want a permit", i+1, r.Err)
		}
		release(t, r.L)
	}
	took := time.Since(start)
	t.Logf("%d live waiters served in %v behind %d dead", len(live), took.Round(time.Millisecond), len(kills))
	if took > 10*time.Second {
		t.Errorf("the crowd of %d dead waiters held the line up %v, want at most 10s in all", len(kills), took.Round(time.Millisecond))
	}
}

// TestRedisWaiterAgainRidesOutAnOutage: a caller that waits on a key
// again, in the process whose waiter's asks were answered (a run whose
// permit aged before its command started), rides out an outage until its
// context ends, as the first wait did; a key never asked of fails at the
// connect timeout.
func TestRedisWaiterAgainRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	srv, st, _ := setup(t, Options{ConnectTimeout: 300 * time.Millisecond})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}
	release(t, acquire(t, st, req))
	if err := srv.Pause(); err != nil {
		t.Fatalf("pause redis-server: %v", err)
	}
	defer func() { _ = srv.Resume() }()
	_, err := st.Acquire(ctxTimeout(t, 2*time.Second), req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire again on %q while Redis stalls: got %v, want its context's deadline (the outage ridden out)", key, err)
	}
	other := req
	other.Key = uniqueKey(t)
	if _, err := st.Acquire(ctxTimeout(t, 2*time.Second), other); !errors.Is(err, semaphore.ErrUnreachable) {
		t.Errorf("Acquire on a key never asked of while Redis stalls: got %v, want ErrUnreachable", err)
	}
}
