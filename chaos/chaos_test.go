//go:build linux

package chaos

import (
	"cmp"
	"context"
	randc "crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"golang.org/x/sys/unix"
)

// nemesis is one kind of fault.
type nemesis struct {
	name    string
	proxied bool // semrun reaches Redis through the proxy
	// replicated: the redis-server has three replicas, and semrun asks
	// for two of them (--min-replicas 2).
	replicated bool
	// excuses: its faults may cost a semrun its permit (112) or its
	// connection to Redis for longer than --connect-timeout (125).
	excuses bool
	// holds: every other worker takes holds, with steps under them,
	// instead of running its command on its own (hold_test.go).
	holds bool
	// inject injects one fault and returns when it has healed. Nil for
	// kill9, which runs kill trials instead.
	inject func(c *cluster, rng *rand.Rand) fault
	// own, when set, is the whole run of a nemesis that needs no workers
	// (crowd): TestChaos calls it instead of runNemesis.
	own func(t *testing.T, n nemesis, seed uint64) figures
	// longHolds: the children of every other worker hold 1.5 to 2.5s,
	// whatever -chaos.hold-min and -max say, so that a revoke finds a
	// child running past the next renewal (operator_test.go).
	longHolds bool
	// weighted: the first worker of each key asks for two of its permits
	// (--weight 2), so that the checks see grants of several slots.
	weighted bool
	// check, when set, runs the nemesis's own checks after the common
	// ones, and may set its fault note.
	check func(c *cluster, fig *figures)
	// permits is the N its workers ask for (0: 2).
	permits int
	// operator, when set, acts on the keys, as an operator does, beside
	// the faults, from the first child until done is closed, and returns
	// then.
	operator func(c *cluster, rng *rand.Rand, done <-chan struct{})
}

// upTo is a random duration from 0 to d.
func upTo(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(max(d, 0)) + 1))
}

// faultTime is how long a lasting fault lasts: 0.5 to 3 TTLs.
func faultTime(rng *rand.Rand) time.Duration { return ttl/2 + upTo(rng, ttl*5/2) }

var nemeses = []nemesis{
	{name: "kill9", weighted: true},
	{name: "redis-pause", excuses: true, inject: func(c *cluster, rng *rand.Rand) fault { return pauseRedis(c, rng, 0) }},
	{name: "redis-restart-empty", excuses: true, weighted: true, inject: restartRedis},
	{name: "proxy-cut", proxied: true, inject: func(c *cluster, _ *rand.Rand) fault {
		at := mono()
		n := c.proxy.Cut()
		return fault{what: fmt.Sprintf("cut %d connections", n), start: at, heal: at}
	}},
	{name: "proxy-blackhole", proxied: true, excuses: true, inject: func(c *cluster, rng *rand.Rand) fault { return blackhole(c, rng, 0) }},
	{name: "script-flush", inject: func(c *cluster, _ *rand.Rand) fault {
		f := fault{what: "SCRIPT FLUSH", start: mono()}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.client().ScriptFlush(ctx).Err(); err != nil {
			c.t.Errorf("SCRIPT FLUSH: %v", err)
		}
		f.heal = mono()
		return f
	}},
	{name: "late-replies", proxied: true, excuses: true, inject: func(c *cluster, rng *rand.Rand) fault {
		d, late := faultTime(rng), ttl/2+upTo(rng, ttl)
		f := fault{what: fmt.Sprintf("every reply %v late for %v", late.Round(time.Millisecond), d.Round(time.Millisecond)), start: mono()}
		c.proxy.Delay(late)
		time.Sleep(d)
		c.proxy.Heal()
		f.heal = mono()
		return f
	}},
	{name: "drop-replies", proxied: true, excuses: true, weighted: true, inject: func(c *cluster, rng *rand.Rand) fault {
		d := faultTime(rng)
		f := fault{what: fmt.Sprintf("drop 1/4 of replies for %v", d.Round(time.Millisecond)), start: mono()}
		c.proxy.DropReplies(0.25)
		time.Sleep(d)
		c.proxy.Heal()
		f.heal = mono()
		return f
	}},
	{name: "partition", replicated: true, excuses: true, inject: partition},
	{name: "several-keys", own: runSeveral},
	{name: "priorities", own: runPriorities},
	{name: "priorities", own: runPriorities},
	{name: "crowd", own: runCrowd},
	{name: "hold-kill9", holds: true, inject: killKeepers},
	{name: "hold-redis", holds: true, excuses: true, inject: pauseOrRestart},
	{name: "hold-keeper", own: trials(keeperTrial)},
	{name: "hold-ends", own: trials(endTrial)},
	{name: "hold-acquire-kill", own: trials(acquireKillTrial)},
	{name: "hold-crowd", own: runHoldCrowd},
	{name: "key-revoke", proxied: true, excuses: true, longHolds: true, weighted: true, inject: revokeHolder, check: (*cluster).checkRevokes},
	{name: "key-pause", inject: pauseKey, check: (*cluster).checkPauses},
	{name: "key-capacity", proxied: true, excuses: true, weighted: true, permits: 4, inject: capacityFault, operator: changeCapacities, check: (*cluster).checkCapacities},
	{name: "min-hold-kill9", own: runMinHold},
	{name: "hold-drain", holds: true, inject: drainHold, check: (*cluster).checkDrains},
	{name: "hold-frozen-keeper", holds: true, inject: freezeKeeper, check: (*cluster).checkThaws},
}

