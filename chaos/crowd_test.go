//go:build linux

package chaos

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The crowd nemesis checks the promise that a crowd of dead waiters costs
// seconds in all, not a claim each. See the package comment.

var (
	crowdSize     = flag.Int("chaos.crowd", 200, "waiters in the crowd nemesis's line; every other one is SIGKILLed")
	holdCrowdSize = flag.Int("chaos.hold-crowd", 40, "acquires in the hold-crowd nemesis's line; every other one is SIGKILLed")
)

const (
	crowdPermits = 5
	// crowdTTL is the --ttl of the crowd's semruns: long, so that a dead
	// waiter keeps its place (a waiter lease of 10s, stretched by 120ms a
	// waiter in a longer line) unless the roll call takes it out.
	crowdTTL = 30 * time.Second
	// crowdHold bounds how long a holder's child waits for its release:
	// longer than a loaded machine takes to line up 300 waiters, one
	// after another (2 minutes was not).
	crowdHold = 10 * time.Minute
	// crowdWait bounds how long the live waiters may take to run their
	// children once the holders are gone: longer than the dead waiters'
	// places last, so that a line held up by them is measured, not cut
	// short, and than a loaded machine takes to start 100 children.
	crowdWait = 3 * time.Minute
)

// crowdBound is how much longer than the baseline the live waiters of a
// line of size may take behind its dead half: 10s for 200 (docs/how-it-works.md),
// less for a shorter line, though never under the 3s one dead waiter may
// cost.
func crowdBound(size int) time.Duration {
	return max(3*time.Second, 10*time.Second*time.Duration(size)/200)
}

// holdCrowdBound is the least bound of the crowd of acquires.
const holdCrowdBound = 5 * time.Second

// crowdLine is one line of the crowd nemesis on a key of its own: N holders
// whose children hold until a file appears, and waiters behind them.
type crowdLine struct {
	c       *cluster
	key     string
	holds   bool   // its waiters are semrun acquire, each released once it holds
	release string // the file that lets the holders go
	holders []*run
	waiters []*run // in line order
	ended   map[int]chan struct{}
}

// runCrowd lines up the baseline (the live waiters alone) and the crowd (a
// line twice as long), lets the baseline through and times it, then does
// the same with the crowd, whose every other waiter is SIGKILLed just
// before its holders go.
func runCrowd(t *testing.T, n nemesis, seed uint64) figures {
	return crowd(t, n, seed, max(*crowdSize, 2), false)
}

// runHoldCrowd is the crowd of acquires: the same line, its waiters
// semrun acquire, each hold released by the harness once printed.
func runHoldCrowd(t *testing.T, n nemesis, seed uint64) figures {
	return crowd(t, n, seed, max(*holdCrowdSize, 2), true)
}

