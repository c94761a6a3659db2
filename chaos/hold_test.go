//go:build linux

package chaos

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holds under the harness: semrun acquire, steps under its handle (semrun
// --handle), semrun release; the hold workload, its two nemeses
// (hold-kill9, hold-redis) and the checks of holds. The trials of
// hold-keeper, hold-ends and hold-acquire-kill are in holdtrials_test.go,
// hold-crowd in crowd_test.go. See the package comment.

// hold is one hold a worker or a trial took.
type hold struct {
	id    int
	key   string
	lease time.Duration // its --ttl
	// tag is its acquire's CHAOS_HOLD, which its keeper inherits: how the
	// harness finds a keeper whose pid nobody printed.
	tag     string
	acquire *run
	steps   []*run
	release *run
	// What acquire printed.
	handle string
	token  int64
	keeper int // pid
	// slots: what acquire printed ("slots"), or, when it printed none,
	// what its first step's child that started was told (holdSlots).
	slots []int
	// keeperKilled is when the nemesis SIGKILLed its keeper (mono()).
	keeperKilled int64
	inStep       bool // ...while a step of it ran
	// until, when set, is when the harness knows the hold still held its
	// permit (mono()); else the release's status says (see span).
	until int64
	// own: its trial judges its semruns, not checkHolds.
	own bool
}

const (
	// holdEnv names the hold of an acquire, and so of its keeper.
	holdEnv = "CHAOS_HOLD"
	// holdMaxRuntime is the workload's --max-runtime: a hold never lasts
	// that long unless its worker is gone.
	holdMaxRuntime = 30 * time.Second
	// stepGap bounds the pauses of a hold worker: after the grant, between
	// steps, before the release. The nemeses strike in them too.
	stepGap = 300 * time.Millisecond
)

// newHold records a hold to be taken on key with a lease of lease.
func (c *cluster) newHold(key string, lease time.Duration) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := &hold{id: len(c.holds) + 1, key: key, lease: lease}
	h.tag = fmt.Sprintf("%s/h%d", c.dir, h.id)
	c.holds = append(c.holds, h)
	return h
}

// holdOnce is a hold worker's turn: it takes a hold on key, runs one or
// two steps under it, and releases it.
func (c *cluster) holdOnce(key string, rng *rand.Rand) {
	h := c.newHold(key, ttl)
	wait, err := c.startAcquire(h, "--max-runtime", holdMaxRuntime.String())
	if err != nil {
		c.t.Errorf("start semrun acquire: %v", err)
		time.Sleep(100 * time.Millisecond)
		return
	}
	if wait(); c.handle(h) == "" {
		time.Sleep(100 * time.Millisecond) // its status is judged with the rest
		return
	}
	for range 1 + rng.IntN(2) {
		time.Sleep(upTo(rng, stepGap))
		c.step(h, childHold(rng), rng.IntN(101))
	}
	pause := upTo(rng, stepGap)
	if rng.IntN(4) == 0 {
		// Long enough for a hold nothing renews to lapse, and for another
		// worker to take its permit before the release.
		pause = ttl/2 + upTo(rng, ttl)
	}
	time.Sleep(pause)
	c.releaseHold(h)
}

// handle is what h's acquire printed, "" before it did.
func (c *cluster) handle(h *hold) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return h.handle
}

