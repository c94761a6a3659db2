package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	hostclock "github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// These tests run the store against a real redis-server (see redistest).
// Each test starts its own server, so they run in parallel and may FLUSHALL.

// setup starts a redis-server and returns it with a store and a raw client.
func setup(t *testing.T, o Options) (*redistest.Server, *Store, *redis.Client) {
	t.Helper()
	srv := redistest.New(t)
	return srv, newStore(t, srv.URL(), o), rawClient(t, srv.Addr)
}

// members returns the permit ids held for k with their expiry (server ms).
func members(t *testing.T, c *redis.Client, k protocol.Keys) []redis.Z {
	t.Helper()
	z, err := c.ZRangeWithScores(context.Background(), k.Holders, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: got error %v, want nil", k.Holders, err)
	}
	return z
}

func zcard(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("ZCARD %s: got error %v, want nil", key, err)
	}
	return n
}

func exists(t *testing.T, c *redis.Client, keys ...string) int64 {
	t.Helper()
	n, err := c.Exists(context.Background(), keys...).Result()
	if err != nil {
		t.Fatalf("EXISTS %v: got error %v, want nil", keys, err)
	}
	return n
}

// TestRedisTokensSurviveDataLoss: tokens are seeded from the server's clock,
// so they keep rising after the semaphore's keys are flushed or expire.
// (TestStoreFencingTokensIncrease checks the rise across grants.)
func TestRedisTokensSurviveDataLoss(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}

	var last int64
	grant := func(when string) semaphore.Lease {
		t.Helper()
		before := serverMicros(t, raw)
		l := acquire(t, st, req)
		if l.Token() <= last {
			t.Fatalf("token %s: got %d, want more than the previous %d", when, l.Token(), last)
		}
		if l.Token() < before {
			t.Fatalf("token %s: got %d, want at least the server clock %d µs (seeded from the clock)", when, l.Token(), before)
		}
		last = l.Token()
		return l
	}

	release(t, grant("first grant"))
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL: got error %v, want nil", err)
	}
	release(t, grant("after FLUSHALL"))

	// Let every key of the semaphore expire on its own.
	for _, key := range k.List() {
		if err := raw.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
			t.Fatalf("PEXPIRE %s: got error %v, want nil", key, err)
		}
	}
	waitFor(t, 2*time.Second, "all keys expired", func() bool {
		return exists(t, raw, k.List()...) == 0
	})
	grant("after the keys expired")
}

func TestRedisRenew(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	const ttl = 3 * time.Second

	t.Run("extends", func(t *testing.T) {
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		z0 := members(t, raw, k)
		if len(z0) != 1 {
			t.Fatalf("holders after a grant: got %d, want 1", len(z0))
		}
		d0 := l.Deadline()
		time.Sleep(20 * time.Millisecond) // let both clocks move on

		sent := hostclock.Now()
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("Renew: got error %v, want nil", err)
		}
		answered := hostclock.Now()
		z1 := members(t, raw, k)
		if len(z1) != 1 || z1[0].Member != z0[0].Member {
			t.Fatalf("holders after renew: got %v, want the same single permit %v", z1, z0)
		}
		if z1[0].Score <= z0[0].Score {
			t.Errorf("lease expiry after renew: got %v ms, want later than %v ms", z1[0].Score, z0[0].Score)
		}
		// Less 1ms: the server's expiry is its clock, rounded down to the millisecond, plus TTL.
		if d := l.Deadline(); !d.After(d0) || d.Before(sent.Add(ttl-time.Millisecond)) || d.After(answered.Add(ttl)) {
			t.Errorf("Deadline after renew: got %v, want after %v, within [sent+TTL-1ms %v, answered+TTL %v]",
				d, d0, sent.Add(ttl-time.Millisecond), answered.Add(ttl))
		}
		nowMs := serverMicros(t, raw) / 1000
		for _, key := range []string{k.Holders, k.Info, k.Token} {
			pttl, err := raw.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatalf("PTTL %s: got error %v, want nil", key, err)
			}
			if want := time.Duration(int64(z1[0].Score)-nowMs) * time.Millisecond; pttl < want {
				t.Errorf("PTTL %s after renew: got %v, want at least the lease's remaining %v", key, pttl, want)
			}
		}
	})

	lost := func(t *testing.T, l semaphore.Lease, k protocol.Keys, keys ...string) {
		t.Helper()
		if err := l.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
			t.Fatalf("Renew of a removed permit: got %v, want ErrLost", err)
		}
		if got := zcard(t, raw, k.Holders); got != 0 {
			t.Errorf("holders after a failed renew: got %d, want 0 (renew must not re-create the permit)", got)
		}
		if got := exists(t, raw, keys...); got != 0 {
			t.Errorf("keys %v existing after a failed renew: got %d, want 0", keys, got)
		}
	}

	t.Run("after FLUSHALL", func(t *testing.T) {
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		if err := raw.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: got error %v, want nil", err)
		}
		lost(t, l, k, k.Holders, k.Info, k.Token)
	})

	t.Run("after DEL", func(t *testing.T) {
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		if err := raw.Del(ctx, k.Holders).Err(); err != nil {
			t.Fatalf("DEL: got error %v, want nil", err)
		}
		lost(t, l, k, k.Holders)
	})

	t.Run("after release", func(t *testing.T) {
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		release(t, l)
		lost(t, l, k, k.Holders)
	})

	t.Run("store down is not lost", func(t *testing.T) {
		srv := redistest.New(t)
		st := newStore(t, srv.URL(), Options{})
		l := acquire(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: ttl})
		srv.Kill()
		err := l.Renew(ctxTimeout(t, 2*time.Second))
		if err == nil || errors.Is(err, semaphore.ErrLost) {
			t.Fatalf("Renew with the store down: got %v, want an error that is not ErrLost (in doubt)", err)
		}
	})
}