// pauseRedis stops redis-server with SIGSTOP for d (0: 0.5 to 3 TTLs).
func pauseRedis(c *cluster, rng *rand.Rand, d time.Duration) fault {
	if d == 0 {
		d = faultTime(rng)
	}
	f := fault{what: fmt.Sprintf("SIGSTOP %v", d.Round(time.Millisecond)), start: mono()}
	if err := c.srv.Pause(); err != nil {
		c.t.Errorf("pause redis-server: %v", err)
	}
	time.Sleep(d)
	if err := c.srv.Resume(); err != nil {
		c.t.Errorf("resume redis-server: %v", err)
	}
	f.heal = mono()
	return f
}

// blackhole forwards nothing through the proxy for d (0: 0.5 to 3
// TTLs); then each held connection is closed or delivered late.
func blackhole(c *cluster, rng *rand.Rand, d time.Duration) fault {
	if d == 0 {
		d = faultTime(rng)
	}
	f := fault{what: fmt.Sprintf("blackhole %v", d.Round(time.Millisecond)), start: mono()}
	c.proxy.Blackhole()
	time.Sleep(d)
	c.proxy.Heal()
	f.heal = mono()
	return f
}

// restartRedis kills redis-server and starts it again, empty.
func restartRedis(c *cluster, _ *rand.Rand) fault {
	f := fault{what: "kill -9 and restart empty", start: mono(), restart: true, wallStart: time.Now().UnixMicro()}
	if err := c.srv.Restart(); err != nil {
		c.t.Errorf("restart redis-server: %v", err)
	}
	f.heal, f.wallHeal = mono(), time.Now().UnixMicro()
	return f
}

// Targets, and what the harness fails on.
const (
	killTarget  = 100 * time.Millisecond // a SIGKILLed semrun's child is gone within this
	killFailure = time.Second            // ...and the harness fails if it still lives then (checked after, however late)
	healTarget  = ttl + ttl/3            // after a fault heals, the next child starts within this
	healFailure = 2 * ttl                // ...and the harness fails beyond this and the machine's allowance
	// hangBound bounds the harness's waits for what must come (a child
	// started, semruns ended, connections closed): it only catches a hang,
	// and is no assertion about speed.
	hangBound = time.Minute
)

