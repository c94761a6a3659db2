//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
)

// replicaSet is the partition nemesis's Redis: a master and three
// replicas, each replicating it through a proxy of its own, so that a
// partition is the network's doing. semrun reaches the master through one
// of two endpoints, one per side of a partition, which a failover moves
// to the new master as a service address (a virtual IP, a DNS name) would
// be moved, resetting their connections.
type replicaSet struct {
	t      *testing.T
	seed   uint64
	master *redistest.Server
	// replicas are the three others; links[i] is replicas[i]'s link.
	replicas  [3]*redistest.Server
	links     [3]*redistest.Proxy
	endpoints [2]*redistest.Proxy
	n         uint64 // proxies started, for their seeds
}

// startReplicas gives master three replicas, online.
func startReplicas(t *testing.T, master *redistest.Server, seed uint64) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, seed: seed, master: master}
	for i := range rs.replicas {
		rs.replicas[i] = redistest.New(t)
	}
	for _, s := range append([]*redistest.Server{master}, rs.replicas[:]...) {
		// A full sync at a heal starts at once, not 5s later.
		if err := rs.do(s, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range rs.replicas {
		if err := rs.follow(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs.online(master, 3); err != nil {
		t.Fatal(err)
	}
	for i := range rs.endpoints {
		p, err := rs.proxy()
		if err != nil {
			t.Fatal(err)
		}
		rs.endpoints[i] = p
	}
	return rs
}

// proxy starts a proxy to the master, stopped when the test ends.
func (rs *replicaSet) proxy() (*redistest.Proxy, error) {
	rs.n++
	p, err := redistest.StartProxy(rs.master.Addr, rs.seed+rs.n)
	if err != nil {
		return nil, err
	}
	rs.t.Cleanup(p.Close)
	return p, nil
}

// move points endpoint i at s, and resets its connections.
func (rs *replicaSet) move(i int, s *redistest.Server) {
	rs.endpoints[i].Retarget(s.Addr)
	rs.endpoints[i].Cut()
}

// do runs one command on s, directly.
func (rs *replicaSet) do(s *redistest.Server, args ...any) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%s on %s: %w", fmt.Sprint(args...), s.Addr, err)
	}
	return nil
}

// follow makes replica i replicate the master through a new link.
func (rs *replicaSet) follow(i int) error {
	p, err := rs.proxy()
	if err != nil {
		return err
	}
	if old := rs.links[i]; old != nil {
		old.Close()
	}
	rs.links[i] = p
	host, port, _ := strings.Cut(p.Addr, ":")
	return rs.do(rs.replicas[i], "REPLICAOF", host, port)
}

// online waits until master has n replicas online, for at most 20s.
func (rs *replicaSet) online(master *redistest.Server, n int) error {
	c := redis.NewClient(&redis.Options{Addr: master.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "role:master\r") && strings.Count(info, "state=online") == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not a master with %d replicas online within 20s: %q", master.Addr, n, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// offset is how much of its master's stream replica s has.
func (rs *replicaSet) offset(s *redistest.Server) int64 {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, _ := c.Info(ctx, "replication").Result()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "slave_repl_offset:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// partition cuts the master from two of its three replicas for 0.5 to 3
// TTLs: the fresher of the two is promoted, as Sentinel would, and the
// other follows it, while the old master keeps the third. Odd workers ask
// the new master meanwhile (their endpoint moved), even ones the old.
// With --min-replicas 2 neither side can grant (each master has one
// replica), and the old side's holders are presumed lost. At the heal,
// the old master and the other two follow the new master, each through a
// new link, and both endpoints lead to it.
func partition(c *cluster, rng *rand.Rand) fault {
	rs := c.repl
	kept := rng.IntN(3)
	a, b := (kept+1)%3, (kept+2)%3
	d := faultTime(rng)
	f := fault{what: fmt.Sprintf("partition %v, replica %d kept", d.Round(time.Millisecond), kept), start: mono()}
	rs.links[a].Blackhole()
	rs.links[b].Blackhole()
	if rs.offset(rs.replicas[b]) > rs.offset(rs.replicas[a]) {
		a, b = b, a
	}
	promoted, follower := rs.replicas[a], rs.replicas[b]
	host, port, _ := strings.Cut(promoted.Addr, ":")
	for _, err := range []error{
		rs.do(promoted, "REPLICAOF", "NO", "ONE"),
		rs.do(follower, "REPLICAOF", host, port),
	} {
		if err != nil {
			c.t.Errorf("partition: %v", err)
		}
	}
	rs.move(1, promoted)
	time.Sleep(d)

	// The heal: the promoted replica is the master, the old one a replica.
	old := rs.master
	rs.master, rs.replicas[a] = promoted, old
	c.mu.Lock()
	c.srv = promoted
	c.mu.Unlock()
	rs.move(0, promoted)
	for i := range rs.replicas {
		if err := rs.follow(i); err != nil {
			c.t.Errorf("heal: %v", err)
		}
	}
	if err := rs.online(promoted, 3); err != nil {
		c.t.Errorf("heal: %v", err)
	}
	f.heal = mono()
	return f
}
