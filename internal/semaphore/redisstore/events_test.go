package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

var eventsOf = semaphoretest.EventsOf

func kindsOf(events []semaphore.Event) []semaphore.EventKind {
	var out []semaphore.EventKind
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

// countsOf are key's counters as Status reports them, zero when none.
func countsOf(t *testing.T, st *Store, key string) semaphore.Counts {
	t.Helper()
	if c := statusOf(t, st, key).Counts; c != nil {
		return *c
	}
	return semaphore.Counts{}
}

// TestRedisLapsedLeaseIsLostOnce: a holder that stops renewing is lost
// when a sweep finds its lease lapsed, once, with how long it held; a
// later release of it, or its cooling's end, logs nothing more.
func TestRedisLapsedLeaseIsLostOnce(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{Host: "gone", PID: 3}}
	gone := acquire(t, st, req) // never renewed
	time.Sleep(1200 * time.Millisecond)
	// Waits for the lapse (pushed back by the silence, see rebase), and
	// sweeps it.
	l, err := semaphoretest.AcquireWithin(t, st, 10*time.Second, req)
	if err != nil {
		t.Fatalf("Acquire after the holder stopped renewing: got %v, want its permit", err)
	}
	release(t, l)
	if err := gone.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Release of the lapsed permit: got %v, want nil", err)
	}
	release(t, acquire(t, st, req))
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	want := []semaphore.EventKind{semaphore.EventGrant, semaphore.EventLost, semaphore.EventGrant, semaphore.EventRelease,
		semaphore.EventGrant, semaphore.EventRelease}
	if !slices.Equal(kindsOf(got), want) {
		t.Fatalf("events: got %+v, want %v", got, want)
	}
	if l := got[1]; l.Holder != got[0].Holder || l.Host != "gone" || l.Token != gone.Token() || l.Held < 900*time.Millisecond || l.Held > 2*time.Second {
		t.Errorf("loss: got %+v, want the first holder's, held about its 1s lease", l)
	}
	if c := countsOf(t, st, key); c.Losses != 1 || c.Grants != 3 || c.Held.Count() != 2 {
		t.Errorf("counts: got %+v, want 1 loss, 3 grants, 2 holds", c)
	}

	// A lapse before its min hold passed: lost, then cooling, whose end
	// is no second loss.
	cooled := uniqueKey(t)
	creq := semaphore.Request{Key: cooled, Permits: 1, TTL: time.Second, MinHold: 2 * time.Second}
	acquire(t, st, creq)
	time.Sleep(1200 * time.Millisecond)
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: cooled, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire while the lapsed permit cools: got %v, want ErrBusy", err)
	}
	waitFor(t, 5*time.Second, "the cooling's end", func() bool {
		l, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: cooled, Permits: 1, TTL: time.Second, NoWait: true})
		if err == nil {
			release(t, l)
		}
		return err == nil
	})
	got = eventsOf(t, st, semaphore.EventQuery{Keys: []string{cooled}})
	lost := slices.DeleteFunc(slices.Clone(got), func(e semaphore.Event) bool { return e.Kind != semaphore.EventLost })
	if len(lost) != 1 || countsOf(t, st, cooled).Losses != 1 {
		t.Errorf("events of a lapse that cooled: got %+v, want one loss, counted once", got)
	}
}

// TestRedisForcedRevokeEvents: a forced revoke frees the permit at once: it
// is the permit's last event, and its holder's release logs nothing more.
func TestRedisForcedRevokeEvents(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, Holder: semaphore.HolderInfo{Host: "h", Label: "job"}})
	id := statusOf(t, st, key).Holders[0].ID
	if err := st.Revoke(ctxTimeout(t, 5*time.Second), key, id, "hung", true); err != nil {
		t.Fatalf("Revoke(force): got %v, want nil", err)
	}
	release(t, l)
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRevoke}) {
		t.Fatalf("events: got %+v, want a grant and a revoke", got)
	}
	if r := got[1]; r.Holder != id || !r.Forced || r.Reason != "hung" || r.Label != "job" || r.Token != l.Token() {
		t.Errorf("revoke: got %+v, want holder %s (label job), forced, for hung", r, id)
	}
	if c := countsOf(t, st, key); c.Revokes != 1 || c.Grants != 1 || c.Held.Count() != 0 {
		t.Errorf("counts: got %+v, want 1 grant, 1 revoke, no hold", c)
	}
}