// figures are what one nemesis measured.
type figures struct {
	name         string
	runs, grants int
	faults       int
	faultNote    string
	overlaps     int
	tokenOrder   int // overlaps of children counted from when their token says they were granted
	reused       int // tokens handed out twice
	reordered    int // children that started after one with a larger token ended (no fault with N > 1)
	reorderedMax time.Duration
	leaked       int
	permitsFree  time.Duration // from the last semrun's end until no permit was held
	heal         []time.Duration
	healAfter    []string // the fault each heal time follows
	healAt       []int64  // when each fault healed, mono()
	starved      int      // statuses 112 and 125 with no fault near, the machine's lag past starvedLag
	lost, failed int      // statuses 112 and 125
	revoked      int      // statuses 113
	maxRuntime   int      // statuses 124
	bad          int      // statuses not passed through, unexplained
	kills        []time.Duration
	wall         time.Duration
	// healMore is what each heal may take past healFailure, when the
	// nemesis knows why (several-keys); none past its end.
	healMore []time.Duration

	// Holds (hold_test.go, holdtrials_test.go).
	holds             int                    // acquires that printed a handle
	roles             map[string]map[int]int // statuses of acquire, step, "step ran" (its child started) and release
	keeperKills       int
	keeperKillsInStep int
	free              []time.Duration // trials: from when nothing kept a hold's permit until the next child on it started
	pushBack          []time.Duration // trials: how much later than the TTL a silent key let the permit go
	overbooked        int             // samples of Redis that counted more than N holders of a key
	keepersLeft       int             // keepers still running past their bound

	// Slots (semantics, section 13).
	slotted      int // holders of a key that told their slots
	multiSlot    int // ...of more than one slot (--weight)
	slotOverlaps int // instants at which two holders held one slot, as they ran or counted from their grant by token order
	slotFaults   int // holders told wrong slots: none, a count not their weight, one twice or past N, SEMRUN_SLOT not the first
}

// slotNote shows the slots' figures.
func (f *figures) slotNote() string {
	return fmt.Sprintf("%d holders told their slots (%d of more than one), %d slots held twice, %d holders told wrong slots", f.slotted, f.multiSlot, f.slotOverlaps, f.slotFaults)
}

// add adds g's counts to f's, and keeps the longer of their longest
// durations: the figures of several runs as one.
func (f *figures) add(g figures) {
	f.runs += g.runs
	f.grants += g.grants
	f.holds += g.holds
	f.faults += g.faults
	f.overlaps += g.overlaps
	f.tokenOrder += g.tokenOrder
	f.reused += g.reused
	f.reordered += g.reordered
	f.reorderedMax = max(f.reorderedMax, g.reorderedMax)
	f.leaked += g.leaked
	f.permitsFree = max(f.permitsFree, g.permitsFree)
	f.starved += g.starved
	f.lost += g.lost
	f.failed += g.failed
	f.revoked += g.revoked
	f.maxRuntime += g.maxRuntime
	f.bad += g.bad
	f.slotted += g.slotted
	f.multiSlot += g.multiSlot
	f.slotOverlaps += g.slotOverlaps
	f.slotFaults += g.slotFaults
}

// TestChaos runs every nemesis against semrun, -parallel at a time (6
// unless given), each on a redis-server and keys of its own, with -chaos
// only: the README's test command runs the checks' own tests, and CI runs
// the nemeses as a step of their own. See the package comment.
func TestChaos(t *testing.T) {
	if !*enabled {
		t.Skip("the nemeses run with -chaos: go test -race -count=1 ./chaos -chaos (docs/chaos.md)")
	}
	if *seed == 0 {
		var b [8]byte
		_, _ = randc.Read(b[:])
		*seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	t.Logf("seed %d (-chaos.seed=%d repeats the random choices); %v per nemesis, %d kill trials, holds %v to %v",
		*seed, *seed, *duration, *killTrials, *holdMin, *holdMax)
	redis.SetLogger(&logging.VoidLogger{})
	grants.Store(0)
	var mu sync.Mutex
	var all []figures
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if len(all) > 0 {
			t.Log("figures:\n" + table(all))
		}
	})
	machine = startProber(t, *seed)
	t.Cleanup(func() { machine = nil })
	for i, n := range nemeses {
		t.Run(n.name, func(t *testing.T) {
			t.Parallel()
			run := runNemesis
			if n.own != nil {
				run = n.own
			}
			f := run(t, n, *seed+uint64(i)*1_000_003)
			mu.Lock()
			all = append(all, f)
			mu.Unlock()
		})
	}
}

