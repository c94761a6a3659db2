package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// TestPartitionMajority: a master with three replicas, a holder X of an
// N=1 key on it, and a partition that leaves the master with one replica
// while the other two elect a new master, where a caller Y asks for the
// same key, until the partition heals (the old master and its replica
// follow the new one, as Sentinel would have them).
//
// With --min-replicas 1, no majority of 3 (doctor and -v warn of it), both
// sides' WAITs are answered: X's renewals go on counting on the old side
// while Y is granted on the new one, and two holders of the N=1 key run at
// once. That is the documented hazard, shown here, not a bug.
//
// With --min-replicas 2, never two holders at once: from the partition on,
// X's renewals stop counting (the old master has one replica to answer),
// so X is presumed lost a TTL after the last renewal two replicas had;
// and the new side cannot grant either, its master having one replica
// left, so Y's grant counts only after the heal. The new master, the
// fresher of the two (as Sentinel picks), has the renewal that counted
// last, since two of three replicas had it, and its failover fence holds
// grants back for a TTL besides.
func TestPartitionMajority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		min     int
		overlap bool // two holders run at once
	}{
		{min: 1, overlap: true},
		{min: 2, overlap: false},
	} {
		t.Run(fmt.Sprintf("min-replicas=%d", tc.min), func(t *testing.T) {
			t.Parallel()
			p := partition(t, tc.min)
			x, y := p.x, p.y
			both := overlap(x, y)
			t.Logf("min replicas %d of 3: Y's ask during the partition: %v; X renewed %d times after the partition, %d while Y held; "+
				"partition from %v until %v; X held from 0 until %v, Y from %v until %v: two holders for %v",
				tc.min, cmpErr(p.partitionAsk), x.countedAfter(p.cut), x.countedAfter(y.from),
				p.cut.Sub(x.from).Round(time.Millisecond), p.healed.Sub(x.from).Round(time.Millisecond),
				x.until.Sub(x.from).Round(time.Millisecond), y.from.Sub(x.from).Round(time.Millisecond),
				y.until.Sub(x.from).Round(time.Millisecond), both.Round(time.Millisecond))
			if y.l.Token() <= x.l.Token() {
				t.Errorf("Y's token: got %d, want more than X's %d", y.l.Token(), x.l.Token())
			}
			if !tc.overlap {
				if both > 0 {
					t.Errorf("two holders of the N=1 key at once for %v: X held until %v, Y from %v (since X's grant)",
						both.Round(time.Millisecond), x.until.Sub(x.from).Round(time.Millisecond), y.from.Sub(x.from).Round(time.Millisecond))
				}
				if !y.from.After(p.healed) {
					t.Errorf("Y's grant counted %v before the heal, want after it", p.healed.Sub(y.from).Round(time.Millisecond))
				}
				if !errors.Is(p.partitionAsk, semaphore.ErrUnreachable) {
					t.Errorf("Y's ask on the new master during the partition: got %v, want %v (its grant never counts)", p.partitionAsk, semaphore.ErrUnreachable)
				}
				if n := x.countedAfter(p.cut); n > 0 {
					t.Errorf("X's renewals on the old master after the partition: got %d that counted, want 0", n)
				}
				if len(p.warnings) > 0 {
					t.Errorf("warnings: got %q, want none", p.warnings)
				}
				return
			}
			// The hazard: both sides grant, both go on renewing.
			if p.partitionAsk != nil {
				t.Errorf("Y's ask on the new master during the partition: got %v, want a permit", p.partitionAsk)
			}
			if n := x.countedAfter(y.from); n == 0 {
				t.Errorf("X's renewals on the old master while Y held: got none that counted, want some")
			}
			if both <= 0 {
				t.Errorf("two holders at once: got none, want X and Y together")
			}
			if want := "<min replicas> 1 is not more than half of the master's 3 replicas"; len(p.warnings) != 1 || !strings.Contains(p.warnings[0], want) {
				t.Errorf("warnings: got %q, want one saying %q", p.warnings, want)
			}
		})
	}
}

// partitioned is what partition saw.
type partitioned struct {
	x, y *holding
	// cut is when the partition began, healed when it healed.
	cut, healed clock.Instant
	// partitionAsk is what Y's ask during the partition returned.
	partitionAsk error
	// warnings are what X's store said, with --verbose.
	warnings []string
}

