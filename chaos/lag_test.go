//go:build linux

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The machine's lag: how long, at a given moment, a semrun takes from its
// launch to its child's start on a key nobody else uses, against a
// redis-server of its own that no nemesis touches. A loaded machine (a CI
// runner with noisy neighbours, two CPU-bound processes beside the run)
// stretches every step the nemeses time: a heal, a permit freed, a child
// stopped. Their liveness bounds allow for twice the lag measured around
// the step, so that they fail on semrun, not on the machine; on a quiet
// machine the lag is a few tens of milliseconds and the bounds are as
// before. The safety checks (overlaps, tokens, leaked permits, Redis's
// count of holders) allow for nothing.

// probeEvery is the pause between the prober's semruns.
const probeEvery = 250 * time.Millisecond

// starvedLag is the lag from which a semrun that lost its permit (112) or
// its connection (125) with no fault near is excused, as the machine's:
// a renewal must succeed within 1.3s of the last, and a connection within
// 2s, and a machine on which starting a semrun takes half a second may
// miss either.
const starvedLag = ttl / 4

// starved tells whether a semrun that ended with status from from to to
// could not reach Redis (125), or keep its permit (112), on a machine too
// slow: its lag then past starvedLag. The harness counts those, and does
// not fail on them.
func starved(status int, from, to int64) bool {
	return (status == statusFailure || status == statusLost) && machine.lag(from, to) >= starvedLag
}

// probe is one semrun of the prober: launched, and its child started (or
// its semrun exited without one), mono().
type probe struct{ launched, started int64 }

// prober measures the machine's lag for as long as the test runs.
type prober struct {
	mu     sync.Mutex
	probes []probe
	cur    int64 // launch of the probe under way, 0 for none
	failed int   // probes whose semrun ran no child
}

// machine is the prober of TestChaos; nil in other tests: no lag.
var machine *prober

// startProber starts the prober on a redis-server of its own, stopped
// when t ends.
func startProber(t *testing.T, seed uint64) *prober {
	p := &prober{}
	c := newCluster(t, nemesis{name: "probe"}, 1, 1000, seed)
	c.env = append(c.env, "SEMRUN_RESTART_FENCE=0")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(probeEvery):
			}
			p.once(c)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		c.killUntilDone()
		t.Logf("machine lag (a semrun's launch to its child's start, every %v): %s; second:ms of each probe:%s", probeEvery, p, p.series(c.t0))
	})
	return p
}

// once runs one probe and records it.
func (p *prober) once(c *cluster) {
	r := c.newRun(c.keys[0], 0, 0)
	p.mu.Lock()
	p.cur = mono()
	p.mu.Unlock()
	wait, err := c.spawn(r, append([]string{"-k", r.key, "-n", "1000", "--ttl", "30s", "--connect-timeout", calmConnect.String(), "--"}, c.childArgs(r)...))
	if err != nil {
		c.t.Errorf("prober: start semrun: %v", err)
		return
	}
	exited := make(chan struct{})
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		defer close(exited)
		wait()
	}()
	started := int64(0)
	for started == 0 {
		if k, ok := c.rec.get(r.id); ok {
			started = k.start
			break
		}
		select {
		case <-exited:
			if c.said(r) {
				k, _ := c.rec.get(r.id)
				started = k.start
				break
			}
			started = mono()
			p.mu.Lock()
			p.failed++
			p.mu.Unlock()
		case <-time.After(2 * time.Millisecond):
		}
	}
	p.mu.Lock()
	p.probes = append(p.probes, probe{launched: p.cur, started: started})
	p.cur = 0
	p.mu.Unlock()
	<-exited
	c.mu.Lock()
	status, sig, stderr := r.status, r.signal, r.stderr
	c.mu.Unlock()
	if _, ok := c.rec.get(r.id); !ok && sig == 0 {
		c.t.Logf("prober: semrun exited %d without a child: %q", status, stderr)
	}
}

// lag is the longest a probe took that was under way at some moment from
// a second before from until to (mono()): 0 without a prober.
func (p *prober) lag(from, to int64) time.Duration {
	if p == nil {
		return 0
	}
	from -= int64(time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	var most time.Duration
	for _, pr := range p.probes {
		if pr.launched <= to && pr.started >= from {
			most = max(most, time.Duration(pr.started-pr.launched))
		}
	}
	if p.cur != 0 && p.cur <= to {
		most = max(most, time.Duration(mono()-p.cur))
	}
	return most
}

// allowance is what a liveness bound allows for a loaded machine between
// from and to: twice the lag.
func (p *prober) allowance(from, to int64) time.Duration { return 2 * p.lag(from, to) }

// String shows the probes' count and their lags' median, 99th percentile
// and maximum.
func (p *prober) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ds []time.Duration
	for _, pr := range p.probes {
		ds = append(ds, time.Duration(pr.started-pr.launched))
	}
	slices.Sort(ds)
	return fmt.Sprintf("%d probes (%d without a child), p50 %v, p99 %v, max %v", len(ds), p.failed,
		quantile(ds, 0.5).Round(time.Millisecond), quantile(ds, 0.99).Round(time.Millisecond), maxDur(ds).Round(time.Millisecond))
}

// series shows the lags of the probes in order, in ms, with the seconds
// since from at which each was launched, so that a figure can be read
// against what ran then.
func (p *prober) series(from int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, pr := range p.probes {
		fmt.Fprintf(&b, " %.0f:%d", float64(pr.launched-from)/1e9, (pr.started-pr.launched)/int64(time.Millisecond))
	}
	return b.String()
}