func runNemesis(t *testing.T, n nemesis, seed uint64) figures {
	began := time.Now()
	keys, permits, perKey := *keysFlag, cmp.Or(n.permits, 2), 6
	if n.inject == nil {
		// A SIGKILLed holder keeps its permit for a TTL: more permits, so that
		// the kills leave some free.
		keys, permits, perKey = 4**keysFlag, 3, 4
	}
	c := newCluster(t, n, keys, permits, seed)
	c.start(perKey)
	var sampled func() (int, []string)
	if n.holds {
		sampled = c.watchHolders()
	}
	// A fresh server grants nothing for a TTL (the restart fence); the
	// bound only catches a hang, however slowly a loaded machine starts
	// the workers.
	if c.startedAfter(c.t0, hangBound) < 0 {
		t.Fatalf("no child started within %v of the start", hangBound)
	}
	time.Sleep(ttl / 2)
	rng := rand.New(rand.NewPCG(seed, 1))
	fig := figures{name: n.name}
	// Faults until -chaos.duration has passed and -chaos.grants are made.
	end, limit := time.Now().Add(*duration), time.Now().Add(4**duration)
	more := func() bool {
		return time.Now().Before(end) || grants.Load() < *grantsGoal && time.Now().Before(limit)
	}
	if n.inject == nil {
		fig.kills = c.killTrials(rng)
		fig.faults = len(fig.kills)
		fig.faultNote = "semruns SIGKILLed"
		for more() {
			time.Sleep(100 * time.Millisecond) // no more kills: the trials are done
		}
	} else {
		done := make(chan struct{})
		var operator sync.WaitGroup
		if n.operator != nil {
			operator.Go(func() { n.operator(c, rand.New(rand.NewPCG(seed, 2)), done) })
		}
		for more() {
			f := n.inject(c, rng)
			c.addFault(f)
			c.awaitHeal(t, f, &fig)
			if more() {
				time.Sleep(ttl/2 + upTo(rng, ttl/2)) // about one TTL of peace
			}
		}
		close(done)
		operator.Wait()
		fig.faults = len(c.faults)
		var down time.Duration
		for _, f := range c.faults {
			down += time.Duration(f.heal - f.start)
		}
		if down > 0 {
			fig.faultNote = fmt.Sprintf("%v under a fault in all", down.Round(time.Millisecond))
		}
		if restarts := len(slices.DeleteFunc(slices.Clone(c.faults), func(f fault) bool { return !f.restart })); restarts > 0 && restarts < len(c.faults) {
			fig.faultNote = fmt.Sprintf("%d restarts, %d pauses, %s", restarts, len(c.faults)-restarts, fig.faultNote)
		}
	}
	// Let the semruns under way end by themselves: waiters get their
	// turn, and permits of killed holders lapse. The bound only catches a
	// hang.
	last, killed := c.drain(hangBound)
	if killed > 0 {
		t.Errorf("%d semruns still ran %v after the workers stopped; killed", killed, hangBound)
	}
	if n.holds {
		// Every hold was released or lost: its keeper sees it at its next
		// renewal, a third of the TTL later, and exits. Its lease, renewed
		// until then, lapses a TTL after.
		fig.keepersLeft = c.keepersLeft(ttl, nil)
		last = mono()
	}
	fig.leaked, fig.permitsFree = c.waitAllFree(last)
	if open := c.rec.quiet(hangBound); open > 0 {
		t.Errorf("%d children still connected %v after the last semrun ended", open, hangBound)
	}
	if sampled != nil {
		fig.overbookedCheck(t, sampled)
	}
	c.check(&fig, n)
	if n.check != nil {
		n.check(c, &fig)
	}
	if fig.keeperKills > 0 && n.check == nil {
		fig.faultNote = fmt.Sprintf("%d keepers SIGKILLed, %d during a step", fig.keeperKills, fig.keeperKillsInStep)
	}
	if p := c.proxy; p != nil {
		pc := p.Counts()
		switch n.name {
		case "proxy-cut":
			fig.faultNote = fmt.Sprintf("%d connections cut", pc.Cut)
		case "proxy-blackhole":
			fig.faultNote = fmt.Sprintf("%s, %d connections held: %d closed, %d delivered late", fig.faultNote, pc.Held, pc.ClosedAtHeal, pc.DeliveredLate)
		case "late-replies":
			fig.faultNote = fmt.Sprintf("%d replies delivered late, %s", pc.Delayed, fig.faultNote)
		case "drop-replies":
			fig.faultNote = fmt.Sprintf("%d replies dropped, %s", pc.Dropped, fig.faultNote)
		}
	}
	fig.wall = time.Since(began)
	t.Logf("%s: %d semruns, %d grants, %d faults (%s), %d overlaps, %d by token order, %d tokens reused, %d started after a larger token ended (at most %v after), "+
		"%s, %d leaked permits (all free %v after the last semrun), heal max %v (target %v), %d lost (112), %d revoked (113), %d unreachable (125), %d of them on a starved machine, %d bad statuses, machine lag max %v, wall %v",
		n.name, fig.runs, fig.grants, fig.faults, fig.faultNote, fig.overlaps, fig.tokenOrder, fig.reused, fig.reordered, fig.reorderedMax.Round(time.Millisecond), fig.slotNote(),
		fig.leaked, fig.permitsFree.Round(time.Millisecond), maxDur(fig.heal).Round(time.Millisecond), healTarget.Round(time.Millisecond),
		fig.lost, fig.revoked, fig.failed, fig.starved, fig.bad, machine.lag(c.t0, mono()).Round(time.Millisecond), fig.wall.Round(100*time.Millisecond))
	if n.holds {
		t.Logf("%s: %s", n.name, fig.holdNote())
	}
	return fig
}

