//go:build linux

package chaos

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// An operator's hand on a key under load (semrun key; semantics, section
// 10): the key-revoke and key-pause nemeses and their checks. The
// operator's commands reach the redis-server itself, never through the
// proxy: an operator is not where the workers are. See the package
// comment.

const (
	// learnWithin: a holder revoked while Redis answers stops its command
	// within this of the revoke: at its next renewal, a third of the TTL
	// later, and a margin, machines being noisy (and the machine's
	// allowance, lag_test.go).
	learnWithin = ttl/3 + 600*time.Millisecond
	// victimLeft: key-revoke picks a holder whose child has at least this
	// much of its hold left, so that the child runs past the next renewal
	// and must be stopped.
	victimLeft = learnWithin + 300*time.Millisecond
	// opBound bounds every command of the operator: it only catches a
	// hang.
	opBound = 30 * time.Second
	// opConnect is the --connect-timeout of the operator's commands but
	// revoke's: Redis answers them (no fault is under way), however
	// slowly a loaded machine starts them. A revoke has the workers'
	// connectTimeout: sent while Redis is stopped, it may give up.
	opConnect = 20 * time.Second
	// The reasons the operator gives.
	revokeReason = "chaos revoke"
	pauseReason  = "chaos pause"
)

// revocation is one revoke of key-revoke.
type revocation struct {
	key  string
	id   string // the holder's public id, from semrun status --json
	run  *run
	kind string // see revokeKinds
	// bySlot: it was sent as key revoke --slot slot, the slot semrun
	// status --json showed the holder holding (else --holder id); others
	// are the runs whose child held that slot around it, whom it may have
	// hit had the holder ended first (slotTargets).
	bySlot bool
	slot   int
	others []int
	// The revoke command's: when it ran (mono()), and its status: 0
	// revoked, 1 no holder with that id, -1 killed at opBound, else 125.
	start, end int64
	status     int
	stderr     string
	// What watchRevoked saw, on Redis's clock in ms: the last time the
	// holder was still live once its semrun had exited, and the first
	// time it was not (0: never seen).
	lastLive, firstFree int64
}

// opFaultTime is how long the faults of key-revoke and the pauses of
// key-pause last: 0.5 to 1.5 TTLs, shorter than faultTime so that the
// short run makes more of them. Half a TTL of Redis stopped costs a
// holder its next renewal; more than two thirds, its permit.
func opFaultTime(rng *rand.Rand) time.Duration { return ttl/2 + upTo(rng, ttl) }

// revokeKinds: what comes with a revoke. A fault of Redis within a third
// of a TTL of it lands before the holder's next renewal.
var revokeKinds = []string{"alone", "then SIGSTOP", "then blackhole", "during SIGSTOP"}

// keyPause is one pause of key-pause.
type keyPause struct {
	key  string
	kind string // see pauseKinds
	// ack is when the pause (or drain) command exited, mono(); ackWall
	// the same in µs of the wall clock, as tokens count.
	ack, ackWall int64
	// endWall, µs: from then on the key may grant again (resume's start,
	// or a timed pause's end at the latest).
	endWall int64
	// drained is a drain's exit, mono(): nobody held the key then.
	drained int64
	// line is the runs in line, by place, read while the key was paused;
	// nil when it could not be read in time.
	line []int
}

// pauseKinds: a pause ended by semrun key resume; a drain (a pause that
// waits until nobody holds the key), resumed the same way; a pause --for
// D, which ends by itself.
var pauseKinds = []string{"pause", "drain", "pause --for"}

// wall turns a mono() time into the wall clock, in ns: Redis's clock,
// which fencing tokens (in µs) and leases (in ms) count.
func (c *cluster) wall(m int64) int64 { return m + c.wallOff }

// opResult is how a command of the operator ended.
type opResult struct {
	status         int // -1: killed at its bound
	stdout, stderr string
	start, end     int64 // mono()
}

// operate runs semrun ARGS as an operator does, straight to the
// redis-server, with --connect-timeout connect, for at most d.
func (c *cluster) operate(d, connect time.Duration, args ...string) opResult {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append(slices.Clone(args), "--connect-timeout", connect.String())...)
	cmd.Env = append(slices.Clone(c.env), "SEMRUN_REDIS_URL="+c.srv.URL())
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	res := opResult{start: mono()}
	err := cmd.Run()
	res.end = mono()
	res.stdout, res.stderr = stdout.String(), strings.TrimSpace(stderr.String())
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.status = ee.ExitCode() // -1 when a signal ended it
	default:
		res.status, res.stderr = -1, err.Error()
	}
	return res
}

// keyStatus reads key's status as an operator does: semrun status --json.
func (c *cluster) keyStatus(key string) (semaphore.KeyStatus, opResult, error) {
	res := c.operate(opBound, opConnect, "status", "--json", key)
	if res.status != 0 {
		return semaphore.KeyStatus{}, res, fmt.Errorf("semrun status exited %d: %q", res.status, res.stderr)
	}
	var st []semaphore.KeyStatus
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil || len(st) != 1 || st[0].Key != key {
		return semaphore.KeyStatus{}, res, fmt.Errorf("semrun status --json printed %q (%v), want key %q", res.stdout, err, key)
	}
	return st[0], res, nil
}

