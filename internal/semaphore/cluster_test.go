package semaphore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// TestRedisCluster: on a 3-master Redis Cluster, reached through one seed
// node, keys in different slots each keep at most N holders under
// contention, waiters are handed their permits, and status reads them.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3)
	seed := "redis://" + nodes[0].Addr + "/0?addr=" + nodes[1].Addr
	store, err := semaphore.NewRedis(semaphore.RedisOptions{URL: seed, Prefix: testPrefix, Cluster: true, ConnectTimeout: 5 * time.Second})
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
		slot, err := raw.ClusterKeySlot(ctx, keysOf(testPrefix, key).holders).Result()
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
		var running, most atomic.Int32
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
					now := running.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					running.Add(-1)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release %s: got error %v, want nil", key, err)
					}
				}
			}()
		}
		t.Cleanup(func() {
			if m := most.Load(); m > n {
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
}

// TestRedisClusterRefusesUnixAndReplicas: a cluster is reached over TCP,
// and waiting for replicas is refused there for now.
func TestRedisClusterRefusesUnixAndReplicas(t *testing.T) {
	t.Parallel()
	if _, err := semaphore.NewRedis(semaphore.RedisOptions{URL: "unix:///tmp/redis.sock", Cluster: true}); err == nil || !strings.Contains(err.Error(), "redis://") {
		t.Errorf("NewRedis with Cluster and unix://: got error %v, want one naming redis://", err)
	}
}
