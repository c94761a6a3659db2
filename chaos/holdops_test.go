//go:build linux

package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A hold's keeper killed or frozen, and what may follow: a drain of its
// key (hold-drain), or a step that outlives the keeper's loss point
// (hold-frozen-keeper). Both strike a hold of their own, taken among the
// hold workload's, and check what followed from the children's own
// lines. See the package comment.

// drainAct is one act of hold-drain.
type drainAct struct {
	key  string
	hold *hold
	how  string // SIGKILL or SIGSTOP of the keeper
	mode string // during a step, between steps, idle
	// quiet: the workers left the key alone from before the strike until
	// the resume. Only the drain's reads call it then: the next renewal
	// finds the key silent and pushes its leases back, and a drain that
	// read the leases as they are, not as that call will find them, would
	// say nobody held it while the hold could still come back.
	quiet bool
	// The drain command: from start to exit (mono()), its status.
	start, exit int64
	status      int
	stderr      string
	// resumed is when semrun key resume started: the key may grant again.
	resumed int64
	// refused is the step under the handle tried after the drain, nil
	// when none was.
	refused *run
}

// drainModes: when the keeper is struck.
var drainModes = []string{"during a step", "between steps", "idle"}

// strikeKeeper SIGKILLs h's keeper or SIGSTOPs its process group, and
// says which; "" when it was gone already. A frozen keeper must be thawed
// (thawKeeper).
func (c *cluster) strikeKeeper(h *hold, stop bool) string {
	if !stop {
		if c.killKeeper(h) {
			return "SIGKILL"
		}
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := keeperTag(h.keeper); !ok || t != h.tag {
		return ""
	}
	// The keeper leads a group of its own (it is a daemon): stop it whole,
	// unless the harness's group is the same.
	target := h.keeper
	if pg, err := unix.Getpgid(h.keeper); err == nil && pg == h.keeper && pg != syscall.Getpgrp() {
		target = -pg
	}
	if syscall.Kill(target, syscall.SIGSTOP) != nil {
		return ""
	}
	return "SIGSTOP"
}

// thawKeeper SIGCONTs h's keeper and its group.
func thawKeeper(h *hold) {
	_ = syscall.Kill(h.keeper, syscall.SIGCONT)
	if pg, err := unix.Getpgid(h.keeper); err == nil && pg == h.keeper && pg != syscall.Getpgrp() {
		_ = syscall.Kill(-pg, syscall.SIGCONT)
	}
}

// ownHold takes a hold of the nemesis on a random key, waiting in line
// with the workers; nil when acquire printed none.
func (c *cluster) ownHold(rng *rand.Rand) *hold {
	key := c.keys[rng.IntN(len(c.keys))]
	h := c.newHold(key, ttl)
	c.mu.Lock()
	h.own = true
	c.mu.Unlock()
	wait, err := c.startAcquire(h, "--max-runtime", holdMaxRuntime.String())
	if err != nil {
		c.t.Errorf("start semrun acquire: %v", err)
		return nil
	}
	select {
	case <-c.bg(wait):
	case <-time.After(hangBound):
		c.t.Errorf("semrun acquire on %q still waited after %v", key, hangBound)
		_ = h.acquire.proc.Kill()
		return nil
	}
	if c.handle(h) == "" {
		c.t.Errorf("semrun acquire on %q exited %d without a hold: %q", key, h.acquire.status, h.acquire.stderr)
		return nil
	}
	return h
}

// drainHold is the hold-drain nemesis: a hold of its own, its keeper
// SIGKILLed or its group SIGSTOPped during a step, between steps or idle,
// every other time (the first included) with the workers of the key
// stopped from before until the resume; then semrun key drain. Once drain says nobody holds the key, a step
// under the hold's handle must refuse (112) without starting its child;
// then, 0.5 to 1.5 TTLs later, semrun key resume, the keeper thawed, and
// the hold released (112: it was lost).
func drainHold(c *cluster, rng *rand.Rand) fault {
	at := mono()
	h := c.ownHold(rng)
	if h == nil {
		return fault{what: "drain: no hold taken", start: at, heal: mono(), operator: true}
	}
	// Every other drain, the first of a run included, on a silent key: a
	// short run makes one at least.
	c.mu.Lock()
	quiet := len(c.drains)%2 == 0
	c.mu.Unlock()
	d := &drainAct{key: h.key, hold: h, mode: drainModes[rng.IntN(len(drainModes))], quiet: quiet}
	stop := rng.IntN(2) == 0
	if d.quiet {
		// Nobody but the nemesis calls the key from now until the resume.
		defer c.silence(h.key, false, 0)
		if c.silence(h.key, true, hangBound) == 0 {
			c.t.Errorf("%q: the workers' semruns still ran %v after they were told to stop", h.key, hangBound)
		}
	}
	var step <-chan struct{}
	switch d.mode {
	case "during a step":
		r := c.newRun(h.key, 1000+rng.IntN(1500), rng.IntN(101))
		wait, err := c.startStep(h, r)
		if err != nil {
			c.t.Errorf("start semrun --handle: %v", err)
			break
		}
		step = c.bg(wait)
		if !c.waitKid(r, step, hangBound) {
			c.t.Errorf("hold %d: the child of step run %d did not start within %v", h.id, r.id, hangBound)
		}
		time.Sleep(upTo(rng, 300*time.Millisecond))
	case "between steps":
		c.step(h, 100+rng.IntN(200), rng.IntN(101))
		time.Sleep(upTo(rng, stepGap))
	default:
		time.Sleep(upTo(rng, stepGap))
	}
	f := fault{start: mono(), operator: true}
	if d.how = c.strikeKeeper(h, stop); d.how == "" {
		c.t.Errorf("hold %d: its keeper, pid %d, was gone before the nemesis struck it", h.id, h.keeper)
	}
	res := c.operate(opBound+5*time.Second, opConnect, "key", "drain", h.key, "--reason", pauseReason, "--timeout", opBound.String())
	d.start, d.exit, d.status, d.stderr = res.start, res.end, res.status, res.stderr
	if res.status == 0 {
		time.Sleep(upTo(rng, ttl/4))
		d.refused = c.step(h, 300, 7)
	}
	time.Sleep(time.Duration(d.exit-mono()) + opFaultTime(rng))
	d.resumed = mono()
	if r := c.operate(opBound, opConnect, "key", "resume", h.key); r.status != 0 {
		c.t.Errorf("semrun key resume %s: status %d: %q", h.key, r.status, r.stderr)
	}
	if d.how == "SIGSTOP" {
		thawKeeper(h)
	}
	if step != nil {
		<-step // ended by the drain at the latest: the wait is checkDrains'
	}
	c.releaseHold(h)
	f.heal = mono()
	f.what = fmt.Sprintf("%s of hold %d's keeper %s (key silent: %v), then drain of %q: status %d after %v", d.how, h.id, d.mode, d.quiet, h.key, d.status,
		time.Duration(d.exit-d.start).Round(time.Millisecond))
	c.mu.Lock()
	c.drains = append(c.drains, d)
	c.mu.Unlock()
	return f
}

// heldWhileDrained returns what held a permit of key (children, and holds
// over their spans: holders) at some instant from a drain's exit until
// the key was resumed: nothing may, drain having said nobody held it.
func heldWhileDrained(held []kid, key string, from, to int64) []kid {
	var out []kid
	for _, k := range held {
		if k.key == key && k.start < to && (k.end == 0 || k.end > from) {
			out = append(out, k)
		}
	}
	return out
}

// refusalVerdict says what is wrong with a step under a hold's handle
// tried once drain had said nobody held its key, "" when nothing: it must
// exit 112 without starting its child.
func refusalVerdict(r *run, k *kid) string {
	switch {
	case r == nil || r.proc == nil:
		return ""
	case k != nil:
		return fmt.Sprintf("its child started (token %d) and it exited %d: drain had said nobody held the key", k.token, r.status)
	case r.status != statusLost:
		return fmt.Sprintf("it exited %d (%q), want %d: its hold was lost", r.status, r.stderr, statusLost)
	}
	return ""
}

// allHolders returns the children and holds of the cluster as holders
// of permits (holders), as the overlap checks see them.
func (c *cluster) allHolders() []kid {
	kids, _ := c.rec.snapshot()
	c.mu.Lock()
	holds, holdOf := c.copyHolds()
	c.mu.Unlock()
	return holders(kids, holds, holdOf)
}

// copyHolds copies the cluster's holds, for the checks, and maps each
// step's run to its hold's copy. c.mu must be held.
func (c *cluster) copyHolds() ([]*hold, map[int]*hold) {
	holdOf := map[int]*hold{}
	holds := make([]*hold, 0, len(c.holds))
	for _, h := range c.holds {
		cp := *h
		holds = append(holds, &cp)
		for _, r := range h.steps {
			holdOf[r.id] = &cp
		}
	}
	return holds, holdOf
}

// checkDrains checks each drain of hold-drain: it said 0 (or nothing
// held it up for long); from then until the resume nothing held a permit
// of the key, by the children's lines and the holds' spans; the step
// tried meanwhile refused; and the hold's release did not say 0.
func (c *cluster) checkDrains(fig *figures) {
	t := c.t
	held := c.allHolders()
	kids, _ := c.rec.snapshot()
	byRun := map[int]*kid{}
	for i := range kids {
		byRun[kids[i].run] = &kids[i]
	}
	c.mu.Lock()
	drains := make([]drainAct, 0, len(c.drains))
	for _, d := range c.drains {
		cp := *d
		cp.hold = new(hold)
		*cp.hold = *d.hold
		if d.refused != nil {
			r := *d.refused
			cp.refused = &r
		}
		if d.hold.release != nil {
			r := *d.hold.release
			cp.hold.release = &r
		}
		drains = append(drains, cp)
	}
	c.mu.Unlock()
	statuses, kinds := map[int]int{}, map[string]int{}
	var took []time.Duration
	breaches := 0
	for _, d := range drains {
		statuses[d.status]++
		kind := d.how + " " + d.mode
		if d.quiet {
			kind += " then silence"
		}
		kinds[kind]++
		h := d.hold
		if d.status != 0 {
			if !starved(statusFailure, d.start, d.exit) {
				fig.bad++
				t.Errorf("drain of %q after %s of hold %d's keeper %s: status %d after %v: %q", d.key, d.how, h.id, d.mode, d.status,
					time.Duration(d.exit-d.start).Round(time.Millisecond), d.stderr)
			}
			continue
		}
		took = append(took, time.Duration(d.exit-d.start))
		for _, k := range heldWhileDrained(held, d.key, d.exit, d.resumed) {
			breaches++
			t.Errorf("drain of %q said nobody held it at %s (after %s of hold %d's keeper %s), resumed at %s: yet %s held then",
				d.key, c.rel(d.exit), d.how, h.id, d.mode, c.rel(d.resumed), c.describe(k))
		}
		if d.refused != nil {
			if why := refusalVerdict(d.refused, byRun[d.refused.id]); why != "" {
				breaches++
				t.Errorf("hold %d on %q: step run %d under its handle at %s, once drain said nobody held the key: %s", h.id, d.key, d.refused.id, c.rel(d.refused.launched), why)
			}
		}
		if r := h.release; r != nil && r.status != statusLost {
			fig.bad++
			t.Errorf("hold %d on %q: release after drain said nobody held the key: status %d, want %d (lost): %q", h.id, d.key, r.status, statusLost, r.stderr)
		}
	}
	fig.overlaps += breaches
	var ks []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		ks = append(ks, fmt.Sprintf("%d %s", kinds[k], k))
	}
	var ss []string
	for _, s := range slices.Sorted(maps.Keys(statuses)) {
		ss = append(ss, fmt.Sprintf("%d×%d", statuses[s], s))
	}
	fig.faultNote = fmt.Sprintf("%d drains (%s): status %s, drained after p50 %v max %v; %d held while drained",
		len(drains), strings.Join(ks, ", "), strings.Join(ss, ", "), quantile(took, 0.5).Round(time.Millisecond), maxDur(took).Round(time.Millisecond), breaches)
}