// TestRedisEventKeysRefusedStillGrant: a Redis user that may not use the
// log's and the counters' keys (the run's user of the docs before there
// were events, on an upgrade) still takes, renews and gives back permits
// and waits in line: what it cannot write is lost, as an event someone
// may not XADD is.
func TestRedisEventKeysRefusedStillGrant(t *testing.T) {
	t.Parallel()
	srv, _, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	// The run's user of docs/configuration.md before events.
	if err := raw.Do(ctx, "ACL", "SETUSER", "runner", "on", ">pw", "resetkeys", "~semrun:{*}:holders", "~semrun:{*}:info", "~semrun:{*}:token",
		"~semrun:{*}:queue", "~semrun:{*}:waiters", "~semrun:{*}:leases", "~semrun:{*}:wake:*", "~semrun:{*}:hold:*", "%R~semrun:{*}:policy",
		"resetchannels", "-@all", "+hello", "+evalsha", "+eval", "+blpop", "+wait", "+time", "+info", "+hget", "+hgetall", "+hset",
		"+hdel", "+hmget", "+zrange", "+zrem", "+zcard", "+zadd", "+zscore", "+zrangebyscore", "+zrank", "+del", "+exists", "+rpush",
		"+pexpire", "+pttl", "+get", "+set", "+scan", "+xadd").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	st := newStore(t, "redis://runner:pw@"+srv.Addr+"/0", Options{Prefix: "semrun:"})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 2 * time.Second}
	l, err := st.Acquire(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire as a user that may not write the log: got %v, want a permit", err)
	}
	waiter, _ := startAcquire(t, st, req, 10*time.Second)
	waitBlocked(t, raw, 1) // in line
	if err := l.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("Renew: got %v, want renewed", err)
	}
	if err := l.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("Release: got %v, want nil", err)
	}
	got := receive(t, waiter, 10*time.Second, "the waiter")
	if got.Err != nil {
		t.Fatalf("the waiter, handed the permit: got %v, want a permit", got.Err)
	}
	release(t, got.L)
	k := protocol.NewKeys("semrun:", key)
	if n := exists(t, raw, k.Events, k.Stats); n != 0 {
		t.Errorf("the log and counters of a user that may not write them: got %d keys, want none", n)
	}
}

// TestRedisNoEventsStillCounts: a store with NoEvents logs nothing, and
// still counts, and lists the key.
func TestRedisNoEventsStillCounts(t *testing.T) {
	t.Parallel()
	srv, st, raw := setup(t, Options{NoEvents: true})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	release(t, acquire(t, st, req))
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	req.NoWait = true
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire(NoWait) while held: got %v, want ErrBusy", err)
	}
	if err := st.Pause(ctxTimeout(t, 5*time.Second), key, "", 0); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if n := exists(t, raw, protocol.NewKeys(testPrefix, key).Events); n != 0 {
		t.Errorf("log of a key of a store with NoEvents: got %d keys, want none", n)
	}
	if c := countsOf(t, st, key); c.Grants != 2 || c.Busy != 1 || c.Held.Count() != 1 {
		t.Errorf("counts: got %+v, want 2 grants, 1 busy answer, 1 hold", c)
	}
	if got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}}); len(got) != 0 {
		t.Errorf("events: got %+v, want none", got)
	}
	// Another store's events are still read.
	other := newStore(t, srv.URL(), Options{})
	release(t, acquire(t, other, semaphore.Request{Key: key + "-2", Permits: 1, TTL: 10 * time.Second}))
	if got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key + "-2"}}); len(got) != 2 {
		t.Errorf("events logged by a store without NoEvents, read by one with: got %+v, want 2", got)
	}
	if keys, err := st.Keys(ctxTimeout(t, 5*time.Second)); err != nil || !slices.Equal(keys, []string{key, key + "-2"}) {
		t.Errorf("Keys: got (%q, %v), want both keys", keys, err)
	}
}