func TestRedisCrashedHolderFreesPermit(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	const ttl = time.Second

	t.Run("waiting acquire gets the permit", func(t *testing.T) {
		t.Parallel()
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		a := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		za := members(t, raw, k)
		if len(za) != 1 {
			t.Fatalf("holders after a grant: got %d, want 1", len(za))
		}
		var waits []semaphore.WaitState
		b, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{
			Key: key, Permits: 1, TTL: 10 * time.Second,
			OnWait: func(s semaphore.WaitState) { waits = append(waits, s) },
		})
		if err != nil {
			t.Fatalf("waiting Acquire behind a holder that stopped renewing: got %v, want a permit", err)
		}
		granted := hostclock.Now()
		if nowMs := serverMicros(t, raw) / 1000; float64(nowMs) < za[0].Score {
			t.Errorf("permit given at server time %d ms, want not before the lapsed lease's expiry %v ms", nowMs, za[0].Score)
		}
		if d := a.Deadline(); d.After(granted) {
			t.Errorf("old holder's Deadline: got %v, want not after the moment the permit was given away (%v)", d, granted)
		}
		if want := []semaphore.WaitState{{Held: 1, Capacity: 1, Position: 1, Waiting: 1}}; !slices.Equal(waits, want) {
			t.Errorf("OnWait calls: got %+v, want %+v", waits, want)
		}
		if b.Token() <= a.Token() {
			t.Errorf("token of the new holder: got %d, want more than %d", b.Token(), a.Token())
		}
		if err := a.Renew(ctxTimeout(t, 5*time.Second)); !errors.Is(err, semaphore.ErrLost) {
			t.Errorf("Renew of the lapsed lease: got %v, want ErrLost", err)
		}
		zb := members(t, raw, k)
		if len(zb) != 1 || zb[0].Member == za[0].Member {
			t.Errorf("holders: got %v, want only the new holder (not %v)", zb, za[0].Member)
		}
	})

	t.Run("no-wait acquire succeeds once the lease lapsed", func(t *testing.T) {
		t.Parallel()
		key := uniqueKey(t)
		acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		start := time.Now()
		req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}
		waitFor(t, 3*time.Second, "no-wait acquire after the holder's TTL", func() bool {
			_, err := st.Acquire(ctxTimeout(t, time.Second), req)
			if err != nil && !errors.Is(err, semaphore.ErrBusy) {
				t.Fatalf("no-wait acquire: got %v, want nil or ErrBusy", err)
			}
			return err == nil
		})
		if d := time.Since(start); d < ttl/2 {
			t.Errorf("permit freed after %v, want not before the lease (%v) ran out", d, ttl)
		}
	})
}

