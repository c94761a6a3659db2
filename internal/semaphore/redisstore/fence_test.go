package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

var uptimeLine = regexp.MustCompile(`uptime_in_seconds:(\d+)`)

// uptime is how long the server says it has been up.
func uptime(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: got error %v, want the server's info", err)
	}
	m := uptimeLine.FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("INFO server: got %q, want uptime_in_seconds", info)
	}
	s, _ := strconv.Atoi(m[1])
	return time.Duration(s) * time.Second
}

// TestRedisRestartFence: a server that restarted empty grants nothing, to
// anyone, until it has been up for the fence, while the holder from before
// the restart finds its permit gone and never re-creates it.
func TestRedisRestartFence(t *testing.T) {
	t.Parallel()
	srv, store, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}
	old, err := store.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire before the restart, no fence: got error %v, want a permit", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	const fence = 2 * time.Second
	req.RestartFence = fence

	if left := fencedNoWait(t, store, req); left > fence {
		t.Errorf("Acquire --no-wait right after the restart: fenced for %v, want at most %v", left, fence)
	}
	if err := old.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
		t.Errorf("Renew of the permit from before the restart: got %v, want ErrLost", err)
	}

	var states []semaphore.WaitState
	req.OnWait = func(st semaphore.WaitState) { states = append(states, st) }
	l, err := store.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire waiting out the fence: got error %v, want a permit", err)
	}
	defer l.Release(ctx)
	if up := uptime(t, raw); up < fence {
		t.Errorf("server uptime once granted: got %v, want at least the fence, %v", up, fence)
	}
	if len(states) == 0 || states[0].Fenced <= 0 || states[0].Fenced > fence {
		t.Errorf("wait states: got %+v, want the first to say the fence holds, for at most %v", states, fence)
	}
	// The old holder's release, however late, frees nothing of the new one.
	if err := old.Release(ctx); err != nil {
		t.Errorf("Release of the permit from before the restart: got %v, want nil", err)
	}
	if st, err := store.Status(ctx, []string{key}); err != nil || len(st[0].Holders) != 1 || st[0].Holders[0].Token != l.Token() {
		t.Errorf("status after the old holder's release: got (%+v, %v), want the new holder only", st, err)
	}
}

// TestRedisRestartFenceHoldsHandOvers: while the fence holds, a waiter
// leaving does not hand permits to those behind it; the fence ends for all.
func TestRedisRestartFenceHoldsHandOvers(t *testing.T) {
	t.Parallel()
	_, store, raw := setup(t, Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	const fence = 3 * time.Second
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, RestartFence: fence}

	first, cancelFirst := startAcquire(t, store, req, 20*time.Second)
	waitersOf(t, store, key, 1)
	r := req
	r.RestartFence = time.Second // a shorter fence asked later does not shorten it
	second, _ := startAcquire(t, store, r, 20*time.Second)
	waitersOf(t, store, key, 2)
	cancelFirst() // leaves the line: a release, which must not hand over
	if got := receive(t, first, 10*time.Second, "the first waiter, cancelled"); got.Err == nil {
		t.Errorf("first waiter, cancelled: got a permit, want an error")
	}
	got := receive(t, second, 20*time.Second, "the second waiter")
	if got.Err != nil {
		t.Fatalf("second waiter: got error %v, want a permit", got.Err)
	}
	defer got.L.Release(ctx)
	if up := uptime(t, raw); up < fence {
		t.Errorf("server uptime once the second waiter got its permit: got %v, want at least %v", up, fence)
	}
}

// TestMiniredisHasNoRestartFence: a server that does not say its uptime
// (miniredis) is not fenced, as the scripts document.
func TestMiniredisHasNoRestartFence(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	store := newStore(t, "redis://"+m.Addr(), Options{})
	l, err := store.Acquire(context.Background(), semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: time.Minute, RestartFence: time.Hour, NoWait: true})
	if err != nil {
		t.Fatalf("Acquire with a fence from miniredis: got error %v, want a permit", err)
	}
	_ = l.Release(context.Background())
}

