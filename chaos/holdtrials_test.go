//go:build linux

package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The trials of holds: on keys of one permit, each its own lane, a trial
// takes a hold, breaks something at a chosen moment, and measures what
// follows with a plain run waiting for the permit. See the package comment.

const (
	// trialSlack is what a trial allows beyond a bound, machines being
	// noisy, besides the machine's allowance (lag_test.go); the figures
	// show how much was used.
	trialSlack = 1500 * time.Millisecond
	// ownerBound: once --owner-pid's process exits, the keeper ends the
	// hold at once (a pidfd) or within a second (polling), and a step
	// under it stops at its next renewal, a third of the TTL later.
	ownerBound = time.Second + ttl/3
	// killedMaxRuntime is the --max-runtime of the acquires that
	// hold-acquire-kill SIGKILLs: a keeper left with nobody to release
	// its hold keeps it that long at most.
	killedMaxRuntime = 3 * time.Second
)

// lane is one key of a trial nemesis, its trials one after another.
type lane struct {
	c   *cluster
	key string
	rng *rand.Rand
	*tally
}

// tally is what the lanes of a trial nemesis counted and measured, by name.
type tally struct {
	mu       sync.Mutex
	counts   map[string]int
	took     map[string][]time.Duration
	free     []time.Duration // from when nothing kept a hold's permit until the next child on it started
	pushBack []time.Duration
	failures int
}

func (t *tally) count(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[name]++
}

// measured notes a duration of name; free ones go to the figures' column
// too.
func (t *tally) measured(name string, d time.Duration, free bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.took[name] = append(t.took[name], d)
	if free {
		t.free = append(t.free, d)
	}
}

// String shows the counts, and each duration's median and maximum.
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(t.counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, t.counts[name]))
	}
	for _, name := range slices.Sorted(maps.Keys(t.took)) {
		ds := t.took[name]
		parts = append(parts, fmt.Sprintf("%s p50 %v max %v (%d)", name, quantile(ds, 0.5).Round(time.Millisecond), maxDur(ds).Round(time.Millisecond), len(ds)))
	}
	return strings.Join(parts, "; ")
}

// fail reports a broken promise of a trial.
func (l *lane) fail(format string, args ...any) {
	l.mu.Lock()
	l.failures++
	l.mu.Unlock()
	l.c.t.Errorf("%s: "+format, append([]any{l.key}, args...)...)
}

// abort reports what keeps the lane from going on, and ends it: its
// goroutine may not end the test.
func (l *lane) abort(format string, args ...any) {
	l.fail(format, args...)
	runtime.Goexit()
}

// trials makes a nemesis of trial: it runs on two keys of one permit
// (-chaos.keys times two), over and over on each until -chaos.duration
// has passed; then the checks of every nemesis run, and Redis's count of
// holders is sampled throughout.
func trials(trial func(l *lane)) func(*testing.T, nemesis, uint64) figures {
	return func(t *testing.T, n nemesis, seed uint64) figures {
		began := time.Now()
		c := newCluster(t, n, 2**keysFlag, 1, seed)
		c.connect = calmConnect
		// Its redis-server never restarts: no restart fence, which would
		// hold the first grants back for a TTL.
		c.env = append(c.env, "SEMRUN_RESTART_FENCE=0")
		t.Cleanup(func() { c.killUntilDone() })
		sampled := c.watchHolders()
		tl := &tally{counts: map[string]int{}, took: map[string][]time.Duration{}}
		end := time.Now().Add(*duration)
		var wg sync.WaitGroup
		for i, key := range c.keys {
			l := &lane{c: c, key: key, rng: rand.New(rand.NewPCG(seed, uint64(i))), tally: tl}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					trial(l)
				}
			}()
		}
		wg.Wait()
		fig := figures{name: n.name}
		if killed := c.killUntilDone(); killed > 0 {
			t.Errorf("%d semruns still ran after the trials ended; killed", killed)
		}
		fig.keepersLeft = c.keepersLeft(ttl, nil)
		fig.leaked, fig.permitsFree = c.waitAllFree(mono())
		if open := c.rec.quiet(5 * time.Second); open > 0 {
			t.Errorf("%d children still connected 5s after the last semrun ended", open)
		}
		fig.overbookedCheck(t, sampled)
		c.check(&fig, n)
		tl.mu.Lock()
		fig.free, fig.pushBack = tl.free, tl.pushBack
		fig.bad += tl.failures
		fig.faults = tl.counts["trials"]
		tl.mu.Unlock()
		fig.faultNote = fmt.Sprintf("%d trials", fig.faults)
		fig.wall = time.Since(began)
		t.Logf("%s: %s; %s; %d semruns, %d grants, %d overlaps, %d by token order, %d tokens reused, %s, %d leaked permits, %d bad statuses, wall %v",
			n.name, tl, fig.holdNote(), fig.runs, fig.grants, fig.overlaps, fig.tokenOrder, fig.reused, fig.slotNote(), fig.leaked, fig.bad, fig.wall.Round(100*time.Millisecond))
		return fig
	}
}