// tagOf returns the hash tag Redis Cluster would hash for key, and whether
// it has one.
func tagOf(key string) (string, bool) {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e], true
		}
	}
	return "", false
}

func TestRedisKeysShareOneSlotAndExpire(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)

	if err := semaphore.CheckKey(""); err == nil {
		t.Errorf(`CheckKey(""): got nil, want an error`)
	}
	userKeys := []string{"}x", "{a}", "a{b}c", "%7B", "%7D", "a}", "a", "{", "}", "{}", "}{", "a:b", "a}:holders", "x}:info", "ü{é}"}
	owner := map[string]string{} // Redis key -> user key
	tags := map[string]string{}  // hash tag -> user key
	for _, uk := range userKeys {
		acquire(t, st, semaphore.Request{Key: uk, Permits: 2, TTL: 5 * time.Second})
		var written []string
		for _, rk := range stateKeys(testPrefix, scanKeys(t, raw, testPrefix+"*")) {
			if _, ok := owner[rk]; !ok {
				written = append(written, rk)
				owner[rk] = uk
			}
		}
		if len(written) != 3 {
			t.Errorf("key %q: got new Redis keys %q, want 3 of its own (holders, info, token) shared with no other key", uk, written)
			continue
		}
		// A second holder with a longer lease: the keys must outlive it.
		before := len(stateKeys(testPrefix, scanKeys(t, raw, testPrefix+"*")))
		acquire(t, st, semaphore.Request{Key: uk, Permits: 2, TTL: 8 * time.Second})
		if again := len(stateKeys(testPrefix, scanKeys(t, raw, testPrefix+"*"))); again != before {
			t.Errorf("key %q: a second holder added keys: got %d keys, want %d", uk, again, before)
		}
		// A waiter, whose waiter lease (10s) is longer still, adds the line.
		waiter, stop := startAcquire(t, st, semaphore.Request{Key: uk, Permits: 2, TTL: 30 * time.Second}, 20*time.Second)
		waitFor(t, 5*time.Second, fmt.Sprintf("key %q: a waiter in Status", uk), func() bool { return len(statusOf(t, st, uk).Waiters) == 1 })
		for _, rk := range stateKeys(testPrefix, scanKeys(t, raw, testPrefix+"*")) {
			if _, ok := owner[rk]; !ok {
				written = append(written, rk)
				owner[rk] = uk
			}
		}
		if len(written) != 6 {
			t.Errorf("key %q: got Redis keys %q with a waiter, want 6 of its own (holders, info, token, queue, waiters, leases)", uk, written)
		}

		tag, ok := tagOf(written[0])
		if !ok {
			t.Errorf("key %q: Redis key %q has no hash tag, want one", uk, written[0])
		}
		if prev, dup := tags[tag]; dup {
			t.Errorf("keys %q and %q: got the same hash tag %q, want distinct semaphores", prev, uk, tag)
		}
		tags[tag] = uk
		slot := hashSlot(written[0])
		var longest float64
		for _, rk := range written {
			if got, _ := tagOf(rk); got != tag {
				t.Errorf("key %q: Redis key %q has hash tag %q, want %q like %q", uk, rk, got, tag, written[0])
			}
			if got := hashSlot(rk); got != slot {
				t.Errorf("key %q: Redis key %q is in slot %d, want %d like %q", uk, rk, got, slot, written[0])
			}
			if strings.HasSuffix(rk, ":holders") {
				z, err := raw.ZRangeWithScores(ctx, rk, -1, -1).Result()
				if err != nil || len(z) != 1 {
					t.Fatalf("ZRANGE %s -1 -1: got (%v, %v), want one holder", rk, z, err)
				}
				longest = max(longest, z[0].Score)
			}
			if strings.HasSuffix(rk, ":waiters") {
				recs, err := raw.HGetAll(ctx, rk).Result()
				if err != nil {
					t.Fatalf("HGETALL %s: got error %v, want nil", rk, err)
				}
				for field, rec := range recs {
					var expiry int64
					if _, err := fmt.Sscan(rec, &expiry); field != "#seq" && err == nil {
						longest = max(longest, float64(expiry))
					}
				}
			}
		}
		if longest == 0 {
			t.Errorf("key %q: got no holders key among %q, want one", uk, written)
			continue
		}
		remaining := time.Duration(int64(longest)-serverMicros(t, raw)/1000) * time.Millisecond
		if remaining < 9*time.Second {
			t.Errorf("key %q: longest lease has %v left, want the waiter's (about 10s)", uk, remaining)
		}
		for _, rk := range written {
			pttl, err := raw.PTTL(ctx, rk).Result()
			if err != nil {
				t.Fatalf("PTTL %s: got error %v, want nil", rk, err)
			}
			if pttl <= 0 || pttl < remaining {
				t.Errorf("key %q: PTTL of %q: got %v, want > 0 and at least the longest live lease's %v", uk, rk, pttl, remaining)
			}
		}
		stop()
		if r := receive(t, waiter, 5*time.Second, "waiter after it was stopped"); !errors.Is(r.Err, context.Canceled) {
			t.Errorf("key %q: waiter after it was stopped: got (%v, %v), want context.Canceled", uk, r.L, r.Err)
		}
	}
}