// startAcquire starts semrun acquire --json for h, with extra flags. wait
// waits for it to end and reads what it printed.
func (c *cluster) startAcquire(h *hold, extra ...string) (wait func(), err error) {
	r := c.newRun(h.key, 0, 0)
	c.mu.Lock()
	r.of, r.role, h.acquire = h, "acquire", r
	c.mu.Unlock()
	args := append([]string{"acquire", "-k", h.key, "-n", strconv.Itoa(c.permits), "--ttl", h.lease.String(),
		"--connect-timeout", c.connect.String(), "--json"}, extra...)
	w, err := c.spawn(r, args, holdEnv+"="+h.tag)
	if err != nil {
		return nil, err
	}
	return func() {
		w()
		c.mu.Lock()
		defer c.mu.Unlock()
		// A process a signal ended has no exit status (-1): what it
		// printed says whether it held.
		if (r.signal == 0 && r.status != 0) || (r.signal != 0 && r.stdout == "") {
			return
		}
		// One SIGKILLed once it printed the handle, and told its keeper
		// so, left a hold as much as one that exited.
		var out struct {
			Handle string `json:"handle"`
			Key    string `json:"key"`
			Token  int64  `json:"token"`
			Keeper int    `json:"keeper_pid"`
			Slots  []int  `json:"slots"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Handle == "" || out.Key != h.key || out.Token < 1 || out.Keeper < 1 {
			if r.signal == 0 {
				c.t.Errorf("semrun acquire on %q exited 0 and printed %q: want a hold of that key as JSON (%v)", h.key, r.stdout, err)
			}
			return
		}
		h.handle, h.token, h.keeper, h.slots = out.Handle, out.Token, out.Keeper, out.Slots
	}, nil
}

// startStep starts r, a step under h: its child under semrun --handle.
func (c *cluster) startStep(h *hold, r *run) (wait func(), err error) {
	c.mu.Lock()
	r.of, r.role = h, "step"
	h.steps = append(h.steps, r)
	handle := h.handle
	c.mu.Unlock()
	args := append([]string{"--handle", handle, "--kill-after", killAfter.String(), "--connect-timeout", c.connect.String(), "--"},
		c.childArgs(r)...)
	return c.spawn(r, args)
}

// step runs a step under h whose child holds for hold ms and exits with
// code, and returns it once it ended.
func (c *cluster) step(h *hold, hold, code int) *run {
	r := c.newRun(h.key, hold, code)
	wait, err := c.startStep(h, r)
	if err != nil {
		c.t.Errorf("start semrun --handle: %v", err)
		return r
	}
	wait()
	return r
}

// releaseHold runs semrun release for h, and returns it once it ended.
func (c *cluster) releaseHold(h *hold) *run {
	r, wait, err := c.startRelease(h)
	if err != nil {
		c.t.Errorf("start semrun release: %v", err)
		return r
	}
	wait()
	return r
}

// startRelease starts semrun release for h.
func (c *cluster) startRelease(h *hold) (*run, func(), error) {
	r := c.newRun(h.key, 0, 0)
	c.mu.Lock()
	r.of, r.role, h.release = h, "release", r
	handle := h.handle
	c.mu.Unlock()
	wait, err := c.spawn(r, []string{"release", "--connect-timeout", c.connect.String(), handle})
	return r, wait, err
}

// stopKeepers SIGKILLs every keeper of the cluster's holds still running:
// they outlive the semruns, and the test.
func (c *cluster) stopKeepers() {
	for pid := range keepers(c.dir + "/") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// keepers returns the keepers running whose CHAOS_HOLD starts with
// prefix, by pid, with their tag. A zombie has no environment left, and is
// not one.
func keepers(prefix string) map[int]string {
	out := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if tag, ok := keeperTag(pid); ok && strings.HasPrefix(tag, prefix) {
			out[pid] = tag
		}
	}
	return out
}

// keeperTag is the CHAOS_HOLD of pid if it is a running semrun keeper.
func keeperTag(pid int) (string, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return "", false
	}
	if argv := bytes.Split(cmdline, []byte{0}); len(argv) < 2 || string(argv[1]) != "keeper" {
		return "", false
	}
	env, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		return "", false
	}
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if tag, ok := bytes.CutPrefix(kv, []byte(holdEnv+"=")); ok {
			return string(tag), true
		}
	}
	return "", false
}

// keeperGone waits, for at most d, until the keeper pid of tag is gone
// (or a zombie), and returns when it saw it gone, 0 if it never did.
func keeperGone(pid int, tag string, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		if t, ok := keeperTag(pid); !ok || t != tag {
			return mono()
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// liveHolds returns the holds whose keeper is known and runs, not yet
// killed, whose release has not started.
func (c *cluster) liveHolds() []*hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*hold
	for _, h := range c.holds {
		if h.keeper != 0 && h.keeperKilled == 0 && h.release == nil && !h.own {
			out = append(out, h)
		}
	}
	return out
}

// stepRuns tells whether the child of a step runs.
func (c *cluster) stepRuns() bool {
	c.mu.Lock()
	var steps []int
	for _, h := range c.holds {
		for _, r := range h.steps {
			if r.exited == 0 {
				steps = append(steps, r.id)
			}
		}
	}
	c.mu.Unlock()
	for _, id := range steps {
		if k, ok := c.rec.get(id); ok && k.end == 0 {
			return true
		}
	}
	return false
}

// killKeeper SIGKILLs h's keeper, if it is still h's, and notes when and
// whether a step of h ran then.
func (c *cluster) killKeeper(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := keeperTag(h.keeper); !ok || t != h.tag {
		return false
	}
	at := mono()
	if syscall.Kill(h.keeper, syscall.SIGKILL) != nil {
		return false
	}
	h.keeperKilled = at
	for _, s := range h.steps {
		if s.exited == 0 {
			h.inStep = true
		}
	}
	return true
}

// killKeepers is the hold-kill9 nemesis: SIGKILL of the keeper of a hold
// under way (and of each other one, by the toss of a coin), whether a step
// of it runs or not.
func killKeepers(c *cluster, rng *rand.Rand) fault {
	deadline := time.Now().Add(2 * ttl)
	live := c.liveHolds()
	for len(live) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		live = c.liveHolds()
	}
	at := mono()
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	var what []string
	for i, h := range live {
		if i > 0 && rng.IntN(2) == 0 {
			continue
		}
		if c.killKeeper(h) {
			c.mu.Lock()
			where := "between steps"
			if h.inStep {
				where = "during a step"
			}
			c.mu.Unlock()
			what = append(what, fmt.Sprintf("hold %d's (pid %d) %s", h.id, h.keeper, where))
		}
	}
	if len(what) == 0 {
		what = append(what, "no hold under way")
	}
	return fault{what: "SIGKILL keeper: " + strings.Join(what, ", "), start: at, heal: mono()}
}

// pauseOrRestart is the hold-redis nemesis: by the toss of a coin, Redis
// paused (SIGSTOP) for 0.5 to 3 TTLs or restarted empty, once a step runs
// (or a TTL has passed).
func pauseOrRestart(c *cluster, rng *rand.Rand) fault {
	deadline := time.Now().Add(ttl)
	for !c.stepRuns() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if rng.IntN(2) == 0 {
		return pauseRedis(c, rng, 0)
	}
	return restartRedis(c, rng)
}

// span is the time the harness knows h held its permit: from its acquire's
// exit until until, or until its release started when the release gave
// the permit back (status 0, and no other end of the hold before it).
func span(h *hold) (from, to int64, ok bool) {
	if h.acquire == nil || h.handle == "" {
		return 0, 0, false
	}
	from, to = h.acquire.exited, h.until
	if r := h.release; to == 0 && r != nil && r.signal == 0 && r.status == 0 &&
		(!strings.Contains(r.stderr, "before this release") || strings.Contains(r.stderr, "was released: semrun release")) {
		to = r.launched // an earlier try of this release may have given it back
	}
	return from, to, to > from
}

// holders turns the children into holders of permits. Each hold holds one
// permit with one token, its steps' children included: over its span when
// known, else from its first step's start to its last one's end (a step
// that started found the hold alive, so it held since the step before).
// What its steps ran outside its span counts as one more interval of it.
// The overlap and token checks run on what it returns.
func holders(kids []kid, holds []*hold, byRun map[int]*hold) []kid {
	out := make([]kid, 0, len(kids)+len(holds))
	spans := map[int][2]int64{}
	for _, h := range holds {
		if from, to, ok := span(h); ok {
			spans[h.id] = [2]int64{from, to}
			out = append(out, kid{run: -h.id, hold: h.id, key: h.key, token: h.token, start: from, end: to, how: "hold", slots: h.slots, slotted: h.slots != nil})
		}
	}
	steps := map[int]*kid{} // by hold: its steps outside its span, as one
	var order []int
	for _, k := range kids {
		h := byRun[k.run]
		if h == nil {
			out = append(out, k)
			continue
		}
		k.hold = h.id
		if s, ok := spans[h.id]; ok && k.start >= s[0] && k.start < s[1] {
			if k.end != 0 && k.end <= s[1] {
				continue // inside its hold's span
			}
			k.start = s[1]
		}
		m := steps[h.id]
		if m == nil {
			steps[h.id], order = &k, append(order, h.id)
			continue
		}
		m.start = min(m.start, k.start)
		if m.end != 0 && (k.end == 0 || k.end > m.end) {
			m.end = k.end
		}
	}
	for _, id := range order {
		out = append(out, *steps[id])
	}
	return out
}

// holdSlots gives each hold whose acquire printed no slots those its
// first step's child that started was told, and returns the steps told
// other slots than their hold's: a hold keeps its slots for every step.
func holdSlots(kids []kid, byRun map[int]*hold) []slotFault {
	var out []slotFault
	steps := slices.Clone(kids)
	slices.SortFunc(steps, func(a, b kid) int { return cmp.Compare(a.start, b.start) })
	for _, k := range steps {
		h := byRun[k.run]
		if h == nil || !k.slotted {
			continue
		}
		switch {
		case h.slots == nil:
			h.slots = k.slots
		case !slices.Equal(h.slots, k.slots):
			out = append(out, slotFault{k, fmt.Sprintf("a step of hold %d was told slots %v of %q, the hold's are %v", h.id, k.slots, h.key, h.slots)})
		}
	}
	return out
}

// checkHolds checks the holds' own promises and counts their statuses:
// each step has its hold's token; each semrun of a hold ended as it may;
// a release that said 0 held the permit over the hold's span (checked with
// the other holders) and was not of a hold Redis lost for sure (restarted
// empty while it held).
func (c *cluster) checkHolds(fig *figures, n nemesis, holds []*hold, byRun map[int]*kid, faults []fault) {
	if fig.roles == nil {
		fig.roles = map[string]map[int]int{}
	}
	reported := 0
	for _, h := range holds {
		if h.acquire != nil && h.handle != "" {
			fig.holds++
		}
		if h.keeperKilled != 0 {
			fig.keeperKills++
			if h.inStep {
				fig.keeperKillsInStep++
			}
		}
		for _, r := range h.runs() {
			if r.proc == nil {
				continue
			}
			role, status := r.role, r.status
			if k := byRun[r.id]; r.role == "step" && k != nil {
				role = "step ran"
				if k.how == "done" && r.status == r.code {
					status = passedThrough
				}
			}
			if fig.roles[role] == nil {
				fig.roles[role] = map[int]int{}
			}
			fig.roles[role][status]++
		}
		for _, r := range h.steps {
			if k := byRun[r.id]; k != nil && k.token != h.token {
				fig.bad++
				c.t.Errorf("step run %d of hold %d on %q: its child had token %d, its hold %d", r.id, h.id, h.key, k.token, h.token)
			}
		}
		if h.own {
			continue
		}
		for _, why := range c.judgeHold(h, byRun, faults, n.excuses) {
			fig.bad++
			if reported++; reported <= 10 {
				c.t.Errorf("hold %d on %q (acquired %s, released %s): %s", h.id, h.key, c.relRun(h.acquire, true), c.relRun(h.release, false), why)
			}
		}
	}
	if reported > 10 {
		c.t.Errorf("... and %d more semruns of holds that ended wrong", reported-10)
	}
}

// runs are h's semruns in order.
func (h *hold) runs() []*run {
	out := []*run{h.acquire}
	out = append(out, h.steps...)
	out = append(out, h.release)
	return slices.DeleteFunc(out, func(r *run) bool { return r == nil })
}

// relRun shows when r exited (or started) for a report.
func (c *cluster) relRun(r *run, exited bool) string {
	switch {
	case r == nil || r.proc == nil:
		return "never"
	case exited:
		return c.rel(r.exited)
	}
	return c.rel(r.launched)
}

// judgeHold says what is wrong with how the semruns of h ended. A step's
// child holds its hold's token and passes its status through, as a run's;
// a step that did not start is lost (112) only when its hold may have been:
// its keeper was SIGKILLed, or a fault of Redis came near. The same goes
// for release: 0, or 112 when the hold may have been lost; 125 when Redis
// was out of reach, or restarted empty since the grant (the hold unknown). A release's 0 is checked with the holders (span), and
// fails here when Redis restarted empty during the hold. A machine too
// slow (starved) excuses 112 and 125 as a fault would.
func (c *cluster) judgeHold(h *hold, byRun map[int]*kid, faults []fault, excuses bool) []string {
	excused := func(from, to int64) bool {
		for _, f := range faults {
			if excuses && !f.operator && from <= f.heal+int64(ttl) && to >= f.start {
				return true
			}
		}
		return machine.lag(from, to) >= starvedLag
	}
	a := h.acquire
	if a == nil || a.proc == nil {
		return nil
	}
	var out []string
	end := a.exited
	if h.release != nil {
		end = max(end, h.release.exited)
	}
	lost := h.keeperKilled != 0 || excused(a.launched, end)
	// Redis restarted empty after the grant: the hold's record went with
	// everything else, and a step or release under its handle is told the
	// store does not know the hold (125), as it is for a made-up handle.
	forgotten := func(r *run) bool {
		if r.status != statusFailure || !strings.Contains(r.stderr, "is unknown to the store") {
			return false
		}
		for _, f := range faults {
			if f.restart && f.start >= a.launched && f.start <= r.exited {
				return true
			}
		}
		return false
	}
	switch {
	case a.killed && a.signal == syscall.SIGKILL:
		return nil // by the nemesis
	case a.signal != 0:
		out = append(out, fmt.Sprintf("acquire died of signal %d", a.signal))
	case a.status == 0 && h.handle == "":
		out = append(out, "acquire exited 0 without a handle")
	case a.status == statusLost || a.status == statusFailure:
		if !excused(a.launched, a.exited) {
			out = append(out, fmt.Sprintf("acquire exited %d with no fault to explain it; its stderr: %q", a.status, a.stderr))
		}
	case a.status != 0:
		out = append(out, fmt.Sprintf("acquire exited %d; its stderr: %q", a.status, a.stderr))
	}
	for _, r := range h.steps {
		if r.proc == nil {
			continue
		}
		k := byRun[r.id]
		switch {
		case k != nil && k.token != h.token:
			// checkHolds reports it.
		case k != nil:
			if why := judge(*r, k, excused(r.launched, r.exited)); why != "" {
				out = append(out, fmt.Sprintf("step run %d from %s to %s: %s; child %s; its stderr: %q", r.id, c.rel(r.launched), c.rel(r.exited), why, c.describe(*k), r.stderr))
			}
		case r.status == statusLost && lost:
		case r.status == statusFailure && excused(r.launched, r.exited):
		case forgotten(r):
		default:
			out = append(out, fmt.Sprintf("step run %d from %s to %s: status %d and its child never started; its stderr: %q", r.id, c.rel(r.launched), c.rel(r.exited), r.status, r.stderr))
		}
	}
	r := h.release
	if r == nil || r.proc == nil {
		return out
	}
	switch {
	case r.signal != 0:
		out = append(out, fmt.Sprintf("release died of signal %d", r.signal))
	case r.status == 0:
		if from, to, ok := span(h); !ok {
			out = append(out, fmt.Sprintf("release exited 0 after another end of the hold: %q", r.stderr))
		} else {
			for _, f := range faults {
				if f.restart && from < f.start && to > f.heal {
					out = append(out, fmt.Sprintf("release exited 0, yet Redis restarted empty (%s..%s) while the hold held (from %s to %s): it was lost",
						c.rel(f.start), c.rel(f.heal), c.rel(from), c.rel(to)))
				}
			}
		}
	case r.status == statusLost && lost:
	case r.status == statusFailure && excused(r.launched, r.exited):
	case forgotten(r):
	default:
		out = append(out, fmt.Sprintf("release from %s to %s exited %d; its stderr: %q", c.rel(r.launched), c.rel(r.exited), r.status, r.stderr))
	}
	return out
}

// keepersLeft waits, for at most d and the machine's allowance meanwhile,
// until no keeper of the cluster runs but those of skip, then SIGKILLs the
// rest and reports each.
func (c *cluster) keepersLeft(d time.Duration, skip map[string]bool) int {
	from := mono()
	for {
		left := keepers(c.dir + "/")
		maps.DeleteFunc(left, func(_ int, tag string) bool { return skip[tag] })
		if len(left) == 0 {
			return 0
		}
		if now := mono(); now > from+int64(d+machine.allowance(from, now)) {
			d += machine.allowance(from, now)
			c.mu.Lock()
			byTag := map[string]*hold{}
			for _, h := range c.holds {
				byTag[h.tag] = h
			}
			c.mu.Unlock()
			for pid, tag := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				h := byTag[tag]
				c.t.Errorf("keeper pid %d of hold %d on %q still ran %v after the workers were done: acquired %s, released %s with %q",
					pid, h.id, h.key, d, c.relRun(h.acquire, true), c.relRun(h.release, false), h.releaseStderr())
			}
			return len(left)
		}
		time.Sleep(100 * time.Millisecond) // a look at every process: not too often
	}
}

// releaseStderr is what h's release said, "" if none ran.
func (h *hold) releaseStderr() string {
	if h.release == nil {
		return ""
	}
	return h.release.stderr
}

// liveHolders counts a key's holders whose lease has not lapsed on Redis's
// clock, in one step, so that no grant or sweep comes between the reading
// of the clock and the count: {count, now in ms}.
var liveHolders = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'), now}
`)

// watchHolders counts, every 50ms until stop is called, the holders Redis
// has of each key: never more than N, hold or run. stop returns how many
// samples counted more, and the first few.
func (c *cluster) watchHolders() (stop func() (int, []string)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	over, first := 0, []string(nil)
	go func() {
		defer close(done)
		rc := c.client()
		for ctx.Err() == nil {
			for _, key := range c.keys {
				callCtx, cancelCall := context.WithTimeout(ctx, 500*time.Millisecond)
				res, err := liveHolders.Run(callCtx, rc, []string{"semrun:{" + key + "}:holders"}).Int64Slice()
				cancelCall()
				if err != nil || len(res) != 2 || res[0] <= int64(c.permitsOf(key)) {
					continue
				}
				over++
				if len(first) < 5 {
					first = append(first, fmt.Sprintf("%d holders of %q at %s", res[0], key, c.rel(mono())))
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() (int, []string) {
		cancel()
		<-done
		return over, first
	}
}

// overbookedCheck stops the sampling of Redis's holders and fails for
// every sample that counted more than N.
func (f *figures) overbookedCheck(t *testing.T, stop func() (int, []string)) {
	t.Helper()
	over, first := stop()
	f.overbooked = over
	if over > 0 {
		t.Errorf("Redis counted more holders than permits in %d samples: %s", over, strings.Join(first, "; "))
	}
}

// passedThrough counts, among the statuses of steps, those that were
// their child's.
const passedThrough = -1000

// holdNote shows the holds' figures: statuses by role, keeper kills,
// samples of Redis over N, keepers left.
func (f *figures) holdNote() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d holds", f.holds)
	for _, role := range []string{"acquire", "step ran", "step", "release"} {
		st := f.roles[role]
		if len(st) == 0 {
			continue
		}
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(st)) {
			switch code {
			case passedThrough:
				parts = append(parts, fmt.Sprintf("%d its child's status", st[code]))
			case -1:
				parts = append(parts, fmt.Sprintf("%d killed", st[code]))
			default:
				parts = append(parts, fmt.Sprintf("%d×%d", st[code], code))
			}
		}
		name := role
		if role == "step" {
			name = "step not started"
		}
		fmt.Fprintf(&b, "; %s: %s", name, strings.Join(parts, ", "))
	}
	if f.keeperKills > 0 {
		fmt.Fprintf(&b, "; %d keepers SIGKILLed, %d during a step", f.keeperKills, f.keeperKillsInStep)
	}
	fmt.Fprintf(&b, "; %d samples of Redis over N; %d keepers left", f.overbooked, f.keepersLeft)
	return b.String()
}
