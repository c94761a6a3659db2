package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// TestRedisSentinelFailover: through three sentinels, a holder whose grant
// a replica had keeps its permit when the master is killed and the
// replica promoted, and a waiter gets the permit from the new
// master only once that holder releases it.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	master, _, _, replicaRaw := replicaPair(t, 0)
	var sentinels []*redistest.Server
	for range 3 {
		sentinels = append(sentinels, redistest.NewSentinel(t, "semrun", master.Addr, 2))
	}
	url := "redis://" + sentinels[0].Addr + "/0?addr=" + sentinels[1].Addr + "&addr=" + sentinels[2].Addr
	store, err := New(Options{URL: url, Prefix: testPrefix, SentinelMaster: "semrun", ConnectTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("NewRedis with SentinelMaster: got error %v, want a store", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()
	key := uniqueKey(t)
	const ttl = 30 * time.Second
	h, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire through the sentinels: got error %v, want a permit", err)
	}
	// (--min-replicas would make every renewal wait for a replica too,
	// which the promoted one no longer has.)
	waitFor(t, 10*time.Second, "the replica has the grant", func() bool {
		return zcard(t, replicaRaw, protocol.NewKeys(testPrefix, key).Holders) > 0
	})

	master.Kill()
	got, _ := startAcquire(t, store, semaphore.Request{Key: key, Permits: 1, TTL: ttl}, 60*time.Second)
	// The holder renews on the promoted replica, which had its grant.
	waitFor(t, 30*time.Second, "the holder's renewal on the new master", func() bool {
		err := h.Renew(ctxTimeout(t, 30*time.Second))
		if errors.Is(err, semaphore.ErrLost) {
			t.Fatalf("holder's renewal after the failover: got %v, want it to succeed on the new master", err)
		}
		return err == nil
	})
	select {
	case r := <-got:
		t.Fatalf("waiter: got (%v, %v) while the holder from before the failover still held the permit", r.L, r.Err)
	default:
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("holder's release on the new master: %v", err)
	}
	if r := receive(t, got, 40*time.Second, "the waiter through the failover"); r.Err != nil {
		t.Errorf("waiter through the failover: got error %v, want a permit", r.Err)
	} else if l := r.L; l != nil {
		if l.Token() <= h.Token() {
			t.Errorf("waiter's token: got %d, want more than the holder's %d", l.Token(), h.Token())
		}
		_ = l.Release(ctx)
	}
}