func TestRedisPrefixCannotBreakHashTag(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	// "{}" first in the prefix makes an empty hash tag, so Redis Cluster
	// hashes each whole key and a semaphore's keys land in different slots.
	const prefix = "{}semrun:"
	st := newStore(t, srv.URL(), Options{Prefix: prefix})
	acquire(t, st, semaphore.Request{Key: "k", Permits: 1, TTL: 5 * time.Second})
	startAcquire(t, st, semaphore.Request{Key: "k", Permits: 1, TTL: 5 * time.Second}, 20*time.Second)
	waitFor(t, 5*time.Second, "a waiter in Status", func() bool { return len(statusOf(t, st, "k").Waiters) == 1 })
	// The index of the keys (Keys) is every key's, in a slot of its own.
	written := slices.DeleteFunc(scanKeys(t, raw, "*"), func(k string) bool { return k == protocol.Index(prefix) })
	if len(written) != 8 {
		t.Fatalf("keys written by a holder and a waiter: got %q, want 8 (with the key's log and counters)", written)
	}
	slots := map[int]bool{}
	for _, rk := range written {
		slots[hashSlot(rk)] = true
	}
	if len(slots) != 1 {
		t.Errorf("prefix %q: got a semaphore's keys %q in %d different slots, want 1", prefix, written, len(slots))
	}
}

func TestRedisScriptFlush(t *testing.T) {
	t.Parallel()
	srv, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second}
	flush := func() {
		t.Helper()
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: got error %v, want nil", err)
		}
	}

	flush()
	a := acquire(t, st, req)
	flush()
	if err := a.Renew(ctx); err != nil {
		t.Fatalf("Renew after SCRIPT FLUSH: got %v, want nil", err)
	}
	flush()
	if status, err := st.Status(ctx, []string{key}); err != nil || status[0].Held != 1 {
		t.Fatalf("Status after SCRIPT FLUSH: got (%+v, %v), want one holder", status, err)
	}
	flush()
	if _, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("busy Acquire after SCRIPT FLUSH: got %v, want ErrBusy", err)
	}
	flush()
	release(t, a)
	if got := zcard(t, raw, k.Holders); got != 0 {
		t.Fatalf("holders after Release following SCRIPT FLUSH: got %d, want 0", got)
	}
	flush()
	b := acquire(t, st, req)
	if b.Token() <= a.Token() {
		t.Errorf("token after SCRIPT FLUSH: got %d, want more than %d", b.Token(), a.Token())
	}

	// A restarted server has forgotten both the scripts and the data.
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart redis-server: got error %v, want nil", err)
	}
	c := acquire(t, st, req)
	if c.Token() <= b.Token() {
		t.Errorf("token after a restart that lost the data: got %d, want more than %d", c.Token(), b.Token())
	}
	if err := b.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Errorf("Renew of a permit the restarted server lost: got %v, want ErrLost", err)
	}
}

// closedPort returns a loopback port nothing listens on: 1, as the
// scripts use. A port the system hands out and the test closes again may
// be handed to a redis-server another test starts meanwhile.
func closedPort(t *testing.T) int {
	t.Helper()
	if c, err := net.Dial("tcp", "127.0.0.1:1"); err == nil {
		c.Close()
		t.Fatal("something listens on 127.0.0.1:1, which the test needs closed")
	}
	return 1
}

