package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// TestRedisCluster: on a 3-master Redis Cluster, reached through one seed
// node, keys in different slots each keep at most N holders under
// contention, waiters are handed their permits, and status reads them.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	seed := "redis://" + nodes[0].Addr + "/0?addr=" + nodes[1].Addr
	store, err := New(Options{URL: seed, Prefix: testPrefix, Cluster: true, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NewRedis with Cluster: got error %v, want a store", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()

	// Keys in different slots, so most likely on different nodes.
	keys := []string{uniqueKey(t) + "-a", uniqueKey(t) + "-b", uniqueKey(t) + "-c"}
	slots := map[int64]bool{}
	raw := rawClient(t, nodes[0].Addr)
	for _, key := range keys {
		slot, err := raw.ClusterKeySlot(ctx, protocol.NewKeys(testPrefix, key).Holders).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		slots[slot] = true
	}
	if len(slots) != len(keys) {
		t.Fatalf("slots of the keys: got %v, want %d different ones", slots, len(keys))
	}
	const n, workers, rounds = 2, 6, 4
	var wg sync.WaitGroup
	for _, key := range keys {
		var g gauge
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					l, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second,
						Holder: semaphore.HolderInfo{Command: fmt.Sprintf("w%d.%d", w, r)}})
					if err != nil {
						t.Errorf("Acquire %s: got error %v, want a permit", key, err)
						return
					}
					g.hold(5 * time.Millisecond)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release %s: got error %v, want nil", key, err)
					}
				}
			}()
		}
		t.Cleanup(func() {
			if m := g.most.Load(); m > n {
				t.Errorf("key %s: at most %d held at once, want at most %d", key, m, n)
			}
		})
	}
	wg.Wait()

	st, err := store.Status(ctx, keys)
	if err != nil || len(st) != len(keys) {
		t.Fatalf("Status: got (%+v, %v), want one per key", st, err)
	}
	for _, s := range st {
		if s.Held != 0 || len(s.Waiters) != 0 || s.Capacity != n {
			t.Errorf("status of %s after the run: got %+v, want nothing held, nobody waiting, capacity %d", s.Key, s, n)
		}
	}
	// Without keys, every master is scanned.
	all, err := store.Status(ctx, nil)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("Status without keys: got (%+v, %v), want the %d keys of all slots", all, err, len(keys))
	}
	// Listed by name, whatever numbers uniqueKey gave them.
	sorted := slices.Sorted(slices.Values(keys))
	for i, s := range all {
		if s.Key != sorted[i] {
			t.Errorf("Status without keys: key %d is %s, want %s", i, s.Key, sorted[i])
		}
	}
}

// TestRedisClusterRefusesUnixAndDatabases: a cluster is reached over
// TCP, and has only database 0.
func TestRedisClusterRefusesUnixAndDatabases(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"unix:///tmp/redis.sock":   "redis://",
		"redis://127.0.0.1:7000/3": "only database 0",
	} {
		if _, err := New(withDefaults(Options{URL: url, Cluster: true})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewRedis(%s) with Cluster: got error %v, want one saying %q", url, err, want)
		}
	}
}