// killTrials SIGKILLs semruns whose child runs, one at a time, and returns
// how long each child took to be gone.
func (c *cluster) killTrials(rng *rand.Rand) []time.Duration {
	every := *duration / time.Duration(max(*killTrials, 1))
	giveUp := time.Now().Add(3**duration + time.Minute)
	var lat []time.Duration
	// Each trial's child is looked at killFailure after its kill.
	var checks sync.WaitGroup
	defer checks.Wait()
	for len(lat) < *killTrials {
		if time.Now().After(giveUp) {
			c.t.Errorf("only %d of %d kill trials in %v", len(lat), *killTrials, 3**duration+time.Minute)
			break
		}
		k, r := c.victim(rng)
		if k == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		// A pidfd of the child, taken before the kill, tells afterwards
		// whether it still lived killFailure after it, however late the
		// harness looks.
		pidfd, err := unix.PidfdOpen(k.pid, 0)
		if err != nil {
			continue // it ended meanwhile
		}
		at := mono()
		if r.proc.Kill() != nil {
			_ = unix.Close(pidfd)
			continue // it ended meanwhile
		}
		c.mu.Lock()
		r.killed = true
		c.mu.Unlock()
		c.addFault(fault{what: fmt.Sprintf("SIGKILL semrun %d (run %d)", r.proc.Pid, r.id), start: at, heal: at})
		trial := len(lat) + 1
		checks.Go(func() {
			defer unix.Close(pidfd)
			time.Sleep(time.Duration(at + int64(killFailure) - mono()))
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 0); err == nil && n == 0 {
				c.t.Errorf("kill trial %d: the child (pid %d, token %d) of SIGKILLed semrun %d still lived %v after the kill (target %v)",
					trial, k.pid, k.token, r.proc.Pid, killFailure, killTarget)
			}
		})
		select {
		case <-k.goneCh:
			if k.end < at {
				continue // it ended by itself just before: no trial
			}
			// The figures show p50, p99 and max against killTarget, as the
			// harness saw the child's connection end: late on a loaded
			// machine.
			lat = append(lat, time.Duration(k.gone-at))
		case <-time.After(hangBound):
			c.t.Errorf("kill trial %d: the child (pid %d) of SIGKILLed semrun %d is still there after %v", trial, k.pid, r.proc.Pid, hangBound)
			lat = append(lat, hangBound)
		}
		time.Sleep(every/2 + upTo(rng, every+1))
	}
	return lat
}

// victim picks a running child with at least 30ms of its hold left, and
// its semrun.
func (c *cluster) victim(rng *rand.Rand) (*kid, *run) {
	ks := c.rec.running()
	rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	now := mono()
	for _, k := range ks {
		r := c.runningRun(k.run)
		if r != nil && k.start+int64(r.hold)*int64(time.Millisecond)-now > int64(30*time.Millisecond) {
			return k, r
		}
	}
	return nil, nil
}