// TestRedisHostileLogIsSkipped: entries someone else wrote are skipped, or
// told bounded, and never keep a grant from being logged after them; a
// log that is no stream is skipped, and the other keys' events told.
func TestRedisHostileLogIsSkipped(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	key, broken := uniqueKey(t), uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	long := strings.Repeat("x", 100_000)
	for _, values := range []map[string]any{
		{"e": "explode"},
		{"nothing": "here"},
		{"e": "grant", "m": long, "why": long, "held": "-1", "t": "not a token"},
		{"e": "release", "m": `{"host":"` + long[:3000] + `","label":"` + long[:3000] + `"}`, "x": "300"},
	} {
		if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: k.Events, Values: values}).Err(); err != nil {
			t.Fatalf("XADD: %v", err)
		}
	}
	if err := raw.Set(ctx, protocol.NewKeys(testPrefix, broken).Events, "not a log", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	release(t, l)
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key, broken}})
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease, semaphore.EventGrant, semaphore.EventRelease}) {
		t.Fatalf("events: got %d %v, want the two hostile ones that are events, bounded, then the run's", len(got), kindsOf(got))
	}
	for _, e := range got[:2] {
		if len(e.Reason) > semaphore.MaxReason || e.Host != "" || e.Label != "" || e.Token != 0 || e.Held != 0 || e.ExitStatus != nil {
			t.Errorf("hostile event: got %.300v, want it bounded, its record too long to read", e)
		}
	}
	if got[2].Token != l.Token() {
		t.Errorf("the run's grant: got %+v, want token %d", got[2], l.Token())
	}
	// Followed, too: the broken log is skipped, the other's new events told.
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{Keys: []string{broken, key}})
	waitFor(t, 10*time.Second, "the history told", func() bool { return f.Count() == 4 })
	release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
	waitFor(t, 10*time.Second, "a new run told", func() bool { return f.Count() == 6 })
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
}

// TestRedisFollowerSurvivesRestart: a follower rides out a restart of the
// server that lost every key, and tells the events after it.
func TestRedisFollowerSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	release(t, acquire(t, st, req))
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{Keys: []string{key}})
	waitFor(t, 10*time.Second, "the history told", f.AtLeast(2))
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // the follower fails, and retries
	var l semaphore.Lease
	waitFor(t, 10*time.Second, "a grant after the restart", func() bool {
		var err error
		l, err = st.Acquire(ctxTimeout(t, 5*time.Second), req)
		return err == nil
	})
	release(t, l)
	waitFor(t, 15*time.Second, "the follower told of the run after the restart", f.AtLeast(4))
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
	if got := f.Told(); len(got) != 4 || got[2].Kind != semaphore.EventGrant || got[2].Token != l.Token() {
		t.Errorf("followed: got %+v, want the run before and the one after the restart", got)
	}
}

// TestRedisRejoinAfterALoss: after a failure, a log that went back is
// read from its start when it is gone, or from its last entry when it is
// behind the cursor (a failover lost its last entries).
func TestRedisRejoinAfterALoss(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	behind, gone := protocol.NewKeys(testPrefix, uniqueKey(t)), protocol.NewKeys(testPrefix, uniqueKey(t))
	id, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: behind.Events, ID: "1000-5", Values: []any{"e", "grant"}}).Result()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	far := protocol.StreamID{Ms: 1 << 50}
	cursors := []*logCursor{{keys: behind, last: far}, {keys: gone, last: far}}
	if err := st.rejoin(ctx, cursors); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if got := cursors[0].last.String(); got != id {
		t.Errorf("cursor of a log behind it: got %s, want its last entry %s", got, id)
	}
	if got := cursors[1].last; got != (protocol.StreamID{}) {
		t.Errorf("cursor of a log gone: got %v, want its start", got)
	}
}