func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	port := closedPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url := fmt.Sprintf("redis://user:s3cret@%s/0", addr)
	req := semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second}

	check := func(t *testing.T, what string, err error, took time.Duration) {
		t.Helper()
		if !errors.Is(err, semaphore.ErrUnreachable) {
			t.Errorf("%s: got %v, want ErrUnreachable", what, err)
		}
		if errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("%s: got %v, want no ErrBusy when the store is down", what, err)
		}
		if shown := "redis://user:xxxxx@" + addr + "/0"; err != nil && !strings.Contains(err.Error(), shown) {
			t.Errorf("%s: got message %q, want it to name the store as %s", what, err, shown)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: got message %q, want no password in it", what, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s: returned after %v, want within 5s", what, took)
		}
	}

	t.Run("connect timeout", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, url, Options{ConnectTimeout: 300 * time.Millisecond})
		if got := st.Addr(); !strings.Contains(got, addr) || strings.Contains(got, "s3cret") {
			t.Errorf("Addr(): got %q, want %s without the password", got, addr)
		}
		start := time.Now()
		l, err := st.Acquire(ctxTimeout(t, 10*time.Second), req)
		check(t, "Acquire", err, time.Since(start))
		if l != nil {
			t.Errorf("Acquire: got lease %v, want nil", l)
		}
		start = time.Now()
		_, err = st.Status(ctxTimeout(t, 10*time.Second), []string{req.Key})
		check(t, "Status", err, time.Since(start))
	})

	t.Run("caller deadline first", func(t *testing.T) {
		t.Parallel()
		st := newStore(t, url, Options{ConnectTimeout: 30 * time.Second})
		start := time.Now()
		_, err := st.Acquire(ctxTimeout(t, 300*time.Millisecond), req)
		check(t, "Acquire", err, time.Since(start))
	})
}

func TestRedisLibraryWritesNothingToStderr(t *testing.T) {
	if os.Getenv("SEMRUN_TEST_HELPER") == t.Name() {
		// In the child: fail to reach a store, then say how it went on stdout.
		st, err := New(withDefaults(Options{
			URL: fmt.Sprintf("redis://127.0.0.1:%d/0", closedPort(t)), ConnectTimeout: 300 * time.Millisecond,
		}))
		if err == nil {
			_, err = st.Acquire(context.Background(), semaphore.Request{Key: "k", Permits: 1, TTL: time.Second})
			_ = st.Close()
		}
		fmt.Printf("unreachable=%v\n", errors.Is(err, semaphore.ErrUnreachable))
		return
	}
	t.Parallel()
	ctx := ctxTimeout(t, 20*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SEMRUN_TEST_HELPER="+t.Name())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child test process: got %v (stdout %q, stderr %q), want success", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "unreachable=true") {
		t.Errorf("child stdout: got %q, want unreachable=true", stdout.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr while failing to reach the store: got %q, want nothing (libraries must not log on their own)", stderr.String())
	}
}

// TestRedisRefusesSettings: settings the store cannot work with are
// refused before anything connects, each as a *semaphore.SettingError that
// names the setting, in the words Names gives.
func TestRedisRefusesSettings(t *testing.T) {
	t.Parallel()
	const url = "redis://127.0.0.1:1/0"
	for _, tc := range []struct {
		o       Options
		setting semaphore.Setting
		msg     string
	}{
		{Options{URL: url, ConnectTimeout: time.Second}, PrefixSetting, "key prefix: must not be empty"},
		{Options{URL: "mysql://127.0.0.1/0"}, URLSetting, "Redis URL: unknown scheme (want redis://, rediss:// or unix://)"},
		{Options{URL: url, TLS: TLSOptions{CAFile: "ca.pem"}}, TLSCASetting, "TLS CA file: needs a rediss:// URL, not redis://127.0.0.1:1/0 (<Redis URL>)"},
		{Options{URL: "rediss://127.0.0.1:1/0", TLS: TLSOptions{CertFile: "c.pem"}}, TLSCertSetting, "TLS certificate c.pem: needs <TLS key>"},
		{Options{URL: "rediss://127.0.0.1:1/0", TLS: TLSOptions{KeyFile: "k.pem"}}, TLSKeySetting, "TLS key k.pem: needs <TLS certificate>"},
	} {
		o := tc.o
		if o.Prefix == "" && tc.setting != PrefixSetting {
			o.Prefix = testPrefix
		}
		o.Names = testNames{}
		st, err := New(o)
		var refused *semaphore.SettingError
		if !errors.As(err, &refused) || refused.Setting != tc.setting || err.Error() != tc.msg {
			t.Errorf("New(%+v): got (%v, %v), want a *semaphore.SettingError for %s saying %q", tc.o, st, err, tc.setting, tc.msg)
		}
	}
}

func TestRedisZeroConnectTimeout(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st, err := New(Options{URL: srv.URL(), Prefix: testPrefix})
	if err != nil {
		t.Fatalf("New: got error %v, want nil", err)
	}
	defer st.Close()
	l, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second, NoWait: true})
	if err != nil {
		t.Fatalf("Acquire on a healthy server with Options.ConnectTimeout left 0: got %v, want a permit", err)
	}
	release(t, l)
}