// crowd runs a crowd of size waiters, runs or acquires.
func crowd(t *testing.T, n nemesis, seed uint64, size int, holds bool) figures {
	began := time.Now()
	c := newCluster(t, n, 2, crowdPermits, seed)
	c.connect = calmConnect
	if holds {
		c.env = append(c.env, "SEMRUN_RESTART_FENCE=0") // as start gives a run
	}
	t.Cleanup(func() { c.killUntilDone() })
	dir := t.TempDir()
	newLine := func(key string) *crowdLine {
		return &crowdLine{c: c, key: key, holds: holds, release: filepath.Join(dir, key), ended: map[int]chan struct{}{}}
	}

	// Both lines first, then the two measures back to back, so that the
	// load of a shared machine weighs on both alike.
	base, crowd := newLine(c.keys[0]), newLine(c.keys[1])
	base.lineUp((size + 1) / 2) // as many as the crowd's live waiters
	crowd.lineUp(size)
	// A holder that lost its permit before the release let its line
	// through early: the stall measures nothing. On a machine stalled
	// long enough to starve its renewals (a --ttl of 30s), that is the
	// machine's, and the comparison is skipped; otherwise it fails.
	measured := true
	for _, l := range []*crowdLine{base, crowd} {
		if r := l.holderGone(); r != nil {
			measured = false
			if !starved(r.status, r.launched, r.exited) {
				t.Errorf("holder run %d of %q ended with status %d before the release: %q", r.id, l.key, r.status, r.stderr)
			}
			t.Logf("holder run %d of %q ended with status %d before the release, the machine's lag %v: the stalls are not compared",
				r.id, l.key, r.status, machine.lag(r.launched, r.exited).Round(time.Millisecond))
		}
	}
	baseline, late := base.serve(base.waiters)
	if late > 0 {
		t.Errorf("baseline: %d of %d waiters alone in line had not run their children %v after the holders went", late, len(base.waiters), crowdWait)
	}
	var live, dead []*run
	for i, r := range crowd.waiters {
		if i%2 == 0 {
			live = append(live, r)
		} else {
			dead = append(dead, r)
		}
	}
	// Their places stay in line: only their waiter leases, or a roll
	// call, can take them out.
	killed := crowd.kill(dead)
	served := mono()
	stall, late := crowd.serve(live)
	if late > 0 {
		t.Errorf("crowd: %d of %d live waiters had not run their children %v after the holders went, behind %d dead", late, len(live), crowdWait, len(dead))
	}
	extra, bound := stall-baseline, crowdBound(size)
	if holds {
		// The roll call costs about 2s however short the line: its
		// shorter line leaves less room below crowdBound's 3s, and a claim
		// each would still cost its 20 dead 40s.
		bound = max(bound, holdCrowdBound)
	}
	// A machine slow enough to stretch the baseline past the bound
	// stretches the crowd's line alike, and swings between the two: the
	// dead may cost as much as the baseline took, and the machine's
	// allowance. A claim each would still cost 100 dead 200s.
	bound = max(bound, baseline) + machine.allowance(served, served+int64(stall))
	if measured && extra > bound {
		t.Errorf("a crowd of %d dead waiters held up the %d live ones %v in all (%v, against %v with the live ones alone in line), want at most %v",
			len(dead), len(live), extra.Round(time.Millisecond), stall.Round(time.Millisecond), baseline.Round(time.Millisecond), bound.Round(time.Millisecond))
	}

	// The checks of every nemesis, and the crowd's own.
	if open := c.rec.quiet(hangBound); open > 0 {
		t.Errorf("%d children still connected %v after the last semrun ended", open, hangBound)
	}
	fig := figures{name: n.name, faults: killed}
	fig.leaked, fig.permitsFree = c.waitAllFree(mono())
	c.check(&fig, n)
	ran := 0
	for _, r := range dead {
		if k, ok := c.rec.get(r.id); ok {
			ran++
			t.Errorf("semrun run %d was SIGKILLed in line, yet its child ran: %s", r.id, c.describe(k))
		}
		if r.of != nil && c.handle(r.of) != "" {
			ran++
			t.Errorf("semrun acquire run %d was SIGKILLed in line, yet printed a hold", r.id)
		}
	}
	statuses := map[int]int{}
	c.mu.Lock()
	for _, r := range append(slices.Clone(base.waiters), live...) {
		statuses[r.status]++
		if rel := r.of; rel != nil && (rel.release == nil || rel.release.status != 0) {
			fig.bad++
			t.Errorf("the hold of semrun acquire run %d was not released: %+v", r.id, rel.release)
		}
	}
	c.mu.Unlock()
	if holds {
		// A dead waiter never had a keeper. The live ones' keepers see
		// their release at their next renewal, a third of the --ttl
		// later, and exit.
		for pid, tag := range keepers(c.dir + "/") {
			for _, r := range dead {
				if r.of.tag == tag {
					ran++
					t.Errorf("semrun acquire run %d was SIGKILLed in line, yet its keeper, pid %d, runs", r.id, pid)
				}
			}
		}
		fig.keepersLeft = c.keepersLeft(crowdTTL/3+3*time.Second, nil)
	}
	var st []string
	for _, s := range slices.Sorted(maps.Keys(statuses)) {
		st = append(st, fmt.Sprintf("%d × %d", statuses[s], s))
	}
	fig.faultNote = fmt.Sprintf("%d of a line of %d SIGKILLed: stall %v, baseline %v, extra %v (at most %v)",
		len(dead), size, stall.Round(time.Millisecond), baseline.Round(time.Millisecond), extra.Round(time.Millisecond), bound)
	fig.wall = time.Since(began)
	did, held := "ran their children", ""
	if holds {
		did, held = "took and released their holds", "; "+fig.holdNote()
	}
	t.Logf("%s: N=%d, --ttl %v; %d live waiters and %d SIGKILLed at once, alternating in a line of %d: the live %s within %v of the holders' release "+
		"(baseline, the %d alone in line: %v), %v more (at most %v); statuses of the live waiters' semruns, baseline's and crowd's: %s; children (or holds) of the killed: %d; "+
		"%d semruns, %d grants, %d overlaps, %d by token order, %d tokens reused, %s, %d leaked permits, %d bad statuses%s, wall %v",
		n.name, crowdPermits, crowdTTL, len(live), len(dead), size, did, stall.Round(time.Millisecond),
		len(base.waiters), baseline.Round(time.Millisecond), extra.Round(time.Millisecond), bound, strings.Join(st, ", "), ran,
		fig.runs, fig.grants, fig.overlaps, fig.tokenOrder, fig.reused, fig.slotNote(), fig.leaked, fig.bad, held, fig.wall.Round(100*time.Millisecond))
	return fig
}

// start starts a semrun on the line's key whose child holds for hold (or
// until $CHAOS_UNTIL appears, given in env) and exits 0.
func (l *crowdLine) start(hold time.Duration, env ...string) *run {
	c := l.c
	r := c.newRun(l.key, int(hold.Milliseconds()), 0)
	// Its redis-server never restarts: no restart fence, which would hold
	// the first grant back for the --ttl.
	env = append(env, "SEMRUN_RESTART_FENCE=0")
	wait, err := c.launch(r, crowdTTL, env...)
	if err != nil {
		c.t.Fatalf("start semrun: %v", err)
	}
	ended := make(chan struct{})
	l.ended[r.id] = ended
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		wait()
		close(ended)
	}()
	return r
}