// thaw is one act of hold-frozen-keeper.
type thaw struct {
	hold    *hold
	mode    string // thawed during the step, or after it
	frozen  time.Duration
	at      int64 // when the keeper was stopped, mono()
	step    *run
	release *run
}

// freezeKeeper is the hold-frozen-keeper nemesis: a hold of its own, a
// step under it whose child runs, and its keeper's group SIGSTOPped for
// 1.5 to 2.5 TTLs, past its own loss point. The step runs on a second or
// two past the thaw, but for the second act of a run and every third
// after, when it ends while the keeper is frozen. The step must keep its child and pass its status through (it
// renews the hold itself), and release then say 0, or, when nothing
// renewed the hold for a lease, that it was lost.
func freezeKeeper(c *cluster, rng *rand.Rand) fault {
	at := mono()
	h := c.ownHold(rng)
	if h == nil {
		return fault{what: "frozen keeper: no hold taken", start: at, heal: mono(), operator: true}
	}
	th := &thaw{hold: h, mode: "thawed during the step", frozen: ttl*3/2 + upTo(rng, ttl)}
	hold := th.frozen + time.Second + upTo(rng, time.Second)
	c.mu.Lock()
	after := len(c.thaws)%3 == 1 // the second of a run, and every third after
	c.mu.Unlock()
	if after {
		th.mode, hold = "thawed after the step", 300*time.Millisecond+upTo(rng, 500*time.Millisecond)
	}
	r := c.newRun(h.key, int(hold.Milliseconds()), rng.IntN(101))
	wait, err := c.startStep(h, r)
	if err != nil {
		c.t.Errorf("start semrun --handle: %v", err)
		return fault{what: "frozen keeper: no step", start: at, heal: mono(), operator: true}
	}
	th.step = r
	done := c.bg(wait)
	if !c.waitKid(r, done, hangBound) {
		c.t.Errorf("hold %d: the child of step run %d did not start within %v", h.id, r.id, hangBound)
	}
	time.Sleep(upTo(rng, 200*time.Millisecond))
	f := fault{start: mono(), operator: true}
	th.at = f.start
	if c.strikeKeeper(h, true) == "" {
		c.t.Errorf("hold %d: its keeper, pid %d, was gone before the nemesis froze it", h.id, h.keeper)
	}
	time.Sleep(th.frozen)
	thawKeeper(h)
	f.heal = mono()
	select {
	case <-done:
	case <-time.After(hangBound):
		c.t.Errorf("hold %d: step run %d still ran %v after its keeper was thawed; SIGKILLed", h.id, r.id, hangBound)
		_ = r.proc.Kill()
		<-done
	}
	th.release = c.releaseHold(h)
	f.what = fmt.Sprintf("SIGSTOP of hold %d's keeper for %v, %s", h.id, th.frozen.Round(time.Millisecond), th.mode)
	c.mu.Lock()
	c.thaws = append(c.thaws, th)
	c.mu.Unlock()
	return f
}