// replicaPair starts a master and a replica of it, waits until the
// replica is in sync and both have been up for at least up, and returns
// both servers with raw clients to them.
func replicaPair(t *testing.T, up time.Duration) (master *redistest.Server, raw *redis.Client, replica *redistest.Server, replicaRaw *redis.Client) {
	t.Helper()
	master = redistest.New(t)
	raw = rawClient(t, master.Addr)
	replica = redistest.New(t)
	replicaRaw = rawClient(t, replica.Addr)
	ctx := context.Background()
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := replicaRaw.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	waitFor(t, 20*time.Second, "the replica in sync", func() bool {
		info, err := raw.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication: %v", err)
		}
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	for _, c := range []*redis.Client{raw, replicaRaw} {
		waitFor(t, up+10*time.Second, fmt.Sprintf("both servers up for %v", up), func() bool { return uptime(t, c) >= up })
	}
	return master, raw, replica, replicaRaw
}

// TestRedisFailoverFenceHoldsReleases: on a promoted replica, a release
// that comes before any acquire hands nothing over during the fence.
func TestRedisFailoverFenceHoldsReleases(t *testing.T) {
	t.Parallel()
	const fence = 2 * time.Second
	_, raw, _, replicaRaw := replicaPair(t, fence)
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	acquire := func(c *redis.Client, id string, wlease time.Duration) protocol.AcquireReply {
		t.Helper()
		return runAcquireArgs(t, c, k, protocol.AcquireArgs{ID: id, Permits: 1, TTL: 30 * time.Second, Wait: wlease, Fence: fence})
	}
	if r := acquire(raw, "HOLDER", 0); !r.Granted {
		t.Fatalf("holder on the master: got %+v, want granted", r)
	}
	if r := acquire(raw, "WAITER", 10*time.Second); r.Granted || r.Position != 1 {
		t.Fatalf("waiter on the master: got %+v, want first in line", r)
	}
	if n, err := raw.Do(ctx, "WAIT", 1, 10000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: got (%d, %v), want 1", n, err)
	}
	if err := replicaRaw.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	runScript(t, replicaRaw, k, protocol.ReleaseArgs{ID: "HOLDER"})
	if _, err := replicaRaw.ZScore(ctx, k.Holders, "WAITER").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the waiter after the first release on the promoted replica: a holder (err %v), want still in line while the fence holds", err)
	}
	if r := acquire(replicaRaw, "WAITER", 10*time.Second); r.Granted || r.Fenced <= 0 {
		t.Errorf("the waiter asking on the promoted replica: got %+v, want not granted, fenced", r)
	}
}

// TestRedisFailoverFence: a replica promoted by a failover may lack the
// latest grants, so a key first served under a new replication id grants
// nothing for the fence, however long the server has been up.
func TestRedisFailoverFence(t *testing.T) {
	t.Parallel()
	const fence = 2 * time.Second
	master, _, replica, replicaRaw := replicaPair(t, fence)
	store := newStore(t, master.URL(), Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, RestartFence: fence}
	// The holder, from before the failover, keeps running.
	if _, err := store.Acquire(ctx, req); err != nil {
		t.Fatalf("Acquire on the master: got error %v, want a permit", err)
	}
	// WAIT counts its own connection's writes, not the store's: wait
	// until the replica has the key instead. (A key it never got is not
	// fenced: docs/how-it-works.md says so.)
	waitFor(t, 10*time.Second, "the replica has the key", func() bool {
		n, err := replicaRaw.HExists(ctx, protocol.NewKeys(testPrefix, key).Info, "#replid").Result()
		return err == nil && n
	})

	if err := replicaRaw.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	promoted := newStore(t, replica.URL(), Options{})
	// The promoted replica has the holder: the key is busy either way.
	// Once the holder's permit is gone (as if the failover lost it), the
	// fence still holds new grants back.
	if err := replicaRaw.Del(ctx, protocol.NewKeys(testPrefix, key).Holders).Err(); err != nil {
		t.Fatalf("DEL holders on the promoted replica: %v", err)
	}
	started := time.Now()
	fencedNoWait(t, promoted, req)
	l2, err := promoted.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire waiting out the failover fence: got error %v, want a permit", err)
	}
	defer l2.Release(ctx)
	if waited := time.Since(started); waited < fence-10*time.Millisecond {
		t.Errorf("permit on the promoted replica: granted %v after the failover, want not before the fence, %v", waited, fence)
	}
	// The next caller, under the same replication id, is not fenced again.
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	busy := req
	busy.NoWait = true
	var told []semaphore.WaitState
	busy.OnWait = func(st semaphore.WaitState) { told = append(told, st) }
	l3, err := promoted.Acquire(ctx, busy)
	if err != nil || len(told) != 0 {
		t.Errorf("Acquire --no-wait after the fence: got error %v, told %+v; want a permit at once", err, told)
	}
	if err == nil {
		_ = l3.Release(ctx)
	}
}