// TestRedisStatusHidesPermitIDs: a permit id lets whoever knows it renew or
// release the permit, so status never shows it, and Redis holds only its
// hash (protocol.Member). (TestStoreStatus checks what status shows.)
func TestRedisStatusHidesPermitIDs(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	a := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: semaphore.HolderInfo{Host: "h", PID: 1, Command: "c"}})
	b := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 20 * time.Second})
	ids := []string{a.(*lease).id, b.(*lease).id}

	status, err := st.Status(ctx, []string{key})
	if err != nil {
		t.Fatalf("Status: got error %v, want nil", err)
	}
	out, err := json.Marshal(status)
	if err != nil {
		t.Fatalf("json.Marshal(status): %v", err)
	}
	z := members(t, raw, k)
	if len(z) != 2 {
		t.Fatalf("holders in Redis: got %d, want 2", len(z))
	}
	for _, id := range ids {
		if len(id) != 26 {
			t.Errorf("permit id length: got %d (%q), want 26 (130 random bits)", len(id), id)
		}
		if !slices.ContainsFunc(z, func(m redis.Z) bool { return m.Member == protocol.Member(id) }) {
			t.Errorf("holders in Redis: got %v, want the member %s of permit id %q, not the id", z, protocol.Member(id), id)
		}
		if strings.Contains(string(out), id) || strings.Contains(string(out), protocol.Member(id)) {
			t.Errorf("Status JSON: got %s, want neither permit id %q nor its member in it", out, id)
		}
	}
}