// revokeHolder is the key-revoke nemesis: semrun key revoke, without
// --force, of a holder whose child runs, its id read from semrun status
// --json; then, three times in four, another such revoke, followed by a
// SIGSTOP of Redis or a blackhole of the proxy, or sent while Redis is
// SIGSTOPped.
func revokeHolder(c *cluster, rng *rand.Rand) fault {
	key := c.keys[rng.IntN(len(c.keys))]
	var f fault
	if rv := c.revokeVictim(key, rng, true); rv != nil {
		rv.kind = "alone"
		c.revoke(rv)
		f = c.revokeFault(rv)
	} else {
		f = noVictim()
	}
	kind := revokeKinds[rng.IntN(len(revokeKinds))]
	if kind == "alone" {
		return f
	}
	c.addFault(f)
	// A revoke sent while Redis is stopped may run once it wakes, after
	// the command gave up: whoever holds the slot then is unknown, so
	// that one names the holder.
	rv := c.revokeVictim(key, rng, kind != "during SIGSTOP")
	switch {
	case rv == nil:
		return noVictim()
	case kind == "during SIGSTOP":
		rv.kind = kind
		d := opFaultTime(rng)
		f := fault{what: fmt.Sprintf("SIGSTOP %v", d.Round(time.Millisecond)), start: mono()}
		if err := c.srv.Pause(); err != nil {
			c.t.Errorf("pause redis-server: %v", err)
		}
		done := make(chan struct{})
		go func() { defer close(done); c.revoke(rv) }()
		time.Sleep(d)
		if err := c.srv.Resume(); err != nil {
			c.t.Errorf("resume redis-server: %v", err)
		}
		f.heal = mono()
		<-done // within opBound
		c.addFault(c.revokeFault(rv))
		return f
	}
	rv.kind = kind
	c.revoke(rv)
	c.addFault(c.revokeFault(rv))
	time.Sleep(upTo(rng, ttl/3))
	if kind == "then SIGSTOP" {
		return pauseRedis(c, rng, opFaultTime(rng))
	}
	return blackhole(c, rng, opFaultTime(rng))
}

// noVictim is the fault of a revoke that found nobody to revoke.
func noVictim() fault {
	at := mono()
	return fault{what: fmt.Sprintf("revoke: no child with %v of its hold left", victimLeft.Round(time.Millisecond)), start: at, heal: at, operator: true}
}

// revokeFault is rv as a fault: an operator's act, which excuses nothing.
func (c *cluster) revokeFault(rv *revocation) fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fault{what: fmt.Sprintf("revoke of run %d (holder %s, %s): status %d", rv.run.id, rv.id, rv.kind, rv.status),
		start: rv.start, heal: rv.end, operator: true}
}