// TestRedisFollowerSkipsALogItCannotFollow: an entry whose id no cursor
// holds (past MaxInt ms: someone else wrote it) ends the following of
// its log, which would otherwise hand it back to every XREAD at once, in
// a loop that never blocks; the other keys are still followed.
func TestRedisFollowerSkipsALogItCannotFollow(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	poisoned, clean := uniqueKey(t)+"-poisoned", uniqueKey(t)+"-clean"
	for _, key := range []string{poisoned, clean} {
		release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second}))
	}
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{Keys: []string{poisoned, clean}})
	waitFor(t, 10*time.Second, "the history told", f.AtLeast(4))
	bg := context.Background()
	if err := raw.XAdd(bg, &redis.XAddArgs{Stream: protocol.NewKeys(testPrefix, poisoned).Events, ID: "9007199254740993-0",
		Values: []any{"e", "grant"}}).Err(); err != nil {
		t.Fatalf("XADD: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // the follower reads it
	before := commandCalls(t, raw, "xread")
	time.Sleep(1500 * time.Millisecond)
	// Blocking a second a read, it makes a few; spinning, thousands.
	if n := commandCalls(t, raw, "xread") - before; n > 20 {
		t.Errorf("XREADs in 1.5s after an entry it cannot follow: got %d, want a few (reads that block)", n)
	}
	release(t, acquire(t, st, semaphore.Request{Key: clean, Permits: 1, TTL: 5 * time.Second}))
	waitFor(t, 10*time.Second, "the clean key's new run told", f.AtLeast(6))
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
	for _, e := range f.Told()[4:] {
		if e.Key != clean {
			t.Errorf("followed after the entry: got %+v, want the clean key's events only", e)
		}
	}
}

// TestRedisFollowerEndsWhileRedisIsStopped: a follower ends soon after its
// context does, even while Redis, stopped, answers nothing: while a read
// blocks, and once its retries (the index's size, where each log is)
// began. Its connections are its own, closed as its context ends.
func TestRedisFollowerEndsWhileRedisIsStopped(t *testing.T) {
	t.Parallel()
	for _, every := range []bool{false, true} {
		// Cancelled while a read blocks, or past a read's bound (a
		// second's block and the connect timeout), once it retries.
		for _, after := range []time.Duration{500 * time.Millisecond, followBlock + 2*time.Second} {
			t.Run(fmt.Sprintf("every key %v, cancelled after %v", every, after), func(t *testing.T) {
				t.Parallel()
				// The default connect timeout, which bounds each read.
				srv, st, _ := setup(t, Options{ConnectTimeout: DefaultConnectTimeout})
				key := uniqueKey(t)
				release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second}))
				q := semaphore.EventQuery{Keys: []string{key}, Follow: true}
				if every {
					q.Keys = nil
				}
				var told atomic.Int64
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- st.Events(ctx, q, func(semaphore.Event) error { told.Add(1); return nil })
				}()
				waitFor(t, 10*time.Second, "the history told", func() bool { return told.Load() == 2 })
				if err := srv.Pause(); errors.Is(err, errors.ErrUnsupported) {
					cancel()
					t.Skip("no SIGSTOP here")
				} else if err != nil {
					t.Fatalf("pause redis-server: %v", err)
				}
				defer func() { _ = srv.Resume() }()
				time.Sleep(after)
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Events following, once its context ended: got %v, want nil", err)
					}
				case <-time.After(2 * time.Second):
					t.Fatalf("Events: still following 2s after its context ended, while Redis is stopped")
				}
				// The store's own connections are not the follower's: it
				// still works once Redis does.
				if err := srv.Resume(); err != nil {
					t.Fatalf("resume redis-server: %v", err)
				}
				release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second}))
			})
		}
	}
}

// TestRedisKeysWithoutScan: Keys lists the keys used, from the index and
// never by SCAN, and prunes those whose log and counters are gone and
// members that are no key.
func TestRedisKeysWithoutScan(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := ctxTimeout(t, 10*time.Second)
	a, b := uniqueKey(t)+"-a", uniqueKey(t)+"-b"
	release(t, acquire(t, st, semaphore.Request{Key: a, Permits: 1, TTL: 10 * time.Second}))
	if err := st.SetCapacity(ctx, b, 2); err != nil {
		t.Fatalf("SetCapacity: %v", err)
	}
	index := protocol.Index(testPrefix)
	if ttl, err := raw.PTTL(ctx, index).Result(); err != nil || ttl <= 0 || ttl > protocol.EventLife {
		t.Errorf("PTTL of the index: got (%v, %v), want at most %v", ttl, err, protocol.EventLife)
	}
	if err := raw.SAdd(ctx, index, "", "bad\x1bkey", strings.Repeat("k", semaphore.MaxKeyLen+1), "never-used").Err(); err != nil {
		t.Fatalf("SADD: %v", err)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	keys, err := st.Keys(ctx)
	// Keys are sorted: by bytes, "k-100-b" before "k-99-a".
	want := []string{a, b}
	slices.Sort(want)
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("Keys: got (%q, %v), want %q", keys, err, want)
	}
	info, err := raw.Info(ctx, "commandstats").Result()
	if err != nil || strings.Contains(info, "cmdstat_scan:") || strings.Contains(info, "cmdstat_keys:") {
		t.Errorf("commands Keys sent: got (%s, %v), want no SCAN nor KEYS", info, err)
	}
	if n, err := raw.SCard(ctx, index).Result(); err != nil || n != 2 {
		t.Errorf("index after Keys: got (%d, %v) members, want the 2 keys, the rest pruned", n, err)
	}
	kb := protocol.NewKeys(testPrefix, b)
	if err := raw.Del(ctx, kb.Events, kb.Stats).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if keys, err := st.Keys(ctx); err != nil || !slices.Equal(keys, []string{a}) {
		t.Errorf("Keys once a key's past is gone: got (%q, %v), want [%q]", keys, err, a)
	}
	// An index that is no set makes way.
	if err := raw.Set(ctx, index, "x", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if keys, err := st.Keys(ctx); err != nil || len(keys) != 0 {
		t.Errorf("Keys of an index that is no set: got (%q, %v), want none", keys, err)
	}
	release(t, acquire(t, st, semaphore.Request{Key: a + "-new", Permits: 1, TTL: 10 * time.Second}))
	if keys, err := st.Keys(ctx); err != nil || !slices.Equal(keys, []string{a + "-new"}) {
		t.Errorf("Keys after a new key: got (%q, %v), want it", keys, err)
	}
}

// TestRedisClusterEvents: on a Redis Cluster, where the keys' logs live
// in different slots, the history of every key comes oldest first and a
// follower of several keys is told each new event.
func TestRedisClusterEvents(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	st, err := New(Options{URL: "redis://" + nodes[0].Addr + "/0", Prefix: testPrefix, Cluster: true, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("New with Cluster: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	keys := []string{uniqueKey(t) + "-a", uniqueKey(t) + "-b", uniqueKey(t) + "-c"}
	for _, key := range append(keys, keys[0]) {
		release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
		time.Sleep(5 * time.Millisecond)
	}
	got := eventsOf(t, st, semaphore.EventQuery{})
	var order []string
	for _, e := range got {
		order = append(order, e.Key)
	}
	if want := []string{keys[0], keys[0], keys[1], keys[1], keys[2], keys[2], keys[0], keys[0]}; !slices.Equal(order, want) {
		t.Fatalf("events of every key: got %q, want %q", order, want)
	}
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{Keys: keys})
	waitFor(t, 10*time.Second, "the history told", func() bool { return f.Count() == 8 })
	for _, key := range keys {
		release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}))
	}
	waitFor(t, 10*time.Second, "the new runs told", func() bool { return f.Count() == 14 })
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
}

