//go:build unix

package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// withReplicas starts a master and n replicas of it, all online.
func withReplicas(t *testing.T, n int) *redistest.Server {
	t.Helper()
	master := redistest.New(t)
	ctx := context.Background()
	host, port, _ := strings.Cut(master.Addr, ":")
	for range n {
		if err := rawClient(t, redistest.New(t).Addr).Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			t.Fatalf("REPLICAOF: %v", err)
		}
	}
	raw := rawClient(t, master.Addr)
	waitFor(t, 20*time.Second, fmt.Sprintf("%d replicas online", n), func() bool {
		info, err := raw.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r", n)) &&
			strings.Count(info, "state=online") == n
	})
	return master
}

// TestMinReplicasMajority: with three replicas, --min-replicas 1 lets a
// partition that leaves the old master one replica grant on both sides,
// so doctor warns of it and names 2; 2 of 3 is a majority, and passes.
// More than the master has fails: no grant could count.
func TestMinReplicasMajority(t *testing.T) {
	t.Parallel()
	master := withReplicas(t, 3)
	for _, tc := range []struct {
		min      int
		want     semaphore.CheckStatus
		detail   string
		fix      string
		lacksFix bool
	}{
		{0, semaphore.CheckOK, "master with 3 replicas: a failover can lose the grants they had not received yet; <min replicas> 2, more than half of them", "", true},
		{1, semaphore.CheckWarn, "master with 3 replicas; <min replicas> 1 is not more than half of the master's 3 replicas: a partition can leave the old master and a promoted replica with 1 each, and both grant the same permit", "<min replicas=2>: more than half of the master's replicas", false},
		{2, semaphore.CheckOK, "master with 3 replicas; <min replicas> 2, more than half of them", "", true},
		{3, semaphore.CheckOK, "master with 3 replicas; <min replicas> 3, more than half of them", "", true},
		{4, semaphore.CheckFail, "master with 3 replicas, fewer than <min replicas> 4", "connect more replicas", false},
	} {
		c := findCheck(t, doctor(t, newStore(t, master.URL(), Options{MinReplicas: tc.min})), "replication")
		if c.Status != tc.want || !strings.HasPrefix(c.Detail, tc.detail) || !strings.HasPrefix(c.Fix, tc.fix) || tc.lacksFix && c.Fix != "" {
			t.Errorf("min replicas %d of 3: got %s %q (fix %q), want %s %q... (fix %q...)", tc.min, c.Status, c.Detail, c.Fix, tc.want, tc.detail, tc.fix)
		}
	}
}

// TestMinReplicasMajorityVerbose: a verbose run warns once that
// --min-replicas 1 of 3 is no majority, learning the count with its
// first WAIT; 2 of 3 says nothing, and neither does a run without
// --verbose, which does not ask.
func TestMinReplicasMajorityVerbose(t *testing.T) {
	t.Parallel()
	master := withReplicas(t, 3)
	for _, tc := range []struct {
		min     int
		verbose bool
		want    []string
	}{
		{1, true, []string{`key "K": <min replicas> 1 is not more than half of the master's 3 replicas: a partition can leave the old master and a promoted replica with 1 each, and both grant the same permit; use <min replicas=2>`}},
		{2, true, nil},
		{1, false, nil},
	} {
		var mu sync.Mutex
		var warnings []string
		warnf := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			warnings = append(warnings, fmt.Sprintf(format, args...))
		}
		st := newStore(t, master.URL(), Options{Warnf: warnf, Verbose: tc.verbose})
		key := uniqueKey(t)
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 3 * time.Second, MinReplicas: tc.min})
		// Renewals say nothing more.
		for range 2 {
			if err := l.Renew(ctxTimeout(t, 10*time.Second)); err != nil {
				t.Fatalf("renew: %v", err)
			}
		}
		release(t, l)
		mu.Lock()
		got := strings.ReplaceAll(strings.Join(warnings, "\n"), fmt.Sprintf("%q", key), `"K"`)
		mu.Unlock()
		if want := strings.Join(tc.want, "\n"); got != want {
			t.Errorf("min replicas %d of 3, verbose %v: got warnings %q, want %q", tc.min, tc.verbose, got, want)
		}
	}
}