// thawVerdict says what is wrong with how a step and the release of a hold
// whose keeper was frozen ended, "" when nothing: the step's status is its
// child's, as the child said (its code in its E line); the release says 0,
// or, thawed after the step, 112 (lost). A starved machine excuses a 112
// or 125 (starved).
func thawVerdict(th thaw, k *kid, starved func(status int, from, to int64) bool) string {
	r, rel := th.step, th.release
	switch {
	case r == nil || r.proc == nil:
		return ""
	case starved(r.status, r.launched, r.exited):
	case k == nil:
		return fmt.Sprintf("the step exited %d and its child never started: %q", r.status, r.stderr)
	case k.how != "done" || r.status != k.code:
		return fmt.Sprintf("the step exited %d, its child ended %s saying it exits %d: a step renews its hold itself and passes its child's status through; its stderr: %q",
			r.status, k.how, k.code, r.stderr)
	}
	switch {
	case rel == nil || rel.proc == nil || rel.status == 0:
	case starved(rel.status, rel.launched, rel.exited):
	case th.mode == "thawed after the step" && rel.status == statusLost && strings.Contains(rel.stderr, "lost"):
	default:
		return fmt.Sprintf("release exited %d (%s): %q", rel.status, th.mode, rel.stderr)
	}
	return ""
}