func TestRedisHungStore(t *testing.T) {
	t.Parallel()

	t.Run("caller deadline bounds the wait", func(t *testing.T) {
		t.Parallel()
		srv, st, _ := setup(t, Options{ConnectTimeout: 30 * time.Second})
		acquire(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second}) // connected
		if err := srv.Pause(); err != nil {
			t.Fatalf("pause redis-server: %v", err)
		}
		start := time.Now()
		_, err := st.Acquire(ctxTimeout(t, 200*time.Millisecond), semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second})
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, semaphore.ErrUnreachable) {
			t.Errorf("Acquire on a hung store: got %v, want context.DeadlineExceeded or ErrUnreachable", err)
		}
		// The store gets up to a second to take back what may have been granted.
		if took > 3*time.Second {
			t.Errorf("Acquire on a hung store with a 200ms deadline: returned after %v, want within 3s", took)
		}
	})

	t.Run("renew in doubt", func(t *testing.T) {
		t.Parallel()
		srv, st, _ := setup(t, Options{ConnectTimeout: 30 * time.Second})
		l := acquire(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second})
		if err := srv.Pause(); err != nil {
			t.Fatalf("pause redis-server: %v", err)
		}
		err := l.Renew(ctxTimeout(t, 200*time.Millisecond))
		if err == nil || errors.Is(err, semaphore.ErrLost) {
			t.Errorf("Renew on a hung store: got %v, want an error that is not ErrLost", err)
		}
	})

	// If Redis stalls while an acquire is in flight and the caller gives
	// up, Redis may still grant that request once it answers again: a permit
	// nobody holds, until its lease lapses (the README's bound).
	t.Run("a ghost permit lapses with its lease", func(t *testing.T) {
		t.Parallel()
		srv, st, raw := setup(t, Options{ConnectTimeout: 300 * time.Millisecond})
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		acquire(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second}) // connected
		if err := srv.Pause(); err != nil {
			t.Fatalf("pause redis-server: %v", err)
		}
		const ttl = 2 * time.Second
		_, err := st.Acquire(ctxTimeout(t, 10*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		if !errors.Is(err, semaphore.ErrUnreachable) {
			t.Errorf("Acquire on a store hung past the connect timeout: got %v, want ErrUnreachable", err)
		}
		if err := srv.Resume(); err != nil {
			t.Fatalf("resume redis-server: %v", err)
		}
		resumed := time.Now()
		waitFor(t, ttl+5*time.Second, "the permit free again", func() bool {
			l, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
			if err == nil {
				release(t, l)
			}
			return err == nil
		})
		// The server ran the request as it resumed, so the ghost's lease
		// lapses a TTL later; a second for the server to catch up.
		if d := time.Since(resumed); d > ttl+time.Second {
			t.Errorf("permit free again %v after Redis resumed, want within the ghost's lease, %v", d, ttl)
		}
		if n := zcard(t, raw, k.Holders); n != 0 {
			t.Errorf("holders once the ghost's lease lapsed: got %d, want 0", n)
		}
	})

	// The same for a waiter: a place in line nobody holds, until its waiter
	// lease lapses: the ones behind it wait that long at most.
	t.Run("a ghost place in line lapses with its waiter lease", func(t *testing.T) {
		t.Parallel()
		srv, st, raw := setup(t, Options{ConnectTimeout: 300 * time.Millisecond})
		key := uniqueKey(t)
		k := protocol.NewKeys(testPrefix, key)
		const ttl = 2 * time.Second // a waiter lease of WaiterLease
		// The permit is taken by another process's store: this one has not
		// asked of the key (it would ride out the stall), but is connected.
		hold(t, newStore(t, srv.URL(), Options{}), semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
		acquire(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 5 * time.Second})
		if err := srv.Pause(); err != nil {
			t.Fatalf("pause redis-server: %v", err)
		}
		_, err := st.Acquire(ctxTimeout(t, 10*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl})
		if !errors.Is(err, semaphore.ErrUnreachable) {
			t.Errorf("waiting Acquire on a store hung past the connect timeout: got %v, want ErrUnreachable", err)
		}
		if err := srv.Resume(); err != nil {
			t.Fatalf("resume redis-server: %v", err)
		}
		resumed := time.Now()
		waitFor(t, ttl+5*time.Second, "the line empty again", func() bool {
			// A look sweeps lapsed waiters, as every caller's does.
			_, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
			return errors.Is(err, semaphore.ErrBusy) && zcard(t, raw, k.Queue) == 0
		})
		if d := time.Since(resumed); d > ttl+time.Second {
			t.Errorf("line empty again %v after Redis resumed, want within the ghost's waiter lease, %v", d, ttl)
		}
	})
}

// TestRedisStatusListsKeys: without keys, Status lists every semaphore
// under the prefix (by SCAN), sorted, with its escaped characters
// restored, and none under a prefix that the first would match as a glob.
func TestRedisStatusListsKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	ctx := context.Background()
	globby := newStore(t, srv.URL(), Options{Prefix: "t*[?]{" + uniqueKey(t) + ":"})
	other := newStore(t, srv.URL(), Options{Prefix: "tx[a]{" + uniqueKey(t) + ":"})
	req := func(key string) semaphore.Request {
		return semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}
	}
	held, err := globby.Acquire(ctx, req("b{c}%"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer release(t, held)
	for _, key := range []string{"a", "d"} {
		l, err := globby.Acquire(ctx, req(key))
		if err != nil {
			t.Fatalf("Acquire %s: %v", key, err)
		}
		release(t, l)
	}
	o, err := other.Acquire(ctx, req("elsewhere"))
	if err != nil {
		t.Fatalf("Acquire under the other prefix: %v", err)
	}
	defer release(t, o)

	st, err := globby.Status(ctx, nil)
	if err != nil {
		t.Fatalf("Status without keys: %v", err)
	}
	var names []string
	for _, s := range st {
		names = append(names, fmt.Sprintf("%s:%d", s.Key, s.Held))
	}
	if got, want := strings.Join(names, " "), "a:0 b{c}%:1 d:0"; got != want {
		t.Errorf("Status without keys: got %s, want %s", got, want)
	}
}