// bg runs wait in the background, counted among the cluster's workers,
// and returns a channel closed once it returned.
func (c *cluster) bg(wait func()) <-chan struct{} {
	done := make(chan struct{})
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		defer close(done)
		wait()
	}()
	return done
}

// waitKid waits, for at most d, until r's child said it started, or r's
// semrun ended without one.
func (c *cluster) waitKid(r *run, done <-chan struct{}, d time.Duration) bool {
	deadline := time.After(d)
	for {
		if _, ok := c.rec.get(r.id); ok {
			return true
		}
		select {
		case <-done:
			return c.said(r)
		case <-deadline:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// said tells whether the child of r, whose semrun has ended, said it
// started: its line was written before its semrun could end, and the
// harness may read it a while later on a loaded machine.
func (c *cluster) said(r *run) bool {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := c.rec.get(r.id); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// ended waits, for at most d, until r's semrun has exited; past d it
// SIGKILLs it and fails. It returns r's child as it ended, if it started.
func (l *lane) ended(r *run, done <-chan struct{}, d time.Duration) (kid, bool) {
	select {
	case <-done:
	case <-time.After(d):
		l.fail("semrun run %d (%s) still ran %v after it started; SIGKILLed", r.id, r.kind(), d)
		_ = r.proc.Kill()
		<-done
	}
	if r.of != nil && r.role != "step" {
		return kid{}, false // no child
	}
	// Its child's lines may still be on their way.
	if !l.c.said(r) {
		return kid{}, false
	}
	for deadline := time.Now().Add(hangBound); ; time.Sleep(5 * time.Millisecond) {
		if k, ok := l.c.rec.get(r.id); k.gone != 0 || time.Now().After(deadline) {
			return k, ok
		}
	}
}

// kind names r's kind for a report.
func (r *run) kind() string {
	if r.role == "" {
		return "a run"
	}
	return r.role
}

// run starts a plain semrun on the lane's key whose child holds for hold
// ms and exits with code, with env added to the cluster's.
func (l *lane) run(hold, code int, env ...string) (*run, <-chan struct{}) {
	r := l.c.newRun(l.key, hold, code)
	wait, err := l.c.launch(r, ttl, env...)
	if err != nil {
		l.abort("start semrun: %v", err)
	}
	return r, l.c.bg(wait)
}

// acquire takes h, with extra flags, and waits for it (a minute at most);
// it reports whether acquire printed a handle.
func (l *lane) acquire(h *hold, extra ...string) bool {
	wait, err := l.c.startAcquire(h, extra...)
	if err != nil {
		l.abort("start semrun acquire: %v", err)
	}
	l.ended(h.acquire, l.c.bg(wait), hangBound)
	if l.c.handle(h) == "" {
		l.fail("semrun acquire exited %d without a hold; its stderr: %q", h.acquire.status, h.acquire.stderr)
		return false
	}
	return true
}

// startStep starts a step under h whose child holds for hold ms and exits
// with code.
func (l *lane) startStep(h *hold, hold, code int) (*run, <-chan struct{}) {
	r := l.c.newRun(l.key, hold, code)
	wait, err := l.c.startStep(h, r)
	if err != nil {
		l.abort("start semrun --handle: %v", err)
	}
	return r, l.c.bg(wait)
}

// release releases h and returns its semrun once it ended: release
// never waits for the line; the bound only catches a hang.
func (l *lane) release(h *hold) *run {
	r, wait, err := l.c.startRelease(h)
	if err != nil {
		l.abort("start semrun release: %v", err)
	}
	l.ended(r, l.c.bg(wait), hangBound)
	l.count(fmt.Sprintf("release %d", r.status))
	return r
}

// newHold is a hold on the lane's key that its trial judges.
func (l *lane) newHold() *hold {
	h := l.c.newHold(l.key, ttl)
	l.c.mu.Lock()
	h.own = true
	l.c.mu.Unlock()
	l.count("trials")
	return h
}

// keeperTrial is hold-keeper's: the keeper SIGKILLed during a step,
// between two steps, or with none. The step under way goes on (it renews
// the permit itself); the next step starts if the permit has not lapsed;
// the permit frees within the TTL of the last renewal, or, on a key nobody
// called for more than half a TTL, within half a TTL of the next call (the
// store's push-back for silent keys, measured); and release then says 112.
func keeperTrial(l *lane) {
	c, rng := l.c, l.rng
	h := l.newHold()
	if !l.acquire(h, "--max-runtime", holdMaxRuntime.String()) {
		return
	}
	mode := []string{"during a step", "between steps", "idle"}[rng.IntN(3)]
	silent := rng.IntN(2) == 0
	l.count("keeper SIGKILLed " + mode)
	var w *run
	var wDone <-chan struct{}
	waiter := func() { w, wDone = l.run(50, 0) }
	// kill SIGKILLs the keeper and, unless the key is to stay silent,
	// starts the waiter; 0 when the keeper was gone already.
	kill := func() int64 {
		if !c.killKeeper(h) {
			l.fail("hold %d: its keeper, pid %d, was gone before the nemesis killed it", h.id, h.keeper)
			l.release(h)
			return 0
		}
		if !silent {
			waiter()
		}
		return h.keeperKilled
	}
	// stepOK checks a step that ran after, or while, its keeper died.
	stepOK := func(r *run, k kid, ok bool, mayBeLost bool) {
		switch {
		case ok:
			if why := judge(*r, &k, machine.lag(r.launched, r.exited) >= starvedLag); why != "" {
				l.fail("hold %d: step run %d, its keeper SIGKILLed %s: %s: the step renews the permit itself; its stderr: %q", h.id, r.id, mode, why, r.stderr)
			}
		case mayBeLost && r.status == statusLost:
			l.count("step not started: hold lost")
		case starved(r.status, r.launched, r.exited):
			l.count("step not started: a loaded machine")
		default:
			l.fail("hold %d: step run %d exited %d and its child never started; its stderr: %q", h.id, r.id, r.status, r.stderr)
		}
	}
	var last int64 // when the hold was renewed last, at the latest
	switch mode {
	case "during a step":
		r, done := l.startStep(h, 600+rng.IntN(600), rng.IntN(101))
		if !c.waitKid(r, done, hangBound) {
			l.fail("hold %d: the child of step run %d did not start within %v", h.id, r.id, hangBound)
		}
		time.Sleep(upTo(rng, 300*time.Millisecond))
		killed := kill()
		k, ok := l.ended(r, done, hangBound)
		if killed == 0 {
			return
		}
		stepOK(r, k, ok, false)
		last = max(killed, r.exited)
	case "between steps":
		r, done := l.startStep(h, 100+rng.IntN(200), rng.IntN(101))
		k, ok := l.ended(r, done, hangBound)
		stepOK(r, k, ok, false)
		killed := kill()
		if killed == 0 {
			return
		}
		time.Sleep(upTo(rng, ttl/3))
		r, done = l.startStep(h, 100+rng.IntN(200), rng.IntN(101))
		k, ok = l.ended(r, done, hangBound)
		stepOK(r, k, ok, true)
		last = max(killed, r.exited)
	default:
		time.Sleep(upTo(rng, stepGap))
		if last = kill(); last == 0 {
			return
		}
	}
	var released *run
	if silent {
		// Nobody calls: the key is silent from the last renewal on.
		time.Sleep(time.Duration(last-mono()) + ttl/2 + upTo(rng, ttl))
		if rng.IntN(3) == 0 {
			// Released first: the push-back may have kept the hold
			// (0, its span checked with the holders), or not (112); either
			// way the permit is free at once.
			released = l.release(h)
			if released.status != 0 && released.status != statusLost {
				l.fail("hold %d: release on a silent key after its keeper was SIGKILLed: status %d, want 0 or %d; its stderr: %q", h.id, released.status, statusLost, released.stderr)
			}
		}
		waiter()
	}
	k, ok := l.ended(w, wDone, hangBound)
	if !ok {
		l.fail("hold %d: the waiter's child never started; its semrun exited %d: %q", h.id, w.status, w.stderr)
		if released == nil {
			l.release(h)
		}
		return
	}
	if released != nil {
		free := max(time.Duration(k.start-released.exited), 0)
		l.measured("free after a release on a silent key", free, true)
		if allow := machine.allowance(released.exited, k.start); free > trialSlack+allow {
			l.fail("hold %d: released at %s, yet the next child started only %v later (allowed %v for the machine)", h.id, c.rel(released.exited), free.Round(time.Millisecond), allow.Round(time.Millisecond))
		}
		return
	}
	// The lease lasts a TTL past the last renewal; a script that finds
	// the key silent for more than half a TTL pushes it to half a TTL
	// past its call (docs/how-it-works.md).
	bound := max(last+int64(ttl), w.launched+int64(ttl/2))
	free := time.Duration(k.start - last)
	if silent {
		l.measured("free after silence", free, true)
		pushed := max(time.Duration(k.start-last)-ttl, 0)
		l.mu.Lock()
		l.pushBack = append(l.pushBack, pushed)
		l.mu.Unlock()
		l.measured("push-back", pushed, false)
	} else {
		l.measured("free with a waiter", free, true)
	}
	if over, allow := time.Duration(k.start-bound), machine.allowance(last, k.start); over > trialSlack+allow {
		l.fail("hold %d: its keeper SIGKILLed %s, nothing renewed it after %s, yet the next child started only at %s, %v after the TTL (and the push-back of a silent key) allow (and %v for the machine)",
			h.id, mode, c.rel(last), c.rel(k.start), over.Round(time.Millisecond), allow.Round(time.Millisecond))
	}
	// The waiter holds the permit: the hold was lost, and release says so.
	if r := l.release(h); r.status != statusLost || !strings.Contains(r.stderr, "lost") {
		l.fail("hold %d: release after its keeper was SIGKILLed and another took the permit: status %d, want %d (lost); its stderr: %q", h.id, r.status, statusLost, r.stderr)
	}
}

// endTrial is hold-ends': a hold ended by the exit of its --owner-pid, or
// by its --max-runtime, with or without a step running then.
func endTrial(l *lane) {
	if l.rng.IntN(2) == 0 {
		ownerTrial(l)
		return
	}
	maxRuntimeTrial(l)
}

// ownerTrial: --owner-pid's process SIGKILLed. The hold ends at once, a
// step under way is stopped (112), the permit frees within about a second
// and a renewal, the keeper exits, and release says 0 with the owner's
// exit as the hold's end.
func ownerTrial(l *lane) {
	c, rng := l.c, l.rng
	owner := exec.Command("sleep", "60")
	owner.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := owner.Start(); err != nil {
		l.abort("start an owner: %v", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			_ = owner.Process.Kill()
			_ = owner.Wait()
		}
	}()
	h := l.newHold()
	if !l.acquire(h, "--owner-pid", strconv.Itoa(owner.Process.Pid), "--max-runtime", holdMaxRuntime.String()) {
		return
	}
	var r *run
	var done <-chan struct{}
	if rng.IntN(2) == 0 {
		r, done = l.startStep(h, 5000, 0)
		if !c.waitKid(r, done, hangBound) {
			l.fail("hold %d: the child of step run %d did not start within %v", h.id, r.id, hangBound)
		}
	}
	time.Sleep(upTo(rng, 500*time.Millisecond))
	killed := mono()
	_ = owner.Process.Kill()
	_ = owner.Wait()
	reaped = true
	c.mu.Lock()
	h.until = killed
	c.mu.Unlock()
	w, wDone := l.run(50, 0)
	if r != nil {
		l.count("owner exited during a step")
		k, ok := l.ended(r, done, hangBound)
		switch {
		case starved(r.status, r.launched, r.exited):
			l.count("step lost on a loaded machine")
		case !ok:
			l.fail("hold %d: step run %d: its child never started", h.id, r.id)
		case r.status != statusLost || k.how != "term":
			l.fail("hold %d: step run %d under a hold whose owner exited: status %d, its child ended %s; want %d, stopped; its stderr: %q", h.id, r.id, r.status, k.how, statusLost, r.stderr)
		default:
			l.measured("step stopped after the owner's exit", time.Duration(k.end-killed), false)
		}
	} else {
		l.count("owner exited between steps")
	}
	if k, ok := l.ended(w, wDone, hangBound); !ok {
		l.fail("hold %d: the waiter's child never started; its semrun exited %d: %q", h.id, w.status, w.stderr)
	} else {
		free := time.Duration(k.start - killed)
		l.measured("free after the owner's exit", free, true)
		if allow := machine.allowance(killed, k.start); free > ownerBound+trialSlack+allow {
			l.fail("hold %d: its owner exited at %s, yet the next child started only %v later, want within %v (and %v for the machine)", h.id, c.rel(killed), free.Round(time.Millisecond), ownerBound, allow.Round(time.Millisecond))
		}
	}
	l.keeperEnds(h, killed, ownerBound)
	want := fmt.Sprintf("its owner, pid %d, exited", owner.Process.Pid)
	// A keeper starved of its renewals loses the hold before its owner
	// exits: the machine's, not semrun's.
	if rel := l.release(h); (rel.status != 0 || !strings.Contains(rel.stderr, want)) && !starved(rel.status, h.acquire.launched, rel.exited) {
		l.fail("hold %d: release after its owner exited: status %d, stderr %q; want 0 and %q", h.id, rel.status, rel.stderr, want)
	}
}

// maxRuntimeTrial: --max-runtime of 1 to 2s. The hold ends then, not
// before (its span is checked with the other holders); a step under way
// is stopped (124), the permit frees within a renewal, the keeper exits, and
// release says 124.
func maxRuntimeTrial(l *lane) {
	c, rng := l.c, l.rng
	d := (time.Second + upTo(rng, time.Second)).Round(time.Millisecond)
	h := l.newHold()
	if !l.acquire(h, "--max-runtime", d.String()) {
		return
	}
	// The hold ends d after its grant, which came after acquire started
	// and before it exited.
	c.mu.Lock()
	endsBy := h.acquire.exited + int64(d)
	h.until = h.acquire.launched + int64(d)
	c.mu.Unlock()
	w, wDone := l.run(50, 0)
	if rng.IntN(3) > 0 {
		l.count("max-runtime during a step")
		r, done := l.startStep(h, int((d + 3*time.Second).Milliseconds()), 0)
		k, ok := l.ended(r, done, d+hangBound)
		// The hold ends d after its grant, which came after acquire
		// started: a step a loaded machine took that long to start finds
		// it over, or starts its child too late for it to say so before
		// it is stopped.
		left := time.Duration(h.acquire.launched + int64(d) - r.launched)
		switch {
		case !ok && r.status == statusMaxRuntime && (strings.Contains(r.stderr, "not started") || strings.HasSuffix(strings.TrimSpace(r.stderr), "terminated")) &&
			machine.lag(r.launched, r.exited) >= left:
			l.count("max-runtime before the step started, on a loaded machine")
		case starved(r.status, r.launched, r.exited):
			l.count("step lost on a loaded machine")
		case !ok:
			l.fail("hold %d: step run %d: its child never started; status %d: %q", h.id, r.id, r.status, r.stderr)
		case r.status != statusMaxRuntime || k.how != "term":
			l.fail("hold %d: step run %d under a hold whose --max-runtime %v ran out: status %d, its child ended %s; want %d, stopped; its stderr: %q",
				h.id, r.id, d, r.status, k.how, statusMaxRuntime, r.stderr)
		default:
			l.measured("step stopped after max-runtime", max(time.Duration(k.end-endsBy), 0), false)
		}
	} else {
		l.count("max-runtime between steps")
	}
	if k, ok := l.ended(w, wDone, d+hangBound); !ok {
		l.fail("hold %d: the waiter's child never started; its semrun exited %d: %q", h.id, w.status, w.stderr)
	} else {
		free := max(time.Duration(k.start-endsBy), 0)
		l.measured("free after max-runtime", free, true)
		if allow := machine.allowance(endsBy, k.start); free > ttl/3+trialSlack+allow {
			l.fail("hold %d: its --max-runtime %v ran out by %s, yet the next child started only %v later, want within %v (and %v for the machine)",
				h.id, d, c.rel(endsBy), free.Round(time.Millisecond), ttl/3, allow.Round(time.Millisecond))
		}
	}
	l.keeperEnds(h, endsBy, 0)
	if rel := l.release(h); (rel.status != statusMaxRuntime || !strings.Contains(rel.stderr, "max-runtime")) && !starved(rel.status, h.acquire.launched, rel.exited) {
		l.fail("hold %d: release after its --max-runtime ran out: status %d, stderr %q; want %d", h.id, rel.status, rel.stderr, statusMaxRuntime)
	}
}

// keeperEnds checks that h's keeper is gone within bound of at, and
// measures when. Having ended the hold, the keeper has nothing left to do
// but exit; a loaded machine may take its time (a second and more under
// -race), and only one that stays a TTL more fails.
func (l *lane) keeperEnds(h *hold, at int64, bound time.Duration) {
	gone := keeperGone(h.keeper, h.tag, time.Duration(at-mono())+bound+hangBound)
	if gone == 0 {
		l.fail("hold %d: its keeper, pid %d, still ran %v after its hold ended", h.id, h.keeper, bound+hangBound)
		return
	}
	after := max(time.Duration(gone-at), 0)
	l.measured("keeper gone", after, false)
	if allow := machine.allowance(at, gone); after > bound+ttl+trialSlack+allow {
		l.fail("hold %d: its keeper, pid %d, exited %v after its hold ended, want within %v (and %v for the machine)", h.id, h.keeper, after.Round(time.Millisecond), bound, allow.Round(time.Millisecond))
	}
}

// acquireKillTrial is hold-acquire-kill's: semrun acquire SIGKILLed while
// it waits in line, as its grant comes, as its keeper appears, or at a
// random moment of a free key's acquire. Whatever it held frees within the
// TTL, unless a keeper got the hold before acquire died: then nobody has
// the handle, and the keeper must end it by --max-runtime. Redis never
// counts more holders than permits meanwhile (sampled).
func acquireKillTrial(l *lane) {
	c, rng := l.c, l.rng
	phase := []string{"waiting", "at its grant", "as its keeper starts", "at random"}[rng.IntN(4)]
	h := l.newHold()
	var blocker, prober *run
	var bDone, pDone <-chan struct{}
	// A blocker "waiting" holds until its release file appears, once two
	// are in line behind it and the acquire was killed.
	release := filepath.Join(c.dir, fmt.Sprintf("release-%d", h.id))
	if phase == "waiting" || phase == "at its grant" {
		hold, env := 300+rng.IntN(500), []string(nil)
		if phase == "waiting" {
			hold, env = int(hangBound.Milliseconds()), []string{untilEnv + "=" + release}
		}
		blocker, bDone = l.run(hold, 0, env...)
		if !c.waitKid(blocker, bDone, hangBound) {
			l.fail("the blocker's child did not start within %v; its semrun exited %d: %q", hangBound, blocker.status, blocker.stderr)
		}
	}
	wait, err := c.startAcquire(h, "--max-runtime", killedMaxRuntime.String())
	if err != nil {
		l.abort("start semrun acquire: %v", err)
	}
	aDone := c.bg(wait)
	switch phase {
	case "waiting":
		l.inLine(1)
		prober, pDone = l.run(50, 0) // behind the acquire
		l.inLine(2)
		time.Sleep(upTo(rng, 100*time.Millisecond))
	case "at its grant":
		select {
		case <-bDone:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(upTo(rng, 30*time.Millisecond))
	case "as its keeper starts":
		// Its keeper has one of the next pids: a look at those is quick
		// enough to catch acquire before it hears from it, most times.
		deadline := time.Now().Add(5 * time.Second)
		for !keeperAmong(h.tag, h.acquire.proc.Pid+1, 256) && time.Now().Before(deadline) {
			select {
			case <-aDone:
				deadline = time.Now()
			default:
			}
		}
	default:
		time.Sleep(upTo(rng, 40*time.Millisecond))
	}
	killed := mono()
	if h.acquire.proc.Kill() == nil {
		c.mu.Lock()
		h.acquire.killed = true
		c.mu.Unlock()
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		l.abort("let the blocker go: %v", err)
	}
	l.ended(h.acquire, aDone, hangBound)
	if prober == nil {
		prober, pDone = l.run(50, 0)
	}
	if c.handle(h) != "" {
		l.count("acquire done before its SIGKILL " + phase)
		if r := l.release(h); r.status != 0 && (r.status != statusMaxRuntime || time.Duration(r.launched-h.acquire.exited) < killedMaxRuntime-trialSlack) {
			l.fail("hold %d: release %v after its acquire: status %d: %q", h.id, time.Duration(r.launched-h.acquire.exited).Round(time.Millisecond), r.status, r.stderr)
		}
		l.ended(prober, pDone, hangBound)
		return
	}
	l.count("acquire SIGKILLed " + phase)
	// A keeper that kept the hold before acquire died was never told the
	// handle was printed: nobody could name the hold, and it ends it at
	// once, as acquire's end of their pipe closes.
	time.Sleep(300 * time.Millisecond)
	for pid := range keepers(h.tag) {
		l.count("keeper left holding")
		gone := keeperGone(pid, h.tag, orphanBound+hangBound)
		if gone == 0 {
			l.fail("hold %d: its keeper, pid %d, left by a SIGKILLed acquire, still ran %v later", h.id, pid, orphanBound+hangBound)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			continue
		}
		life := time.Duration(gone - killed)
		l.measured("keeper left holding, gone after", life, false)
		if allow := machine.allowance(killed, gone); life > orphanBound+allow {
			l.fail("hold %d: its keeper, pid %d, left by a SIGKILLed acquire, exited %v after it, want within %v (and %v for the machine)", h.id, pid, life.Round(time.Millisecond), orphanBound, allow.Round(time.Millisecond))
		}
	}
	from := killed
	if blocker != nil {
		l.ended(blocker, bDone, hangBound)
		from = max(from, blocker.exited)
	}
	k, ok := l.ended(prober, pDone, killedMaxRuntime+hangBound)
	if !ok {
		l.fail("hold %d: the prober's child never started; its semrun exited %d: %q", h.id, prober.status, prober.stderr)
		return
	}
	free := time.Duration(k.start - from)
	l.measured("free after the SIGKILL", free, true)
	if allow := machine.allowance(from, k.start); free > ttl+trialSlack+allow {
		l.fail("hold %d: acquire SIGKILLed %s at %s left its permit held: the next child started %v later, want within the TTL (%v, and %v for the machine)",
			h.id, phase, c.rel(killed), free.Round(time.Millisecond), ttl, allow.Round(time.Millisecond))
	}
}

// orphanBound is how long a keeper may outlive a SIGKILLed acquire that
// never told it the handle was printed: it ends the hold once it reads
// the end of their pipe, with a slack for a loaded machine.
const orphanBound = 3 * time.Second

// keeperAmong tells whether the keeper of tag is one of the n pids from
// pid on.
func keeperAmong(tag string, pid, n int) bool {
	for p := pid; p < pid+n; p++ {
		if t, ok := keeperTag(p); ok && t == tag {
			return true
		}
	}
	return false
}

// inLine waits, for at most hangBound, until the lane's key has n waiters
// in line.
func (l *lane) inLine(n int64) {
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	for ctx.Err() == nil {
		if got, err := l.c.client().ZCard(ctx, "semrun:{"+l.key+"}:queue").Result(); err == nil && got >= n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	l.fail("%d waiters not in line within %v", n, hangBound)
}
