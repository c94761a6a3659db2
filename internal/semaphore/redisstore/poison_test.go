package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// Records and counters planted with plain Redis commands, as a co-tenant,
// a bug or a partial write could leave them: none is fatal for its key,
// nor touches another.

// TestPoisonedWaiterRecordIsDropped: a waiter record that is not one, at
// the head of the line, is dropped as the line moves (named once with
// --verbose); status and the waiters behind it go on.
func TestPoisonedWaiterRecordIsDropped(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var said []string
	_, st, raw := setup(t, Options{Infof: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(f, a...))
	}})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	behind, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 20*time.Second)
	waitersOf(t, st, key, 1)
	// Ticket 0: ahead of everyone; a lease of a minute.
	if err := raw.ZAdd(ctx, k.Queue, redisZ(0, "POISON")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.ZAdd(ctx, k.Leases, redisZ(float64(time.Now().Add(time.Minute).UnixMilli()), "POISON")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.HSet(ctx, k.Waiters, "POISON", "not\x1b a record").Err(); err != nil {
		t.Fatal(err)
	}
	if s := statusOf(t, st, key); s.Error != "" || len(s.Holders) != 1 || len(s.Waiters) != 1 {
		t.Errorf("status with a poisoned waiter record: got %+v, want the holder and the one real waiter", s)
	}
	release(t, h)
	r := receive(t, behind, 5*time.Second, "the waiter behind a poisoned record")
	if r.Err != nil {
		t.Fatalf("the waiter behind a poisoned record: got %v, want a permit", r.Err)
	}
	release(t, r.L)
	// The release that dropped it says so: the holder's own.
	mu.Lock()
	defer mu.Unlock()
	if len(said) != 1 || !strings.Contains(said[0], "dropped a waiter record") || !strings.Contains(said[0], `not\x1b a record`) {
		t.Errorf("what --verbose said: got %q, want the dropped waiter record named once", said)
	}
	if n := zcard(t, raw, k.Queue); n != 0 {
		t.Errorf("line after the release: got %d, want the poisoned record gone", n)
	}
}

// TestPoisonedCountersStopOnlyTheirKey: a fencing token or a ticket
// counter that cannot be raised stops grants, or places in line, of its
// key only, with one line that names the key and the repair. Once
// repaired, tokens still rise.
func TestPoisonedCountersStopOnlyTheirKey(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	key, other := uniqueKey(t), uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, NoWait: true}
	if err := raw.Set(ctx, k.Token, "9223372036854775807", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Acquire(ctxTimeout(t, 5*time.Second), req)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("key %q", key)) || !strings.Contains(err.Error(), "DEL "+k.Token) || strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("acquire with a token at its limit: got %v, want one line naming the key and DEL %s", err, k.Token)
	}
	acquire(t, st, semaphore.Request{Key: other, Permits: 1, TTL: 30 * time.Second})
	if err := raw.Del(ctx, k.Token).Err(); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second})
	l2 := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second})
	if l2.Token() <= l.Token() {
		t.Errorf("tokens after the repair: got %d then %d, want rising", l.Token(), l2.Token())
	}

	if err := raw.HSet(ctx, k.Waiters, "#seq", "x").Err(); err != nil {
		t.Fatal(err)
	}
	req.Permits, req.NoWait = 2, false
	_, err = st.Acquire(ctxTimeout(t, 5*time.Second), req)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("key %q", key)) || !strings.Contains(err.Error(), "HDEL "+k.Waiters+" #seq") {
		t.Errorf("waiting with a ticket counter that is not one: got %v, want one line naming the key and the HDEL", err)
	}
}

// TestPoisonedClockPushesNoLeaseBeyondATTL: a last reading of the clock of
// 1 (57 years of silence) pushes a crashed holder's lease back at most
// one TTL from now, not 57 years.
func TestPoisonedClockPushesNoLeaseBeyondATTL(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	const ttl = 5 * time.Second
	acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl}) // never renewed: crashed
	if err := raw.HSet(ctx, k.Info, "#clock", 1).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
	if !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("a second caller: got %v, want busy", err)
	}
	scores, err := raw.ZRangeWithScores(ctx, k.Holders, 0, -1).Result()
	if err != nil || len(scores) != 1 {
		t.Fatalf("holders: got (%v, %v), want one", scores, err)
	}
	if limit := float64(time.Now().Add(ttl + time.Second).UnixMilli()); scores[0].Score > limit {
		t.Errorf("the crashed holder's lease: got %v ms, want at most a TTL from now (%v)", scores[0].Score, limit)
	}
}

// TestPoisonedKeyLeavesStatusOfOthers: a key under the prefix of another
// type (foreign, or broken) is named as unreadable; the other keys are
// listed as they are.
func TestPoisonedKeyLeavesStatusOfOthers(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("poison%d:", time.Now().UnixNano())
	_, st, raw := setup(t, Options{Prefix: prefix})
	hold(t, st, semaphore.Request{Key: "good", Permits: 1, TTL: 30 * time.Second})
	if err := raw.Set(context.Background(), protocol.NewKeys(prefix, "foreign").Holders, "a string", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := st.Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("status of every key: got (%+v, %v), want two keys", got, err)
	}
	if got[0].Key != "foreign" || !strings.Contains(got[0].Error, "WRONGTYPE") || got[1].Key != "good" || got[1].Error != "" || len(got[1].Holders) != 1 {
		t.Errorf("status of every key: got %+v, want foreign unreadable (WRONGTYPE) and good with its holder", got)
	}
}

// TestPoisonedUsedCountIsCountedAnew: a count of permits taken that is not
// one is counted anew from the holders: it neither lets more in than N
// nor keeps the permits taken.
func TestPoisonedUsedCountIsCountedAnew(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	// Counted right from the first grant: two of N=2 fit, a third does not.
	first := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second})
	second := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second})
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("a third caller of N=2: got %v, want busy", err)
	}
	release(t, first)
	release(t, second)
	hold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second, Weight: 2})
	if err := raw.HSet(context.Background(), k.Info, "#used", "-5").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 2, TTL: 30 * time.Second, NoWait: true})
	if !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("a caller of a key whose 2 permits are taken, its count poisoned: got %v, want busy", err)
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// TestPoisonedLeaseFarAheadCostsNoStorm: a holder's lease written to end
// centuries from now (anyone who can write the keys may) must not make a
// waiter ask again at once, over and over: the time until the earliest
// lease lapses is bounded before it becomes a wait.
func TestPoisonedLeaseFarAheadCostsNoStorm(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	defer release(t, l)
	holders, err := raw.ZRange(ctx, k.Holders, 0, -1).Result()
	if err != nil || len(holders) != 1 {
		t.Fatalf("holders: got (%v, %v), want one", holders, err)
	}
	centuries := float64(time.Now().UnixMilli()) + 1000*365*24*3600*1000 // past what a time.Duration holds
	if err := raw.ZAdd(ctx, k.Holders, redisZ(centuries, holders[0])).Err(); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, raw, "evalsha", "eval")
	_, err = st.Acquire(ctxTimeout(t, time.Second), semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter for a second: got %v, want its deadline", err)
	}
	if calls := commandCalls(t, raw, "evalsha", "eval") - before; calls > 20 {
		t.Errorf("a waiter for a second behind a lease centuries ahead: %d scripts run, want a few", calls)
	}
}