// TestRedisMinReplicas: with MinReplicas, Acquire returns only once the
// replicas have the grant, a renewal they do not get in time fails without
// counting, and a grant they never get is given back.
func TestRedisMinReplicas(t *testing.T) {
	t.Parallel()
	master, raw, replica, replicaRaw := replicaPair(t, 0)
	// Patient while the replica is up (a loaded machine can make it lag),
	// quick to give up once it is stopped.
	patient := newStore(t, master.URL(), Options{ConnectTimeout: 20 * time.Second})
	store := newStore(t, master.URL(), Options{ConnectTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinReplicas: 1}
	l, err := patient.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire with a replica online: got error %v, want a permit", err)
	}
	if n := zcard(t, replicaRaw, k.Holders); n != 1 {
		t.Errorf("holders on the replica once Acquire returned: got %d, want 1", n)
	}
	// A lagging replica: the runner retries too.
	waitFor(t, 20*time.Second, "Renew with a replica online", func() bool { return l.Renew(ctxTimeout(t, 5*time.Second)) == nil })

	if err := replica.Pause(); err != nil {
		t.Fatalf("pause the replica: %v", err)
	}
	defer replica.Resume()
	before := l.Deadline()
	if err := l.Renew(ctx); err == nil || errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Errorf("Renew with the replica stopped: got error %v, want a failure that is not ErrLost, naming the replicas", err)
	}
	if l.Deadline() != before {
		t.Errorf("Deadline after a renewal no replica had: moved, want unchanged")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := store.Acquire(ctx, req); !errors.Is(err, semaphore.ErrUnreachable) || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("Acquire with the replica stopped: got error %v, want ErrUnreachable naming the replicas", err)
	}
	if n := zcard(t, raw, k.Holders); n != 0 {
		t.Errorf("holders on the master after the grant no replica had: got %d, want 0 (given back)", n)
	}
}

// TestFenceBoundedByLease: a caller asking a 24h fence with a 2s lease
// fences its own grants, but the key remembers no more of it than its
// lease, and only while its lease may last: a caller without a fence is
// granted at once on a server up for longer than that.
func TestFenceBoundedByLease(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	time.Sleep(3 * time.Second) // up for longer than the 2s lease
	fencedNoWait(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 2 * time.Second, RestartFence: 24 * time.Hour})
	if got, err := raw.HGet(context.Background(), k.Info, "#fencelen").Int64(); err != nil || got > 2000 {
		t.Errorf("fence the key remembers: got (%d, %v), want at most the caller's 2s lease", got, err)
	}
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	release(t, l)
}

// fencedNoWait asks for req without waiting in line, with 300ms to spare:
// a restart fence longer than that holds the grant back, and is the busy
// *semaphore.FenceError at once, nothing waited. It returns what was left
// of the fence.
func fencedNoWait(t *testing.T, st *Store, req semaphore.Request) time.Duration {
	t.Helper()
	var states []semaphore.WaitState
	req.NoWait = true
	req.OnWait = func(st semaphore.WaitState) { states = append(states, st) }
	l, err := st.Acquire(ctxTimeout(t, 300*time.Millisecond), req)
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatalf("Acquire --no-wait of key %q: got a permit, want the restart fence to hold it back", req.Key)
	}
	var fenced *semaphore.FenceError
	if !errors.As(err, &fenced) || fenced.Left <= 300*time.Millisecond || len(states) != 0 {
		t.Fatalf("Acquire --no-wait of key %q for 300ms: got %v, told %+v; want the fence at once, nothing waited", req.Key, err, states)
	}
	return fenced.Left
}

// TestRedisNoWaitWaitsOutTheFence: a caller that will not wait in line
// waits out a restart fence, having said so, and is granted once it ends:
// until then nobody can tell whether the key is busy.
func TestRedisNoWaitWaitsOutTheFence(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	const fence = 2 * time.Second
	var states []semaphore.WaitState
	req := semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 10 * time.Second, RestartFence: fence, NoWait: true,
		OnWait: func(st semaphore.WaitState) { states = append(states, st) }}
	l, err := st.Acquire(ctxTimeout(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire --no-wait on a server up for less than the fence: got %v, want a permit once it ends", err)
	}
	release(t, l)
	if up := uptime(t, raw); up < fence {
		t.Errorf("server uptime once granted: got %v, want at least the fence, %v", up, fence)
	}
	if len(states) == 0 || len(states) > maxFenceWaits || states[0].Fenced <= 0 || states[0].Fenced > fence || states[0].Capacity != 1 {
		t.Errorf("wait states: got %+v, want the first to say the fence holds, for at most %v, and at most %d", states, fence, maxFenceWaits)
	}
	// Busy once the fence ended: no wait, ErrBusy.
	hold(t, st, semaphore.Request{Key: req.Key, Permits: 1, TTL: 10 * time.Second})
	states = nil
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req); !errors.Is(err, semaphore.ErrBusy) || errors.Is(err, semaphore.ErrFenced) || len(states) != 0 {
		t.Errorf("Acquire --no-wait of a busy key past the fence: got %v, told %+v; want ErrBusy at once", err, states)
	}
}