// checkThaws checks each frozen keeper's step and release (thawVerdict);
// the overlap checks of every nemesis see whether a release that said 0
// had in fact lost its hold.
func (c *cluster) checkThaws(fig *figures) {
	kids, _ := c.rec.snapshot()
	byRun := map[int]*kid{}
	for i := range kids {
		byRun[kids[i].run] = &kids[i]
	}
	c.mu.Lock()
	thaws := make([]thaw, 0, len(c.thaws))
	for _, th := range c.thaws {
		cp := *th
		for _, p := range []**run{&cp.step, &cp.release} {
			if *p != nil {
				r := **p
				*p = &r
			}
		}
		thaws = append(thaws, cp)
	}
	c.mu.Unlock()
	ends := map[string]int{}
	for _, th := range thaws {
		var k *kid
		if th.step != nil {
			k = byRun[th.step.id]
		}
		rel := -2
		if th.release != nil {
			rel = th.release.status
		}
		ends[fmt.Sprintf("%s: release %d", th.mode, rel)]++
		if rel != 0 && th.release != nil {
			c.t.Logf("hold %d, %s: release said %d: %q", th.hold.id, th.mode, rel, th.release.stderr)
		}
		if why := thawVerdict(th, k, starved); why != "" {
			fig.bad++
			c.t.Errorf("hold %d on %q, its keeper frozen %v at %s, %s: %s", th.hold.id, th.hold.key, th.frozen.Round(time.Millisecond), c.rel(th.at), th.mode, why)
		}
	}
	var parts []string
	for _, e := range slices.Sorted(maps.Keys(ends)) {
		parts = append(parts, fmt.Sprintf("%d %s", ends[e], e))
	}
	fig.faultNote = fmt.Sprintf("%d keepers frozen past their loss point (%s)", len(thaws), strings.Join(parts, ", "))
}