// partition runs the scenario of TestPartitionMajority with min replicas
// and returns once both holders have ended.
func partition(t *testing.T, minReplicas int) partitioned {
	const ttl = 2 * time.Second
	ctx := context.Background()
	master := redistest.New(t)
	mraw := rawClient(t, master.Addr)
	type node struct {
		srv  *redistest.Server
		raw  *redis.Client
		link *redistest.Proxy // its replication link to the old master
	}
	var nodes [3]node
	for i := range nodes {
		srv := redistest.New(t)
		// Each replica reaches the master through a proxy of its own, so
		// that the partition is the network's doing: nothing either side
		// sends arrives. (A replica that then drops its link closes it at
		// the master too, which a real partition hides until
		// repl-timeout; WAIT counts neither.)
		link, err := redistest.StartProxy(master.Addr, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(link.Close)
		nodes[i] = node{srv, rawClient(t, srv.Addr), link}
	}
	for _, c := range []*redis.Client{mraw, nodes[0].raw, nodes[1].raw, nodes[2].raw} {
		// A full sync at the heal starts at once, not 5s later.
		if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatalf("CONFIG SET: %v", err)
		}
	}
	for _, n := range nodes {
		replicaOf(t, n.raw, n.link.Addr)
	}
	onlineReplicas(t, mraw, 3)

	var warnings semaphoretest.Warnings
	key := uniqueKey(t)
	// As semrun asks: the restart fence is the TTL.
	req := semaphore.Request{Key: key, Permits: 1, TTL: ttl, RestartFence: ttl, MinReplicas: minReplicas}
	xs := newStore(t, master.URL(), Options{MinReplicas: minReplicas, Verbose: true, Warnf: warnings.Warnf})
	x := startHolding(t, acquire(t, xs, req), ttl)
	time.Sleep(ttl / 2) // X renews at least once with every replica

	// The partition: the old master keeps replica 0; replicas 1 and 2 are
	// cut from it, and the fresher of them is promoted (Sentinel's pick)
	// and the other follows it.
	p := partitioned{x: x, cut: clock.Now()}
	nodes[1].link.Blackhole()
	nodes[2].link.Blackhole()
	promoted, follower := nodes[1], nodes[2]
	if replOffset(t, follower.raw) > replOffset(t, promoted.raw) {
		promoted, follower = follower, promoted
	}
	if err := promoted.raw.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	replicaOf(t, follower.raw, promoted.srv.Addr)
	onlineReplicas(t, promoted.raw, 1)

	// Y asks the new master, waiting in line behind X's permit there.
	ys := newStore(t, promoted.srv.URL(), Options{MinReplicas: minReplicas})
	l, err := semaphoretest.AcquireWithin(t, ys, 4*ttl+5*time.Second, req)
	p.partitionAsk = err
	if err == nil {
		p.y = startHolding(t, l, ttl)
	}
	time.Sleep(ttl) // the partition lasts

	// The heal: the old master and its replica follow the new master.
	p.healed = clock.Now()
	replicaOf(t, mraw, promoted.srv.Addr)
	replicaOf(t, nodes[0].raw, promoted.srv.Addr)
	onlineReplicas(t, promoted.raw, 3)
	if p.y == nil {
		l, err := semaphoretest.AcquireWithin(t, ys, 4*ttl+5*time.Second, req)
		if err != nil {
			t.Fatalf("Y's ask on the new master after the heal: got %v, want a permit", err)
		}
		p.y = startHolding(t, l, ttl)
	}
	time.Sleep(ttl / 2)

	// X's renewals fail on the old master, now a replica: it ends by itself.
	select {
	case <-x.done:
	case <-time.After(2 * ttl):
		t.Fatalf("X still held %v after the heal: got renewals on a replica, want it presumed lost", 2*ttl)
	}
	p.y.end()
	p.warnings = warnings.Take()
	return p
}

// replicaOf makes c a replica of addr.
func replicaOf(t *testing.T, c *redis.Client, addr string) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	if err := c.Do(context.Background(), "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF %s: %v", addr, err)
	}
}

// onlineReplicas waits until the master c has n replicas online.
func onlineReplicas(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%d replicas online", n), func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master\r") && strings.Count(info, "state=online") == n
	})
}

// replOffset is how much of its master's stream the replica c has.
func replOffset(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication: %v", err)
	}
	n, err := strconv.ParseInt(parseInfo(info)["slave_repl_offset"], 10, 64)
	if err != nil {
		t.Fatalf("slave_repl_offset in %q: %v", info, err)
	}
	return n
}

// holding is a holder that renews its lease as semrun's runner does, every
// TTL/3 and sooner after a failure, until it is ended or presumed lost: a
// margin (TTL/10) before its lease's end with no renewal that counted.
type holding struct {
	l    semaphore.Lease
	from clock.Instant // when the grant counted: the command would start
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	counted []clock.Instant // when each renewal that counted was sent
	// until is set once done: when it was ended, or its lease's end when
	// presumed lost (later than semrun lets its command run).
	until clock.Instant
}

func startHolding(t *testing.T, l semaphore.Lease, ttl time.Duration) *holding {
	ctx, stop := context.WithCancel(context.Background())
	h := &holding{l: l, from: clock.Now(), stop: stop, done: make(chan struct{})}
	go h.run(ctx, ttl)
	t.Cleanup(h.end)
	return h
}

func (h *holding) run(ctx context.Context, ttl time.Duration) {
	defer close(h.done)
	next := ttl / 3
	for {
		lossAt := h.l.Deadline().Add(-ttl / 10)
		select {
		case <-ctx.Done():
			h.until = clock.Now()
			return
		case <-time.After(min(next, clock.Until(lossAt))):
		}
		if !clock.Now().Before(lossAt) {
			h.until = h.l.Deadline()
			return
		}
		sent := clock.Now()
		call, cancel := clock.WithDeadline(ctx, lossAt)
		err := h.l.Renew(call)
		cancel()
		switch {
		case err == nil:
			h.mu.Lock()
			h.counted = append(h.counted, sent)
			h.mu.Unlock()
			next = ttl / 3
		case errors.Is(err, semaphore.ErrLost):
			h.until = clock.Now()
			return
		default:
			next = max(ttl/12, 50*time.Millisecond)
		}
	}
}

// end stops the holder, if it still holds, and waits for it.
func (h *holding) end() {
	h.stop()
	<-h.done
}

// countedAfter is how many renewals that counted were sent after at.
func (h *holding) countedAfter(at clock.Instant) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.counted {
		if c.After(at) {
			n++
		}
	}
	return n
}

// overlap is how long a and b both held.
func overlap(a, b *holding) time.Duration {
	from, until := a.from, a.until
	if b.from.After(from) {
		from = b.from
	}
	if b.until.Before(until) {
		until = b.until
	}
	return max(until.Sub(from), 0)
}

// cmpErr shows err, or "granted" for none.
func cmpErr(err error) string {
	if err == nil {
		return "granted"
	}
	return err.Error()
}