// client is a client of the redis-server itself, not through the proxy:
// the master, after a partition healed.
func (c *cluster) client() *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.direct == nil || c.direct.Options().Addr != c.srv.Addr {
		rc := redis.NewClient(&redis.Options{Addr: c.srv.Addr, Protocol: 2, DisableIdentity: true})
		c.t.Cleanup(func() { _ = rc.Close() })
		c.direct = rc
	}
	return c.direct
}

// waitAllFree waits, from the last semrun's end, until no permit of the
// keys is held (a holder whose lease has not lapsed on Redis's clock), for
// at most one TTL and a little, on Redis's clock: a harness that looks
// late sees no lease that lapsed in time. It returns how many still were,
// and when the last one freed.
func (c *cluster) waitAllFree(from int64) (int, time.Duration) {
	deadline := c.wall(from + int64(ttl+250*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	rc := c.client()
	for {
		held, now, err := c.held(ctx, rc)
		if err != nil {
			c.t.Errorf("read the holders: %v", err)
			return -1, 0
		}
		if held == 0 {
			return 0, time.Duration(now - c.wall(from))
		}
		if now > deadline {
			c.t.Errorf("%d permits still held %v after the last semrun ended, on Redis's clock, want none after the TTL (%v)", held, time.Duration(now-c.wall(from)), ttl)
			return held, time.Duration(now - c.wall(from))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// held counts the holders of the cluster's keys whose lease has not
// lapsed at Redis's clock's now, which it returns too (ns); see
// docs/how-it-works.md, "Data model".
func (c *cluster) held(ctx context.Context, rc *redis.Client) (int, int64, error) {
	total, now := 0, int64(0)
	for _, key := range c.keys {
		n, err := liveHolders.Run(ctx, rc, []string{"semrun:{" + key + "}:holders"}).Int64Slice()
		if err != nil || len(n) != 2 {
			return 0, 0, fmt.Errorf("count the live holders of %q: %v %v", key, n, err)
		}
		total += int(n[0])
		now = max(now, n[1]*int64(time.Millisecond))
	}
	return total, now, nil
}

// check runs the checks on what the cluster recorded, and fills in fig.
func (c *cluster) check(fig *figures, n nemesis) {
	t := c.t
	kids, bad := c.rec.snapshot()
	for _, b := range bad {
		t.Errorf("a child sent a line the harness cannot read: %s", b)
	}
	fig.grants = len(kids)
	byRun := map[int]*kid{}
	for i := range kids {
		byRun[kids[i].run] = &kids[i]
	}
	// Slots as each child was told them.
	var slotBad []slotFault
	for _, k := range kids {
		if why := slotsTold(k, c.permitsOf); why != "" {
			slotBad = append(slotBad, slotFault{k, why})
		}
	}
	c.mu.Lock()
	holds, holdOf := c.copyHolds()
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	slotBad = append(slotBad, holdSlots(kids, holdOf)...)
	// The holds' steps, and the holds themselves over the time they are
	// known to have held, are holders like the runs' children; a child of
	// several keys holds each of them (with its own token), and one frozen
	// whole, with its semrun, and stopped as it woke, held until the freeze.
	kids = holders(kids, holds, holdOf)
	c.mu.Lock()
	woke := maps.Clone(c.woke)
	c.mu.Unlock()
	kids = perKey(clipWoken(kids, woke, func(from, to int64) time.Duration { return machine.allowance(from, to) }))
	for i := range kids {
		kids[i].weight = c.weightOf(kids[i].run, kids[i].key)
	}

	// At most N permits of a key held at once.
	ovs := overlapsOf(kids, c.permitsOf)
	fig.overlaps = len(ovs)
	for i, o := range ovs {
		if i == 5 {
			t.Errorf("... and %d more overlaps", len(ovs)-5)
			break
		}
		var who []string
		held := 0
		for _, k := range o.running {
			who, held = append(who, c.describe(k)), held+k.permits()
		}
		t.Errorf("overlap: %d children of key %q held %d permits at %s, more than %d: %s; faults near: %s",
			len(o.running), o.key, held, c.rel(o.at), c.permitsOf(o.key), strings.Join(who, ", "), c.faultsNear(o.at))
	}

	// Each slot of a key held by one holder at a time, as many slots as
	// its weight, each below N; as told.
	for _, k := range kids {
		if k.slotted && c.permitsOf(k.key) <= maxSlots {
			fig.slotted++
			if len(k.slots) > 1 {
				fig.multiSlot++
			}
		}
	}
	slotBad = append(slotBad, slotFaults(kids, c.permitsOf)...)
	fig.slotFaults = len(slotBad)
	for i, f := range slotBad {
		if i == 5 {
			t.Errorf("... and %d more holders told wrong slots", len(slotBad)-5)
			break
		}
		t.Errorf("slots: %s of key %q: %s", c.describe(f.k), f.k.key, f.why)
	}
	c.reportSlotOverlaps(fig, slotOverlaps(kids), "", nil)

	// Tokens never reused, and in the order of the grants.
	for i, pair := range reused(kids) {
		if i == 5 {
			t.Errorf("... and more tokens handed out twice")
			break
		}
		t.Errorf("token %d of key %q handed out twice: %s and %s", pair[0].token, pair[0].key, c.describe(pair[0]), c.describe(pair[1]))
	}
	fig.reused = len(reused(kids))
	fig.reordered, fig.reorderedMax = reordered(kids)
	g, since := granted(kids)
	ovs = overlapsOf(g, c.permitsOf)
	fig.tokenOrder = len(ovs)
	for i, o := range ovs {
		if i == 5 {
			t.Errorf("... and %d more overlaps by token order", len(ovs)-5)
			break
		}
		var who []string
		for _, k := range o.running {
			was := k // as it ran: its own start
			if b, ok := byRun[k.run]; ok {
				was.start = b.start
			}
			s := c.describe(was)
			if a, ok := since[k.run]; ok && a.key == o.key { // a run of several keys is moved once per key
				s += fmt.Sprintf(" granted before run %d's token %d, so holding since %s", a.run, a.token, c.rel(a.start))
			}
			who = append(who, s)
		}
		t.Errorf("tokens out of order: counting each child from the start of the first child with a larger token, %d children of key %q held at %s, more than %d: %s; faults near: %s",
			len(o.running), o.key, c.rel(o.at), c.permitsOf(o.key), strings.Join(who, ", "), c.faultsNear(o.at))
	}

	c.reportSlotOverlaps(fig, slotOverlaps(g), "by token order (each child counted from the start of the first child of its key with a larger token)", byRun)

	// A restart empties Redis: whoever held before it has stopped before
	// anyone granted after it starts.
	for _, p := range restarted(kids, faults) {
		fig.tokenOrder++
		t.Errorf("restart: %s, granted before Redis restarted empty, still held when %s, granted after, started: the restart fence must keep them apart; faults near: %s",
			c.describe(p[0]), c.describe(p[1]), c.faultsNear(p[1].start))
	}

	// Every semrun's status is its child's; holds have their own rules; a
	// revoke by slot may have hit whoever held the slot.
	c.checkHolds(fig, n, holds, byRun, faults)
	c.slotTargets(byRun)
	c.mu.Lock()
	runs := make([]run, 0, len(c.runs))
	for _, r := range c.runs {
		if r.proc == nil {
			continue
		}
		fig.runs++
		switch r.status {
		case statusLost:
			fig.lost++
		case statusRevoked:
			fig.revoked++
		case statusFailure:
			fig.failed++
		case statusMaxRuntime:
			fig.maxRuntime++
		}
		if r.of == nil {
			runs = append(runs, *r)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(runs, func(a, b run) int { return a.id - b.id })
	reported := 0
	for _, r := range runs {
		excused := false
		if n.excuses {
			for _, f := range faults {
				if !f.operator && r.launched <= f.heal+int64(ttl) && r.exited >= f.start {
					excused = true
					break
				}
			}
		}
		if !excused && !r.killed && r.signal == 0 && starved(r.status, r.launched, r.exited) {
			excused = true // the machine's, not semrun's: counted, not failed
			fig.starved++
		}
		why := judge(r, byRun[r.id], excused)
		if why == "" {
			continue
		}
		fig.bad++
		if reported++; reported > 10 {
			continue
		}
		child := "no child"
		if k := byRun[r.id]; k != nil {
			child = "child " + c.describe(*k)
		}
		t.Errorf("semrun run %d on %q from %s to %s: %s; %s; faults near its end: %s; its stderr: %q",
			r.id, r.key, c.rel(r.launched), c.rel(r.exited), why, child, c.faultsNear(r.exited), r.stderr)
	}
	if reported > 10 {
		t.Errorf("... and %d more semruns with a wrong status", reported-10)
	}

	// Heal times.
	for i, h := range fig.heal {
		bound := healFailure
		if i < len(fig.healMore) {
			bound += fig.healMore[i]
		}
		if allow := machine.allowance(fig.healAt[i], fig.healAt[i]+int64(h)); h > bound+allow {
			t.Errorf("after %s: the next child started %v after the fault healed, want within %v and %v for the machine's lag (target %v)",
				fig.healAfter[i], h.Round(time.Millisecond), bound, allow.Round(time.Millisecond), healTarget)
		}
	}
}

// reportSlotOverlaps fails on each overlap of slotOverlaps, counted
// how; byRun, when given, shows each child's own start.
func (c *cluster) reportSlotOverlaps(fig *figures, ovs []overlap, how string, byRun map[int]*kid) {
	fig.slotOverlaps += len(ovs)
	if how != "" {
		how = " " + how
	}
	for i, o := range ovs {
		if i == 5 {
			c.t.Errorf("... and %d more slots held twice%s", len(ovs)-5, how)
			break
		}
		key, slot := keySlot(o.key)
		var who []string
		for _, k := range o.running {
			if b, ok := byRun[k.run]; ok {
				k.start = b.start
			}
			who = append(who, c.describe(k))
		}
		c.t.Errorf("slot %d of key %q held by %d at once%s at %s: %s; faults near: %s",
			slot, key, len(o.running), how, c.rel(o.at), strings.Join(who, ", "), c.faultsNear(o.at))
	}
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// quantile is the q-quantile of ds, by the nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// table shows the figures of every nemesis.
func table(all []figures) string {
	slices.SortFunc(all, func(a, b figures) int {
		return slices.IndexFunc(nemeses, func(n nemesis) bool { return n.name == a.name }) -
			slices.IndexFunc(nemeses, func(n nemesis) bool { return n.name == b.name })
	})
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nemesis\tsemruns\tgrants\tholds\tfaults\toverlaps\ttoken faults\tslotted (multi)\tslot faults\treordered (max)\tleaked permits\tfree after\thold free max\tmax heal\t112\t113\t124\t125\tbad status\tkill p50\tkill p99\tkill max\twall\t")
	var sum figures
	for _, f := range all {
		heal, holdFree, p50, p99, top := "-", "-", "-", "-", "-"
		if len(f.heal) > 0 {
			heal = maxDur(f.heal).Round(time.Millisecond).String()
		}
		if len(f.free) > 0 {
			holdFree = maxDur(f.free).Round(time.Millisecond).String()
		}
		if len(f.kills) > 0 {
			p50 = quantile(f.kills, 0.5).Round(10 * time.Microsecond).String()
			p99 = quantile(f.kills, 0.99).Round(10 * time.Microsecond).String()
			top = maxDur(f.kills).Round(10 * time.Microsecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%d (%v)\t%d\t%v\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%v\t\n",
			f.name, f.runs, f.grants, f.holds, f.faults, f.overlaps, f.tokenOrder+f.reused, f.slotted, f.multiSlot, f.slotOverlaps+f.slotFaults, f.reordered, f.reorderedMax.Round(time.Millisecond),
			f.leaked, f.permitsFree.Round(time.Millisecond), holdFree, heal, f.lost, f.revoked, f.maxRuntime, f.failed, f.bad, p50, p99, top, f.wall.Round(100*time.Millisecond))
		sum.add(f)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d\t\t\t\t%d\t%d\t%d\t%d\t%d\t\t\t\t\t\n",
		sum.runs, sum.grants, sum.holds, sum.faults, sum.overlaps, sum.tokenOrder+sum.reused, sum.slotted, sum.multiSlot, sum.slotOverlaps+sum.slotFaults, sum.reordered, sum.leaked, sum.lost, sum.revoked, sum.maxRuntime, sum.failed, sum.bad)
	_ = tw.Flush()
	b.WriteString("faults: ")
	for i, f := range all {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", f.name, f.faultNote)
	}
	return b.String()
}