// TestRedisHoldEndIsARelease: the end of a hold, which gives its permit
// back, is the permit's release, told with its keeper.
func TestRedisHoldEndIsARelease(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second})
	h, err := st.Hold(ctxTimeout(t, 5*time.Second), l, semaphore.HolderInfo{Host: "keeper", PID: 7})
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if _, _, err := st.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "done"}); err != nil {
		t.Fatalf("EndHold: %v", err)
	}
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease}) {
		t.Fatalf("events: got %+v, want a grant and a release", got)
	}
	if r := got[1]; r.Host != "keeper" || !r.Hold || r.Token != l.Token() || r.ExitStatus != nil {
		t.Errorf("release of a hold: got %+v, want its keeper's, token %d, no exit status", r, l.Token())
	}
	if c := countsOf(t, st, key); c.Held.Count() != 1 {
		t.Errorf("counts: got %+v, want the hold counted", c)
	}
}

// TestRedisFollowEveryKeyFindsNewKeys: a follower of every key is told of
// the events of a key first used after it began.
func TestRedisFollowEveryKeyFindsNewKeys(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	old, fresh := uniqueKey(t)+"-old", uniqueKey(t)+"-new"
	release(t, acquire(t, st, semaphore.Request{Key: old, Permits: 1, TTL: 5 * time.Second}))
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{})
	waitFor(t, 10*time.Second, "the history told", func() bool { return f.Count() == 2 })
	release(t, acquire(t, st, semaphore.Request{Key: fresh, Permits: 1, TTL: 5 * time.Second}))
	waitFor(t, 10*time.Second, "the new key's events told", func() bool { return f.Count() == 4 })
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
	if got := f.Told(); got[2].Key != fresh || got[3].Key != fresh {
		t.Errorf("followed: got %+v, want the new key's grant and release", got)
	}
}

// TestRedisCoolingIsReleasedOnce: a permit given back before its min hold
// passed is released once, with its cooling: giving it back again, or
// its cooling's end, logs nothing more.
func TestRedisCoolingIsReleasedOnce(t *testing.T) {
	t.Parallel()
	_, st, _ := setup(t, Options{})
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second, MinHold: time.Second}
	l := acquire(t, st, req)
	for range 2 {
		if err := l.Finish(ctxTimeout(t, 5*time.Second), 4); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	req.MinHold = 0
	waitFor(t, 5*time.Second, "the cooling's end", func() bool {
		l, err := semaphoretest.AcquireWithin(t, st, 5*time.Second, req)
		if err == nil {
			release(t, l)
		}
		return err == nil
	})
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease, semaphore.EventGrant, semaphore.EventRelease}) {
		t.Fatalf("events: got %+v, want each permit granted and released once", got)
	}
	if r := got[1]; r.ExitStatus == nil || *r.ExitStatus != 4 || r.Cooling < 500*time.Millisecond || r.Cooling > time.Second {
		t.Errorf("release into a cooling: got %+v, want exit 4, cooling about 1s", r)
	}
}