// join puts a waiter at the back of the line: a semrun whose child exits
// at once, or an acquire whose hold is released as soon as it is printed.
func (l *crowdLine) join() *run {
	if !l.holds {
		return l.start(0)
	}
	c := l.c
	h := c.newHold(l.key, crowdTTL)
	wait, err := c.startAcquire(h, "--max-runtime", crowdHold.String())
	if err != nil {
		c.t.Fatalf("start semrun acquire: %v", err)
	}
	ended := make(chan struct{})
	l.ended[h.acquire.id] = ended
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		defer close(ended)
		if wait(); c.handle(h) != "" {
			c.releaseHold(h)
		}
	}()
	return h.acquire
}

// lineUp starts the holders, then size waiters one at a time, each in line
// before the next starts, so that the line's order is the order of
// l.waiters.
func (l *crowdLine) lineUp(size int) {
	c := l.c
	for range crowdPermits {
		l.holders = append(l.holders, l.start(crowdHold, untilEnv+"="+l.release))
	}
	deadline := time.Now().Add(hangBound)
	for _, r := range l.holders {
		for {
			if _, ok := c.rec.get(r.id); ok {
				break
			}
			l.alive(r, deadline, "its child to start")
			time.Sleep(5 * time.Millisecond)
		}
	}
	rc := c.client()
	queue := "semrun:{" + l.key + "}:queue"
	for i := range size {
		r := l.join()
		l.waiters = append(l.waiters, r)
		// The bounds only catch a hang, however slowly a loaded machine
		// starts the waiters.
		deadline := time.Now().Add(hangBound)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), hangBound)
			n, err := rc.ZCard(ctx, queue).Result()
			cancel()
			if err != nil {
				c.t.Fatalf("read the line of %q: %v", l.key, err)
			}
			if n > int64(i) {
				break
			}
			l.alive(r, deadline, fmt.Sprintf("it to take place %d in line", i+1))
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// holderGone returns a holder of the line whose semrun has ended, nil
// when none has.
func (l *crowdLine) holderGone() *run {
	for _, r := range l.holders {
		select {
		case <-l.ended[r.id]:
			l.c.mu.Lock()
			defer l.c.mu.Unlock()
			cp := *r
			return &cp
		default:
		}
	}
	return nil
}

// alive fails the test if r's semrun has ended or the deadline has passed,
// while waiting for what.
func (l *crowdLine) alive(r *run, deadline time.Time, what string) {
	select {
	case <-l.ended[r.id]:
		l.c.mu.Lock()
		status, stderr := r.status, r.stderr
		l.c.mu.Unlock()
		l.c.t.Fatalf("semrun run %d on %q ended with status %d while the harness waited for %s; its stderr: %q", r.id, l.key, status, what, stderr)
	default:
	}
	if time.Now().After(deadline) {
		l.c.t.Fatalf("semrun run %d on %q: no sign of %s within the time allowed", r.id, l.key, what)
	}
}

// kill SIGKILLs rs at once and waits until they are gone; it returns how
// many it killed.
func (l *crowdLine) kill(rs []*run) int {
	c := l.c
	c.mu.Lock()
	for _, r := range rs {
		r.killed = true
	}
	c.mu.Unlock()
	at, n := mono(), 0
	for _, r := range rs {
		if err := r.proc.Kill(); err != nil {
			c.t.Errorf("SIGKILL semrun run %d: %v", r.id, err)
			continue
		}
		n++
	}
	timeout := time.After(hangBound)
	for _, r := range rs {
		select {
		case <-l.ended[r.id]:
		case <-timeout:
			c.t.Fatalf("semrun run %d still there %v after its SIGKILL", r.id, hangBound)
		}
	}
	c.addFault(fault{what: fmt.Sprintf("SIGKILL %d waiters in line on %q", n, l.key), start: at, heal: mono()})
	return n
}

// serve lets the holders go and waits, for at most crowdWait, until every
// semrun of live has ended. It returns the time from the release until the
// last of their children ended, and how many had not by then (killed, with
// every other semrun still running).
func (l *crowdLine) serve(live []*run) (time.Duration, int) {
	c := l.c
	at := mono()
	if err := os.WriteFile(l.release, nil, 0o644); err != nil {
		c.t.Fatal(err)
	}
	timer := time.NewTimer(crowdWait)
	defer timer.Stop()
	expired, late := false, 0
	for i, r := range append(slices.Clone(l.holders), live...) {
		if !expired {
			select {
			case <-l.ended[r.id]:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-l.ended[r.id]:
		default:
			if i >= len(l.holders) {
				late++
			}
		}
	}
	if expired {
		c.killUntilDone()
		return crowdWait, late
	}
	var last int64
	for _, r := range live {
		if k, ok := c.rec.get(r.id); ok {
			last = max(last, k.end)
		}
		c.mu.Lock()
		if r.of != nil && r.of.release != nil {
			last = max(last, r.of.release.exited)
		}
		c.mu.Unlock()
	}
	return time.Duration(last - at), 0
}