// revokeVictim waits, for at most a TTL, for a child of key with at least
// victimLeft of its hold left, and finds its semrun among the holders
// semrun status --json lists. It marks the run revoked before the revoke
// is sent (the run may end with 113 before the command does), and
// returns the revoke to make, nil when it found no victim. When slotOK,
// every other revoke, the first included, is by one of the holder's
// slots, picked at random.
func (c *cluster) revokeVictim(key string, rng *rand.Rand, slotOK bool) *revocation {
	deadline := time.Now().Add(ttl)
	for time.Now().Before(deadline) {
		now := mono()
		var cands []*run
		for _, k := range c.rec.running() {
			if k.key != key {
				continue
			}
			if r := c.runningRun(k.run); r != nil && r.of == nil && !c.isRevoked(r) && k.start+int64(r.hold)*int64(time.Millisecond)-now >= int64(victimLeft) {
				cands = append(cands, r)
			}
		}
		if len(cands) > 0 {
			st, _, err := c.keyStatus(key)
			if err != nil {
				c.t.Errorf("read the holders of %q: %v", key, err)
				return nil
			}
			r := cands[rng.IntN(len(cands))]
			if i := slices.IndexFunc(st.Holders, func(h semaphore.Holder) bool { return h.PID == r.proc.Pid }); i >= 0 {
				rv := &revocation{key: key, id: st.Holders[i].ID, run: r}
				c.mu.Lock()
				if slots := st.Holders[i].Numbers; slotOK && len(slots) > 0 && len(c.revokes)%2 == 0 {
					rv.bySlot, rv.slot = true, slots[rng.IntN(len(slots))]
				}
				r.revoked = true
				c.revokes = append(c.revokes, rv)
				c.mu.Unlock()
				return rv
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// isRevoked tells whether a revoke was aimed at r already.
func (c *cluster) isRevoked(r *run) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.revoked
}

// revoke sends rv (semrun key revoke), and starts watching its permit.
func (c *cluster) revoke(rv *revocation) {
	by := []string{"--holder", rv.id}
	if rv.bySlot {
		by = []string{"--slot", strconv.Itoa(rv.slot)}
	}
	res := c.operate(opBound, connectTimeout, append(append([]string{"key", "revoke", rv.key}, by...), "--reason", revokeReason)...)
	c.mu.Lock()
	rv.start, rv.end, rv.status, rv.stderr = res.start, res.end, res.status, res.stderr
	c.mu.Unlock()
	if rv.kind != "during SIGSTOP" && res.status != 0 && res.status != 1 && !starved(res.status, res.start, res.end) {
		c.t.Errorf("semrun key revoke %s %s, Redis answering: status %d: %q", rv.key, strings.Join(by, " "), res.status, res.stderr)
	}
	c.watching.Add(1)
	go c.watchRevoked(rv)
}

// liveIDs returns Redis's clock (ms) and the permit ids of a key's holders
// whose lease has not lapsed, in one step.
var liveIDs = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
table.insert(ids, 1, tostring(now))
return ids
`)

// publicID is the id semrun status shows of the holder of permit id: the
// first 10 hex digits of its SHA-1 (publicID in lib.lua).
func publicID(id string) string {
	sum := sha1.Sum([]byte(id))
	return hex.EncodeToString(sum[:])[:10]
}

// watchRevoked waits for rv's semrun to exit, then asks Redis every 50ms
// whether the holder revoked is still live, until it is not, for at most
// 8 TTLs: lastLive and firstFree.
func (c *cluster) watchRevoked(rv *revocation) {
	defer c.watching.Done()
	for deadline := time.Now().Add(16 * ttl); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		exited := rv.run.exited
		c.mu.Unlock()
		if exited != 0 {
			break
		}
		if time.Now().After(deadline) {
			return // checkRevokes reports a permit never seen free
		}
	}
	rc := c.client()
	for deadline := time.Now().Add(8 * ttl); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		res, err := liveIDs.Run(ctx, rc, []string{"semrun:{" + rv.key + "}:holders"}).StringSlice()
		cancel()
		if err != nil || len(res) == 0 {
			continue
		}
		now, err := strconv.ParseInt(res[0], 10, 64)
		if err != nil {
			continue
		}
		live := slices.ContainsFunc(res[1:], func(id string) bool { return publicID(id) == rv.id })
		c.mu.Lock()
		if live {
			rv.lastLive = now
		} else {
			rv.firstFree = now
		}
		c.mu.Unlock()
		if !live {
			return
		}
	}
}

// slotTargets marks revoked the runs that a revoke by slot may have hit
// besides its victim: had the victim ended before it, whoever held the
// slot then. Those are the children of the key told that slot that ran
// from the revoke's start until learnWithin after its end (a child starts
// a moment after its grant). judge then excuses their 113; the victim's
// own end is revokeVerdict's.
func (c *cluster) slotTargets(byRun map[int]*kid) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rv := range c.revokes {
		if !rv.bySlot || rv.status != 0 {
			continue
		}
		rv.others = nil
		for _, k := range byRun {
			if k.run == rv.run.id || k.key != rv.key || !slices.Contains(k.slots, rv.slot) ||
				k.start >= rv.end+int64(learnWithin) || k.end != 0 && k.end <= rv.start {
				continue
			}
			if r := c.runs[k.run]; r != nil {
				r.revoked, rv.others = true, append(rv.others, k.run)
			}
		}
	}
}

// underFault tells whether a fault of Redis (not an operator's act) came
// between from and a TTL after to.
func underFault(faults []fault, from, to int64) bool {
	return slices.ContainsFunc(faults, func(f fault) bool {
		return !f.operator && f.start <= to && f.heal+int64(ttl) >= from
	})
}

// freeBound is when the permit of a holder that let go at exit (mono()) is
// free at the latest: a TTL later (its last renewal was before), and a
// margin; or, when a fault of Redis came before then, a TTL after it
// healed: a silent key's leases are pushed back on its first call after
// (rebase in lib.lua).
func freeBound(faults []fault, exit int64) int64 {
	grace := int64(ttl + trialSlack)
	bound := exit + grace
	fs := slices.Clone(faults)
	slices.SortFunc(fs, func(a, b fault) int { return cmp.Compare(a.start, b.start) })
	for _, f := range fs {
		if !f.operator && f.start <= bound && f.heal+grace > bound {
			bound = f.heal + grace
		}
	}
	return bound
}

// revokeVerdict says what is wrong with how r ended, revoked by rv, ""
// when nothing. judge has judged its status already (113 only for a run
// revoked); this asks more of a revoke that the command confirmed (status
// 0) with no fault of Redis near (excused): that the child was stopped
// within learnWithin of it and semrun exited 113 naming the reason, or
// that the child ended by itself before then, with its own status.
func revokeVerdict(rv revocation, r run, k *kid, excused bool, allow time.Duration) string {
	learnBy := rv.end + int64(learnWithin+allow)
	switch {
	case rv.status != 0 || excused || r.killed || r.signal != 0:
		return ""
	case k == nil:
		return fmt.Sprintf("exited %d, and its child never said it started", r.status)
	case r.status == statusRevoked && k.end > learnBy:
		return fmt.Sprintf("exited 113, but its child ended %v after the revoke, want within %v (its next renewal, and %v for the machine)", time.Duration(k.end-rv.end).Round(time.Millisecond), learnWithin.Round(time.Millisecond), allow.Round(time.Millisecond))
	case r.status == statusRevoked && !strings.Contains(r.stderr, "revoked it: "+revokeReason):
		return fmt.Sprintf("exited 113 without naming the operator's reason %q: %q", revokeReason, r.stderr)
	case r.status == statusRevoked:
		return ""
	case k.how == "done" && r.status == r.code && k.end <= learnBy:
		return "" // its child ended by itself before its next renewal
	}
	return fmt.Sprintf("exited %d, its child ended %s %v after the revoke: want 113, the child stopped at the next renewal (within %v, and %v for the machine)",
		r.status, k.how, time.Duration(k.end-rv.end).Round(time.Millisecond), learnWithin.Round(time.Millisecond), allow.Round(time.Millisecond))
}

// checkRevokes checks what followed each revoke (revokeVerdict), and
// that the permit of each holder revoked was free within freeBound of its
// semrun's exit.
func (c *cluster) checkRevokes(fig *figures) {
	t := c.t
	c.watching.Wait()
	kids, _ := c.rec.snapshot()
	byRun := map[int]*kid{}
	for i := range kids {
		byRun[kids[i].run] = &kids[i]
	}
	c.mu.Lock()
	type pair struct {
		rv revocation
		r  run
	}
	var all []pair
	bySlot, othersHit := 0, 0
	for _, rv := range c.revokes {
		all = append(all, pair{*rv, *rv.run})
		if rv.bySlot {
			bySlot++
		}
		for _, id := range rv.others {
			if r := c.runs[id]; r != nil && r.status == statusRevoked {
				othersHit++
			}
		}
	}
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	counts := map[string]int{}
	var stopped, free []time.Duration
	for _, p := range all {
		rv, r, k := p.rv, p.r, byRun[p.r.id]
		excused := underFault(faults, rv.start, r.exited)
		if rv.bySlot && k != nil && k.slotted && !slices.Contains(k.slots, rv.slot) {
			fig.slotFaults++
			t.Errorf("run %d on %q: semrun status --json showed its holder %s holding slot %d, its child was told slots %v",
				r.id, r.key, rv.id, rv.slot, k.slots)
		}
		switch {
		case rv.status != 0:
			counts[fmt.Sprintf("revoke status %d", rv.status)]++
			t.Logf("revoke of run %d (holder %s, %s) from %s to %s: status %d, %q; the run ended %s with %d; faults near: %s",
				r.id, rv.id, rv.kind, c.rel(rv.start), c.rel(rv.end), rv.status, rv.stderr, c.rel(r.exited), r.status, c.faultsNear(rv.end))
		case r.status == statusRevoked:
			counts["113"]++
		case r.status == statusLost:
			counts["112"]++
		case k != nil && k.how == "done" && r.status == r.code:
			counts["ended first"]++
		default:
			counts[fmt.Sprintf("status %d", r.status)]++
		}
		if rv.status == 0 && r.status == statusRevoked && k != nil && !excused {
			stopped = append(stopped, time.Duration(k.end-rv.end))
		}
		allow := time.Duration(0)
		if k != nil {
			allow = machine.allowance(rv.start, k.end)
		}
		if why := revokeVerdict(rv, r, k, excused, allow); why != "" {
			fig.bad++
			t.Errorf("run %d on %q, revoked (%s) from %s to %s, ended %s: %s; faults near: %s; its stderr: %q",
				r.id, r.key, rv.kind, c.rel(rv.start), c.rel(rv.end), c.rel(r.exited), why, c.faultsNear(rv.end), r.stderr)
		}
		if r.exited == 0 {
			continue
		}
		exitMs := c.wall(r.exited) / int64(time.Millisecond)
		bound := freeBound(faults, r.exited)
		switch boundMs := c.wall(bound) / int64(time.Millisecond); {
		case rv.firstFree == 0:
			fig.leaked++
			t.Errorf("run %d on %q, revoked (%s): its holder %s was never seen free after its semrun exited at %s (last live %dms after)",
				r.id, r.key, rv.kind, rv.id, c.rel(r.exited), rv.lastLive-exitMs)
		case rv.lastLive > boundMs:
			fig.leaked++
			t.Errorf("run %d on %q, revoked (%s): its holder %s was still live %dms after its semrun exited at %s, want free within %v; faults near: %s",
				r.id, r.key, rv.kind, rv.id, rv.lastLive-exitMs, c.rel(r.exited), time.Duration(bound-r.exited), c.faultsNear(r.exited))
		default:
			free = append(free, time.Duration(max(rv.firstFree-exitMs, 0))*time.Millisecond)
		}
	}
	kinds := map[string]int{}
	for _, p := range all {
		kinds[p.rv.kind]++
	}
	var parts []string
	for _, k := range revokeKinds {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	var ends []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		ends = append(ends, fmt.Sprintf("%d %s", counts[k], k))
	}
	fig.faultNote = fmt.Sprintf("%d revokes (%s; %d by slot, %d others of the slot revoked): %s; child stopped after the revoke (Redis answering) p50 %v, max %v; permit free after the exit p50 %v, max %v",
		len(all), strings.Join(parts, ", "), bySlot, othersHit, strings.Join(ends, ", "),
		quantile(stopped, 0.5).Round(time.Millisecond), maxDur(stopped).Round(time.Millisecond),
		quantile(free, 0.5).Round(time.Millisecond), maxDur(free).Round(time.Millisecond))
}

// pauseKey is the key-pause nemesis: a pause, a drain or a pause --for of
// a key while its workers wait in line, for 0.5 to 1.5 TTLs; the line, read
// from semrun status --json while paused; then the resume, or the pause's
// own end.
func pauseKey(c *cluster, rng *rand.Rand) fault {
	key := c.keys[rng.IntN(len(c.keys))]
	p := &keyPause{key: key, kind: pauseKinds[rng.IntN(len(pauseKinds))]}
	d := opFaultTime(rng)
	args := []string{"key", "pause", key, "--reason", pauseReason}
	switch p.kind {
	case "drain":
		args = []string{"key", "drain", key, "--reason", pauseReason, "--timeout", opBound.String()}
	case "pause --for":
		args = append(args, "--for", d.String())
	}
	res := c.operate(opBound+5*time.Second, opConnect, args...)
	if res.status != 0 {
		c.t.Errorf("semrun %s: status %d: %q", strings.Join(args, " "), res.status, res.stderr)
	}
	f := fault{start: res.start, operator: true}
	p.ack, p.ackWall = res.end, c.wall(res.end)/int64(time.Microsecond)
	if p.kind == "drain" && res.status == 0 {
		p.drained = res.end
	}
	// A timed pause began after its command started: it lasts until then
	// at least.
	ends := res.start + int64(d)
	if p.kind == "pause --for" {
		time.Sleep(time.Duration(ends - int64(ttl/4) - mono()))
	} else {
		time.Sleep(d)
	}
	st, read, err := c.keyStatus(key)
	waiting := -1
	switch {
	case err != nil:
		c.t.Errorf("the line of %q while paused: %v", key, err)
	case p.kind == "pause --for" && read.end >= ends:
		// Read too late (a loaded machine): the pause may have ended.
	case st.Paused == nil || st.Paused.Reason != pauseReason:
		c.t.Errorf("%s of %q at %s: semrun status --json at %s shows no pause with reason %q: %s", p.kind, key, c.rel(res.start), c.rel(read.end), pauseReason, read.stdout)
	case st.Unlisted == 0:
		waiting = len(st.Waiters)
		p.line = c.lineOf(st.Waiters)
	}
	if p.kind == "pause --for" {
		time.Sleep(time.Duration(ends - mono()))
		p.endWall = c.wall(ends) / int64(time.Microsecond)
	} else {
		p.endWall = c.wall(mono()) / int64(time.Microsecond)
		if r := c.operate(opBound, opConnect, "key", "resume", key); r.status != 0 {
			c.t.Errorf("semrun key resume %s: status %d: %q", key, r.status, r.stderr)
		}
	}
	f.heal = mono()
	f.what = fmt.Sprintf("%s of %q for %v, %d in line", p.kind, key, time.Duration(f.heal-p.ack).Round(time.Millisecond), waiting)
	c.mu.Lock()
	c.pauses = append(c.pauses, p)
	c.mu.Unlock()
	return f
}

// lineOf turns the waiters semrun status lists into the runs waiting, by
// place in line; nil when one is not a run of the cluster's under way.
func (c *cluster) lineOf(ws []semaphore.Waiter) []int {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b semaphore.Waiter) int { return cmp.Compare(a.Position, b.Position) })
	c.mu.Lock()
	defer c.mu.Unlock()
	byPid := map[int]int{}
	for _, r := range c.runs {
		if r.proc != nil && r.exited == 0 {
			byPid[r.proc.Pid] = r.id
		}
	}
	line := []int{}
	for _, w := range ws {
		id, ok := byPid[w.PID]
		if !ok || w.Position == 0 {
			return nil
		}
		line = append(line, id)
	}
	return line
}

// grantedWhilePaused returns the children of p's key granted while it was
// paused: their token (Redis's clock in µs at the grant) after the pause
// was acknowledged and before it ended.
func grantedWhilePaused(kids []kid, p keyPause) []kid {
	var out []kid
	for _, k := range kids {
		if k.key == p.key && k.token > p.ackWall && k.token < p.endWall {
			out = append(out, k)
		}
	}
	return out
}

// runningAt returns the children of key that ran at the instant at.
func runningAt(kids []kid, key string, at int64) []kid {
	var out []kid
	for _, k := range kids {
		if k.key == key && k.start < at && (k.end == 0 || k.end > at) {
			out = append(out, k)
		}
	}
	return out
}

// servedAfter returns the runs of the first n children of p's key granted
// after its pause ended, in the order of their tokens: the order of the
// grants.
func servedAfter(kids []kid, p keyPause, n int) []int {
	var after []kid
	for _, k := range kids {
		if k.key == p.key && k.token >= p.endWall {
			after = append(after, k)
		}
	}
	slices.SortFunc(after, func(a, b kid) int { return cmp.Compare(a.token, b.token) })
	out := []int{}
	for _, k := range after[:min(n, len(after))] {
		out = append(out, k.run)
	}
	return out
}

// lineBeforeArrival returns the pairs of runs of a line where the later
// place was launched more than a second (and allow) before the earlier
// one: the line is not the order of arrival. (Within a second, a semrun
// that started first may reach Redis second; later still on a loaded
// machine.)
func lineBeforeArrival(line []int, launched map[int]int64, allow time.Duration) [][2]int {
	var out [][2]int
	for i, a := range line {
		for _, b := range line[i+1:] {
			if launched[b]+int64(time.Second+allow) < launched[a] {
				out = append(out, [2]int{a, b})
			}
		}
	}
	return out
}

// checkPauses checks each pause of key-pause: no child of its key granted
// while paused (children granted before run on); after a drain, no child
// of it running; and, after the pause ended, the line read while paused
// served first and in its order, which is the order of arrival.
func (c *cluster) checkPauses(fig *figures) {
	t := c.t
	kids, _ := c.rec.snapshot()
	c.mu.Lock()
	pauses := make([]keyPause, 0, len(c.pauses))
	for _, p := range c.pauses {
		pauses = append(pauses, *p)
	}
	launched := map[int]int64{}
	for _, r := range c.runs {
		launched[r.id] = r.launched
	}
	c.mu.Unlock()
	kinds := map[string]int{}
	inLine, lines, whilePaused, drainedRunning, unordered := 0, 0, 0, 0, 0
	for _, p := range pauses {
		kinds[p.kind]++
		for _, k := range grantedWhilePaused(kids, p) {
			whilePaused++
			t.Errorf("%s of %q acknowledged at %s, ended at %s: %s was granted while paused (its token is Redis's clock)",
				p.kind, p.key, c.rel(p.ack), c.rel(p.endWall*int64(time.Microsecond)-c.wallOff), c.describe(k))
		}
		if p.drained != 0 {
			for _, k := range runningAt(kids, p.key, p.drained) {
				drainedRunning++
				t.Errorf("drain of %q said nobody held it at %s, yet %s ran then", p.key, c.rel(p.drained), c.describe(k))
			}
		}
		if p.line == nil {
			continue
		}
		lines++
		inLine += len(p.line)
		if got := servedAfter(kids, p, len(p.line)); !slices.Equal(got, p.line) {
			unordered++
			t.Errorf("%s of %q ended at %s with runs %v in line, in this order; the first %d grants after it went to runs %v",
				p.kind, p.key, c.rel(p.endWall*int64(time.Microsecond)-c.wallOff), p.line, len(p.line), got)
		}
		first := p.ack
		for _, r := range p.line {
			first = min(first, launched[r])
		}
		for _, ab := range lineBeforeArrival(p.line, launched, machine.allowance(first, p.ack)) {
			unordered++
			t.Errorf("%s of %q: run %d stood in line before run %d, launched %v after it", p.kind, p.key, ab[0], ab[1],
				time.Duration(launched[ab[0]]-launched[ab[1]]).Round(time.Millisecond))
		}
	}
	var parts []string
	for _, k := range pauseKinds {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	fig.faultNote = fmt.Sprintf("%s: %d grants while paused, %d children running after a drain; %d lines read (%d waiters), %d served out of order",
		strings.Join(parts, ", "), whilePaused, drainedRunning, lines, inLine, unordered)
}

// capacityStates: what key-capacity's operator keeps for a key, in turn:
// a capacity below the callers' N (key set --permits M), the slots named
// (key set --slots, N names: the capacity is N again), or nothing (key
// unset).
var capacityStates = []string{"lowered", "named", "unset"}

// capacityChange is one act of key-capacity's operator.
type capacityChange struct {
	key   string
	state string // see capacityStates
	// lowered is the capacity stored when lowered, 2 to N-1 (the
	// weighted worker's 2 fits); names are the names stored when named,
	// N of them.
	lowered int
	names   []string
	// The command's: when it ran (mono(); the wall clock in µs, as tokens
	// count, taken before it started and after it ended), and its status.
	start, end         int64
	startWall, endWall int64
	status             int
	stderr             string
}

// capacityKinds: the faults of key-capacity, beside its operator.
var capacityKinds = []string{"SIGSTOP", "blackhole", "drop replies", "late replies"}

// capacityFault is key-capacity's fault, for 0.5 to 1.5 TTLs: Redis
// SIGSTOPped, or, through the proxy, nothing forwarded, a quarter of the
// replies dropped, or every reply late, by a throw.
func capacityFault(c *cluster, rng *rand.Rand) fault {
	d := opFaultTime(rng)
	f := fault{start: mono()}
	switch capacityKinds[rng.IntN(len(capacityKinds))] {
	case "SIGSTOP":
		return pauseRedis(c, rng, d)
	case "blackhole":
		return blackhole(c, rng, d)
	case "drop replies":
		f.what = fmt.Sprintf("drop 1/4 of replies for %v", d.Round(time.Millisecond))
		c.proxy.DropReplies(0.25)
	default:
		late := ttl/2 + upTo(rng, ttl)
		f.what = fmt.Sprintf("every reply %v late for %v", late.Round(time.Millisecond), d.Round(time.Millisecond))
		c.proxy.Delay(late)
	}
	time.Sleep(d)
	c.proxy.Heal()
	f.heal = mono()
	return f
}

// changeCapacities is key-capacity's operator: on each key, every 0.5 to
// 1.5 TTLs, whatever the faults, it keeps another of capacityStates, the
// first a lowered one; until done.
func changeCapacities(c *cluster, rng *rand.Rand, done <-chan struct{}) {
	var wg sync.WaitGroup
	for _, key := range c.keys {
		r := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Go(func() { c.changeCapacity(key, r, done) })
	}
	wg.Wait()
}

func (c *cluster) changeCapacity(key string, rng *rand.Rand, done <-chan struct{}) {
	state := "unset"
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-time.After(opFaultTime(rng)):
		}
		ch := &capacityChange{key: key, state: "lowered"}
		if i > 0 {
			others := slices.DeleteFunc(slices.Clone(capacityStates), func(s string) bool { return s == state })
			ch.state = others[rng.IntN(len(others))]
		}
		args := []string{"key", "unset", key}
		switch ch.state {
		case "lowered":
			ch.lowered = 2 + rng.IntN(c.permits-2)
			args = []string{"key", "set", key, "--permits", strconv.Itoa(ch.lowered)}
		case "named":
			// Names are data: a space, a letter beyond ASCII, and the
			// act's number, so that names left from an earlier act show.
			for s := range c.permits {
				ch.names = append(ch.names, fmt.Sprintf("gpu é%d.%d", i, s))
			}
			args = []string{"key", "set", key, "--slots", strings.Join(ch.names, ",")}
		}
		ch.startWall = time.Now().UnixMicro()
		res := c.operate(opBound, opConnect, args...)
		ch.endWall = time.Now().UnixMicro()
		ch.start, ch.end, ch.status, ch.stderr = res.start, res.end, res.status, res.stderr
		c.mu.Lock()
		c.capacities = append(c.capacities, ch)
		c.mu.Unlock()
		state = ch.state // had it failed, the next act is another all the same
	}
}

// capWindow is a span over which key-capacity's operator kept a key's
// setting: from the end of one act (or the cluster's start) until the
// start of the next (or for ever).
type capWindow struct {
	key string
	// state is what was kept (capacityStates), "" when unknown: the act
	// before failed, and may have been done or not.
	state   string
	lowered int
	names   []string
	// from and to are on the wall clock in µs, as tokens count; toMono
	// is to as mono(), fromMono from.
	from, to         int64
	fromMono, toMono int64
}

// capWindows turns each key's acts into the windows between them, the
// first from the cluster's start (mono() t0, wall clock t0Wall, µs) with
// nothing kept.
func capWindows(changes []capacityChange, t0, t0Wall int64) []capWindow {
	byKey := map[string][]capacityChange{}
	for _, ch := range changes {
		byKey[ch.key] = append(byKey[ch.key], ch)
	}
	var out []capWindow
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		chs := byKey[key]
		slices.SortFunc(chs, func(a, b capacityChange) int { return cmp.Compare(a.start, b.start) })
		w := capWindow{key: key, state: "unset", from: t0Wall, fromMono: t0}
		for _, ch := range chs {
			w.to, w.toMono = ch.startWall, ch.start
			out = append(out, w)
			w = capWindow{key: key, lowered: ch.lowered, names: ch.names, from: ch.endWall, fromMono: ch.end}
			if ch.status == 0 {
				w.state = ch.state
			}
		}
		w.to, w.toMono = math.MaxInt64, math.MaxInt64
		out = append(out, w)
	}
	return out
}

// grantedIn returns the children of w's key granted wholly inside w: their
// token (Redis's clock at the grant) after its start, and their token and
// their start before its end. A child starts a moment after its grant, or
// later when the grant's reply was lost and semrun asked again; what it
// was told, it was told between the two.
func grantedIn(kids []kid, w capWindow) []kid {
	var out []kid
	for _, k := range kids {
		if k.key == w.key && k.token > w.from && k.token < w.to && k.start < w.toMono {
			out = append(out, k)
		}
	}
	return out
}

// capacityFaults checks the children granted wholly inside a window
// (grantedIn) of a known setting: while a capacity M below N was kept,
// they hold only slots below M (slots); while the slots were named, they
// were told the names of exactly their slots, name i for slot i;
// otherwise, no name (names).
func capacityFaults(kids []kid, ws []capWindow) (slots, names []slotFault) {
	for _, w := range ws {
		if w.state == "" {
			continue
		}
		for _, k := range grantedIn(kids, w) {
			if i := slices.IndexFunc(k.slots, func(s int) bool { return s >= w.lowered }); w.state == "lowered" && i >= 0 {
				slots = append(slots, slotFault{k, fmt.Sprintf("granted while the capacity kept was %d, holds slot %d (slots %v): want slots below %d", w.lowered, k.slots[i], k.slots, w.lowered)})
			}
			if w.state != "named" {
				if k.slotNameSet || k.slotNamesSet {
					names = append(names, slotFault{k, fmt.Sprintf("granted while its key's slots had no names (%s), told SEMRUN_SLOT_NAME %q, SEMRUN_SLOT_NAMES %q", w.state, k.slotName, k.slotNames)})
				}
				continue
			}
			var want []string
			for _, s := range k.slots {
				if s < len(w.names) {
					want = append(want, w.names[s])
				}
			}
			if len(want) == 0 || len(want) != len(k.slots) || !slices.Equal(k.slotNames, want) || k.slotName != want[0] || !k.slotNameSet || !k.slotNamesSet {
				names = append(names, slotFault{k, fmt.Sprintf("granted while its key's slots were named %q, holds slots %v, told SEMRUN_SLOT_NAME %q (set %v), SEMRUN_SLOT_NAMES %q (set %v): want %q",
					w.names, k.slots, k.slotName, k.slotNameSet, k.slotNames, k.slotNamesSet, want)})
			}
		}
	}
	return slots, names
}

// loweredOverlaps returns each instant at which the children granted
// wholly inside a window of a lowered capacity M (grantedIn) held more
// than M permits at once, counted among themselves: whoever held before
// it runs on (semantics, section 10), but each of them was granted only
// while fewer than M were held, them included.
func loweredOverlaps(kids []kid, ws []capWindow) []overlap {
	var out []overlap
	for _, w := range ws {
		if w.state == "lowered" {
			out = append(out, overlaps(grantedIn(kids, w), w.lowered)...)
		}
	}
	return out
}

// checkCapacities checks key-capacity: every act of its operator done
// while Redis answered; the children granted inside each window, by
// capacityFaults and loweredOverlaps.
func (c *cluster) checkCapacities(fig *figures) {
	t := c.t
	kids, _ := c.rec.snapshot()
	for i := range kids {
		kids[i].weight = c.weightOf(kids[i].run, kids[i].key)
	}
	c.mu.Lock()
	changes := make([]capacityChange, 0, len(c.capacities))
	for _, ch := range c.capacities {
		changes = append(changes, *ch)
	}
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	acts, failed := map[string]int{}, 0
	for _, ch := range changes {
		acts[ch.state]++
		if ch.status == 0 {
			continue
		}
		failed++
		if !underFault(faults, ch.start, ch.end) && !starved(ch.status, ch.start, ch.end) {
			t.Errorf("key-capacity's operator, %s %q from %s to %s, Redis answering: status %d: %q", ch.state, ch.key, c.rel(ch.start), c.rel(ch.end), ch.status, ch.stderr)
		}
	}
	ws := capWindows(changes, c.t0, c.wall(c.t0)/int64(time.Microsecond))
	judged, below := map[string]int{}, 0
	for _, w := range ws {
		judged[w.state] += len(grantedIn(kids, w))
		if w.state != "lowered" {
			continue
		}
		// The capacity lowered below a slot held then: its holder is left
		// alone (judge), and new grants take slots below it.
		if slices.ContainsFunc(runningAt(kids, w.key, w.fromMono), func(k kid) bool {
			return slices.ContainsFunc(k.slots, func(s int) bool { return s >= w.lowered })
		}) {
			below++
		}
	}
	past, misnamed := capacityFaults(kids, ws)
	fig.slotFaults += len(past) + len(misnamed)
	for _, bad := range [][]slotFault{past, misnamed} {
		for i, f := range bad {
			if i == 5 {
				t.Errorf("... and %d more such children", len(bad)-5)
				break
			}
			t.Errorf("key-capacity: %s of key %q: %s; faults near: %s", c.describe(f.k), f.k.key, f.why, c.faultsNear(f.k.start))
		}
	}
	ovs := loweredOverlaps(kids, ws)
	fig.overlaps += len(ovs)
	for i, o := range ovs {
		if i == 5 {
			t.Errorf("... and %d more overlaps of a lowered capacity", len(ovs)-5)
			break
		}
		var who []string
		for _, k := range o.running {
			who = append(who, c.describe(k))
		}
		t.Errorf("key-capacity: %d children of key %q granted while its capacity was lowered held more than it at %s: %s; faults near: %s",
			len(o.running), o.key, c.rel(o.at), strings.Join(who, ", "), c.faultsNear(o.at))
	}
	fig.faultNote = fmt.Sprintf("%s; %d lowered (%d below a slot held), %d named, %d unset, %d failed; granted inside a window: %d lowered, %d named, %d unset, %d unknown; %d holding a slot past a lowered capacity, %d told wrong names, %d overlaps of a lowered capacity",
		fig.faultNote, acts["lowered"], below, acts["named"], acts["unset"], failed, judged["lowered"], judged["named"], judged["unset"], judged[""], len(past), len(misnamed), len(ovs))
}