// TestRedisClusterMinReplicas: in a cluster, a renewal waits for the
// replicas of the master that serves the key's slot, not of whichever
// node a keyless WAIT would reach.
func TestRedisClusterMinReplicas(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 1)
	store := newStore(t, "redis://"+nodes[0].Addr+"/0", Options{Cluster: true, ConnectTimeout: 20 * time.Second})
	ctx := context.Background()
	key := uniqueKey(t)
	raw := rawClient(t, nodes[0].Addr)
	slot, err := raw.ClusterKeySlot(ctx, protocol.NewKeys(testPrefix, key).Holders).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	ranges, err := raw.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	// CLUSTER SLOTS hides replicas that have no data yet: the master says
	// which its replica is.
	var replica *redistest.Server
	for _, r := range ranges {
		if int64(r.Start) > slot || slot > int64(r.End) {
			continue
		}
		info, err := rawClient(t, r.Nodes[0].Addr).Info(ctx, "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication of the slot's master: %v", err)
		}
		for _, n := range nodes {
			if strings.Contains(info, fmt.Sprintf("port=%s,", n.Addr[strings.LastIndex(n.Addr, ":")+1:])) {
				replica = n
			}
		}
	}
	if replica == nil {
		t.Fatalf("no replica found for slot %d in %+v", slot, ranges)
	}

	l, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinReplicas: 1})
	if err != nil {
		t.Fatalf("Acquire with MinReplicas in a cluster: got error %v, want a permit", err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatalf("pause the slot's replica: %v", err)
	}
	defer replica.Resume()
	// The other masters' replicas are up: a WAIT sent to them would pass.
	// Several tries, as a keyless command can land on any node.
	for range 5 {
		if err := l.Renew(ctx); err == nil || errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "0 of 1 replicas") {
			t.Fatalf("Renew with the slot's replica stopped: got error %v, want a failure that is not ErrLost, naming the replicas", err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestRedisClusterSlotMigration: moving a semaphore's slot to another
// node while holders and waiters use it (MOVED, ASK, TRYAGAIN on the
// way) never lets more than N hold, and everyone gets through.
func TestRedisClusterSlotMigration(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	store, err := New(Options{URL: "redis://" + nodes[0].Addr + "/0", Prefix: testPrefix, Cluster: true, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("NewRedis with Cluster: got error %v, want a store", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	m := newSlotMove(t, nodes, k.Holders)

	const n, workers, rounds = 2, 6, 8
	var g gauge
	var done atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second})
				if err != nil {
					t.Errorf("Acquire during the migration: got error %v, want a permit", err)
					return
				}
				g.hold(20 * time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release during the migration: got error %v, want nil", err)
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // holders and waiters at work
	m.start(t)
	host, port, _ := strings.Cut(m.to, ":")
	for {
		keys, err := m.src.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Result()
		if err != nil {
			t.Fatalf("CLUSTER GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, key := range keys {
			args = append(args, key)
		}
		must(t, m.src, args...)
	}
	for _, c := range []*redis.Client{m.dst, m.src} {
		must(t, c, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	}
	if d := done.Load(); d == workers*rounds {
		t.Errorf("every round ended before the slot had moved: the test exercised nothing")
	}
	wg.Wait()
	if keys, err := m.dst.ClusterCountKeysInSlot(ctx, int(m.slot)).Result(); err != nil || keys == 0 {
		t.Errorf("keys of the slot on the node it moved to: got (%d, %v), want some", keys, err)
	}
	if m := g.most.Load(); m > n {
		t.Errorf("at most %d held at once across the migration, want at most %d", m, n)
	}
	if st, err := store.Status(ctx, []string{key}); err != nil || st[0].Held != 0 {
		t.Errorf("status after the run: got (%+v, %v), want nothing held", st, err)
	}
}

// TestRedisClusterReleaseDuringMigration: while a semaphore's slot
// migrates, a release's script touches the holder's wake list, which the
// node does not have, and Redis fails the script ("non local key"),
// before it wrote anything. That heals once the migration ends: the
// release is retried until then, and the permit goes to the waiter.
func TestRedisClusterReleaseDuringMigration(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	store := newStore(t, "redis://"+nodes[0].Addr+"/0", Options{Cluster: true, ConnectTimeout: 10 * time.Second})
	ctx := context.Background()
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	m := newSlotMove(t, nodes, k.Holders)
	src, dst, slot := m.src, m.dst, m.slot

	l := acquire(t, store, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	// A waiter in line, and a policy, so that every key the script names
	// is on src: it runs there, instead of being redirected.
	if pos := enqueue(t, src, key, "waiter", 1, 30*time.Second); pos != 1 {
		t.Fatalf("a waiter behind the holder: got place %d, want 1", pos)
	}
	if err := src.HSet(ctx, k.Policy, "test", 1).Err(); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	// The migration is called off once the release's script failed on
	// src, on the wake list, as src's command statistics tell.
	failedScripts := func() int {
		info, err := src.Info(ctx, "commandstats").Result()
		if err != nil {
			return -1
		}
		n := 0
		for _, m := range regexp.MustCompile(`cmdstat_eval(?:sha)?:.*failed_calls=(\d+)`).FindAllStringSubmatch(info, -1) {
			f, _ := strconv.Atoi(m[1])
			n += f
		}
		return n
	}
	before := failedScripts()
	released := make(chan error, 1)
	releaseCtx := ctxTimeout(t, 10*time.Second)
	go func() { released <- l.Release(releaseCtx) }()
	waitFor(t, 10*time.Second, "the release's script failed on the migrating slot", func() bool { return failedScripts() > before })
	for _, c := range []*redis.Client{src, dst} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT STABLE: %v", err)
		}
	}
	if err := <-released; err != nil {
		t.Errorf("Release while the slot migrates: got error %v, want nil once the migration ends", err)
	}
	// Nothing was written before the failure, so the retry found the
	// holder and handed its permit to the waiter.
	if st, err := store.Status(ctx, []string{key}); err != nil || st[0].Held != 1 || len(st[0].Waiters) != 0 {
		t.Errorf("status after the release: got (%+v, %v), want the waiter holding the permit", st, err)
	}
}

// slotMove is a move of a key's slot in a cluster, from the master that
// serves it to another.
type slotMove struct {
	slot         int64
	from, to     string // addresses
	fromID, toID string // node ids
	src, dst     *redis.Client
}

// newSlotMove finds who serves key's slot, and picks another master.
func newSlotMove(t *testing.T, nodes []*redistest.Server, key string) slotMove {
	t.Helper()
	ctx := context.Background()
	raw := rawClient(t, nodes[0].Addr)
	slot, err := raw.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	ranges, err := raw.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	m := slotMove{slot: slot}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			m.from = r.Nodes[0].Addr
		}
	}
	for _, n := range nodes {
		if n.Addr != m.from {
			m.to = n.Addr
			break
		}
	}
	m.src, m.dst = rawClient(t, m.from), rawClient(t, m.to)
	for _, c := range []struct {
		c  *redis.Client
		id *string
	}{{m.src, &m.fromID}, {m.dst, &m.toID}} {
		if *c.id, err = c.c.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			t.Fatalf("CLUSTER MYID: %v", err)
		}
	}
	return m
}

// start marks the slot as moving: importing on dst, migrating on src.
func (m slotMove) start(t *testing.T) {
	t.Helper()
	must(t, m.dst, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.fromID)
	must(t, m.src, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID)
}

// must sends a command, failing t if it fails.
func must(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// gauge counts the holders of a key at any one time, and the most there
// ever were.
type gauge struct{ running, most atomic.Int32 }

// hold counts one more holder for d.
func (g *gauge) hold(d time.Duration) {
	now := g.running.Add(1)
	for m := g.most.Load(); now > m && !g.most.CompareAndSwap(m, now); m = g.most.Load() {
	}
	time.Sleep(d)
	g.running.Add(-1)
}
