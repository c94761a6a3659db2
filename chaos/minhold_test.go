//go:build linux

package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Once per window (--min-hold D; semantics, section 9) under crashes,
// silences, frozen holders and restarts that keep Redis's data: the
// min-hold-kill9 nemesis and its checks. See the package comment.

const (
	// minHoldLo to minHoldHi is a key's --min-hold. A kill and the silence
	// after it end before it does: then only the store's cooling keeps the
	// key taken when the callers come back.
	minHoldLo = 7500 * time.Millisecond
	minHoldHi = 8500 * time.Millisecond
	// quietFor is how long a key is left silent after a kill: past the
	// lease, past what a silence pushes leases back by (a lease more), and
	// past the life the key's records had were it the lease's (a second
	// more).
	quietFor = 2*ttl + time.Second
	// minHoldWait is the --timeout of the callers that wait in line: a
	// caller goes away soon, and a key can be left silent.
	minHoldWait = time.Second
)

// silence is one kill of a holder of min-hold-kill9 and the silence after
// it: no semrun of the key under way from from until to (mono()).
type silence struct {
	key    string
	d      time.Duration // the key's --min-hold
	victim int           // the run SIGKILLed
	grant  int64         // its child's grant: its token, Redis's clock, in mono()
	killed int64
	// from: the last semrun of the key had exited; to: the callers were let
	// come again.
	from, to int64
}

// meaningful tells whether the silence tested the cooling: it lasted
// quietFor, and the callers came back before the killed holder's min hold
// was over, so that only the store's record of it could turn them away.
func (s silence) meaningful() bool {
	return s.to-s.from >= int64(quietFor) && s.to < s.grant+int64(s.d)
}

// minHold is one cluster of min-hold-kill9: its keys' min holds, and
// what the nemesis did.
type minHold struct {
	c        *cluster
	d        map[string]time.Duration
	mu       sync.Mutex
	silences []silence
	freezes  int
	restarts int
	drops    int // spells of dropped replies
	skipped  int // group SIGSTOPs skipped: too little of the min hold left
}

// runMinHold is min-hold-kill9: two clusters, one with two keys of one
// permit, one with a key of two, each with its own redis-server, workers
// and nemesis; their figures are summed.
func runMinHold(t *testing.T, n nemesis, seed uint64) figures {
	began := time.Now()
	specs := []struct {
		name          string
		keys, permits int
	}{{n.name, 2 * *keysFlag, 1}, {n.name + "-n2", *keysFlag, 2}}
	ms := make([]*minHold, len(specs))
	for i, s := range specs {
		// Clusters are made here, on t's goroutine: making one may end t.
		c := newCluster(t, nemesis{name: s.name, proxied: true}, s.keys, s.permits, seed+uint64(i))
		m := &minHold{c: c, d: map[string]time.Duration{}}
		rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		for _, key := range c.keys {
			m.d[key] = (minHoldLo + upTo(rng, minHoldHi-minHoldLo)).Round(time.Millisecond)
		}
		ms[i] = m
	}
	figs := make([]figures, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { figs[i] = m.run(n, seed+uint64(i)) })
	}
	wg.Wait()
	fig := figures{name: n.name}
	var notes []string
	for i, f := range figs {
		fig.add(f)
		notes = append(notes, fmt.Sprintf("N=%d: %s", specs[i].permits, f.faultNote))
	}
	fig.faultNote = strings.Join(notes, "; ")
	fig.wall = time.Since(began)
	t.Logf("%s: %d semruns, %d grants, %d overlaps, %d by token order, %d tokens reused, %s, %d leaked permits, %d lost (112), %d unreachable (125), %d bad statuses; %s; wall %v",
		n.name, fig.runs, fig.grants, fig.overlaps, fig.tokenOrder, fig.reused, fig.slotNote(), fig.leaked, fig.lost, fig.failed, fig.bad, fig.faultNote, fig.wall.Round(100*time.Millisecond))
	return fig
}

// run is one cluster's run: its workers, a lane of faults per key, then
// the checks.
func (m *minHold) run(n nemesis, seed uint64) figures {
	c := m.c
	m.start(seed)
	if c.startedAfter(c.t0, hangBound) < 0 {
		c.t.Errorf("%s: no child started within %v of the start", c.keys[0], hangBound)
	}
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for i, key := range c.keys {
		rng := rand.New(rand.NewPCG(seed, uint64(i+7)))
		// Once a kill and a silence tested the cooling, the strikes take
		// turns; one lane strikes the cluster's Redis, and its first is a
		// restart on one cluster, a SIGSTOP on the other, so that a short
		// run makes both.
		turns := []string{"group SIGSTOP", "kill9"}
		if i == 0 {
			turns = []string{"restart with data", "group SIGSTOP", "drop replies", "kill9"}
			if m.c.permits > 1 {
				turns[0], turns[1] = turns[1], turns[0]
			}
		}
		wg.Go(func() {
			tested := false // a kill and a silence that tested the cooling
			for turn := 0; time.Now().Before(end) || !tested && time.Now().Before(end.Add(3*minHoldHi)); {
				kind := "kill9"
				if tested {
					kind = turns[turn%len(turns)]
					turn++
				}
				if s, ok := m.cycle(key, kind, rng); ok && s.meaningful() {
					tested = true
				}
				time.Sleep(ttl / 2)
			}
		})
	}
	wg.Wait()
	last, killed := c.drain(hangBound)
	if killed > 0 {
		c.t.Errorf("%d semruns still ran %v after the workers stopped; killed", killed, hangBound)
	}
	// A permit cools until its min hold is over.
	kids, _ := c.rec.snapshot()
	for _, k := range kids {
		last = max(last, k.start+int64(m.d[k.key]))
	}
	fig := figures{name: n.name}
	fig.leaked, fig.permitsFree = c.waitAllFree(last)
	if open := c.rec.quiet(hangBound); open > 0 {
		c.t.Errorf("%d children still connected %v after the last semrun ended", open, hangBound)
	}
	c.check(&fig, nemesis{name: n.name, excuses: true})
	m.check(&fig)
	return fig
}

// start starts the workers: per key, one caller that waits in line (for
// minHoldWait) and one that tries once (--no-wait), and one more of those
// per permit past the first; each pauses 0.2 to 0.7s between calls, and
// none starts while its key is left silent.
func (m *minHold) start(seed uint64) {
	c := m.c
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	for i, key := range c.keys {
		for j := range 1 + c.permits {
			rng := rand.New(rand.NewPCG(seed, uint64(i*1000+j)))
			c.workers.Go(func() {
				for ctx.Err() == nil {
					if !c.enter(key) {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					m.call(key, j == 0, rng)
					c.leave(key)
					select {
					case <-ctx.Done():
					case <-time.After(200*time.Millisecond + upTo(rng, 500*time.Millisecond)):
					}
				}
			})
		}
	}
	c.t.Cleanup(func() {
		stop()
		c.killUntilDone()
	})
}

// call runs one semrun on key with its --min-hold, whose child holds 0.2
// to 1.2s: waiting in line for minHoldWait, or trying once.
func (m *minHold) call(key string, waits bool, rng *rand.Rand) {
	c := m.c
	r := c.newRun(key, 200+rng.IntN(1000), rng.IntN(101))
	c.mu.Lock()
	r.mayBeBusy, r.group = true, true
	c.mu.Unlock()
	try := "--no-wait"
	if waits {
		try = "--timeout=" + minHoldWait.String()
	}
	args := append([]string{"-k", key, "-n", strconv.Itoa(c.permits), "--ttl", ttl.String(), "--min-hold", m.d[key].String(), try,
		"--kill-after", killAfter.String(), "--connect-timeout", c.connect.String(), "--"}, c.childArgs(r)...)
	wait, err := c.spawn(r, args)
	if err != nil {
		c.t.Errorf("start semrun: %v", err)
		return
	}
	wait()
}

// victim waits, for at most a min hold and 2 TTLs (and the machine's
// allowance for its lag meanwhile, lag_test.go), for the next child of key
// to start, and returns it and its semrun.
func (m *minHold) victim(key string) (*kid, *run) {
	c := m.c
	after := c.rec.lastStart(key)
	began := mono()
	bound := func() time.Duration { return minHoldHi + 2*ttl + machine.allowance(began, mono()) }
	for time.Duration(mono()-began) < bound() {
		if c.rec.lastStart(key) > after {
			for _, k := range c.rec.running() {
				if k.key == key && k.start > after {
					if r := c.runningRun(k.run); r != nil {
						return k, r
					}
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, nil
}

// cycle waits for the next child of key and strikes its holder: a SIGKILL
// of its semrun and a silence after it (kill9); a SIGSTOP of its semrun's
// process group and its child's, past the lease and within the min hold
// (group SIGSTOP); or Redis restarted with its data (restart with data).
func (m *minHold) cycle(key, kind string, rng *rand.Rand) (silence, bool) {
	c := m.c
	k, r := m.victim(key)
	if k == nil {
		c.t.Errorf("%s: no child started within %v (a min hold, 2 TTLs and the machine's allowance)", key, minHoldHi+2*ttl+machine.allowance(mono()-int64(minHoldHi+2*ttl), mono()))
		return silence{}, false
	}
	switch kind {
	case "kill9":
		return m.killAndSilence(key, k, r, rng)
	case "group SIGSTOP":
		m.freeze(key, k, r, rng)
	case "drop replies":
		// A grant Redis made whose reply never came: semrun asks again,
		// and the grant it never heard of cools all the same.
		d := ttl/2 + upTo(rng, ttl)
		f := fault{what: fmt.Sprintf("drop 1/4 of replies for %v", d.Round(time.Millisecond)), start: mono()}
		c.proxy.DropReplies(0.25)
		time.Sleep(d)
		c.proxy.Heal()
		f.heal = mono()
		c.addFault(f)
		m.mu.Lock()
		m.drops++
		m.mu.Unlock()
	default:
		c.addFault(c.restartWithData(rng))
		m.mu.Lock()
		m.restarts++
		m.mu.Unlock()
	}
	return silence{}, false
}

// killAndSilence SIGKILLs r, leaves key silent for quietFor and a little
// once its last semrun exited, and lets the callers come again.
func (m *minHold) killAndSilence(key string, k *kid, r *run, rng *rand.Rand) (silence, bool) {
	c := m.c
	c.silence(key, true, 0)
	defer c.silence(key, false, 0)
	at := mono()
	if r.proc.Kill() != nil {
		return silence{}, false // it ended meanwhile
	}
	c.mu.Lock()
	r.killed = true
	c.mu.Unlock()
	// A kill excuses nothing: operator marks a fault that excuses no 112
	// or 125.
	c.addFault(fault{what: fmt.Sprintf("SIGKILL semrun %d (run %d) on %q, then silence", r.proc.Pid, r.id, key), start: at, heal: at, operator: true})
	s := silence{key: key, d: m.d[key], victim: r.id, grant: k.token*int64(time.Microsecond) - c.wallOff, killed: at}
	if s.from = c.silence(key, true, hangBound); s.from == 0 {
		c.t.Errorf("%s: semruns still under way %v after the kill", key, hangBound)
		return silence{}, false
	}
	time.Sleep(quietFor + upTo(rng, 300*time.Millisecond))
	s.to = mono()
	m.mu.Lock()
	m.silences = append(m.silences, s)
	m.mu.Unlock()
	return s, true
}

// freeze SIGSTOPs the process group of r's semrun and its child's (a
// paused VM) for 1.25 to 1.75 TTLs, past the lease, and SIGCONTs them at
// least 1.5s before the min hold since the grant is over: while frozen
// the child runs for the checks (it never said it ended), and a newcomer
// after the min hold would overlap it.
func (m *minHold) freeze(key string, k *kid, r *run, rng *rand.Rand) {
	c := m.c
	d := ttl + ttl/4 + upTo(rng, ttl/2)
	if left := time.Duration(k.start + int64(m.d[key]-1500*time.Millisecond) - mono()); left < d {
		d = left
	}
	if d < ttl+300*time.Millisecond {
		m.mu.Lock()
		m.skipped++
		m.mu.Unlock()
		return
	}
	groups := []int{r.proc.Pid} // its own group (run.group)
	if pg, err := unix.Getpgid(k.pid); err == nil && pg != r.proc.Pid {
		groups = append(groups, pg)
	}
	own := syscall.Getpgrp()
	for _, pg := range groups {
		if pg <= 1 || pg == own {
			c.t.Errorf("%s: will not stop process group %d (the harness's is %d)", key, pg, own)
			return
		}
	}
	f := fault{what: fmt.Sprintf("SIGSTOP process groups %v (run %d on %q) for %v", groups, r.id, key, d.Round(time.Millisecond)), start: mono()}
	for _, pg := range groups {
		_ = syscall.Kill(-pg, syscall.SIGSTOP)
	}
	time.Sleep(d)
	for _, pg := range groups {
		_ = syscall.Kill(-pg, syscall.SIGCONT)
	}
	f.heal = mono()
	c.addFault(f)
	m.mu.Lock()
	m.freezes++
	m.mu.Unlock()
}

// restartWithData restarts Redis keeping its data: SHUTDOWN SAVE (a
// SIGTERM that saves), or SIGKILL just after a SAVE made while writes were
// held (CLIENT PAUSE WRITE), so that no write comes between. A dump that
// was not written makes it a restart empty, which excuses the windows it
// spans (data lost is documented), and fails.
func (c *cluster) restartWithData(rng *rand.Rand) fault {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := c.client()
	f := fault{start: mono(), wallStart: time.Now().UnixMicro()}
	dir, err := rc.ConfigGet(ctx, "dir").Result()
	dump := filepath.Join(dir["dir"], "dump.rdb")
	if err != nil || dir["dir"] == "" {
		c.t.Errorf("CONFIG GET dir: %v %v", dir, err)
	}
	_ = os.Remove(dump)
	if rng.IntN(2) == 0 {
		f.what = "SHUTDOWN SAVE, restarted"
		_ = rc.ShutdownSave(ctx).Err() // the connection ends with the server
	} else {
		f.what = "CLIENT PAUSE WRITE, SAVE, SIGKILL, restarted"
		if err := errors.Join(rc.Do(ctx, "CLIENT", "PAUSE", "10000", "WRITE").Err(), rc.Save(ctx).Err()); err != nil {
			c.t.Errorf("hold writes and save: %v", err)
		}
	}
	if err := c.srv.Restart(); err != nil {
		c.t.Errorf("restart redis-server: %v", err)
	}
	f.heal, f.wallHeal = mono(), time.Now().UnixMicro()
	if _, err := os.Stat(dump); err != nil {
		c.t.Errorf("%s: no dump was saved (%v): restarted empty", f.what, err)
		f.restart, f.what = true, f.what+" EMPTY"
	}
	return f
}

// crowded returns the grants that broke a min hold: for each key, each
// pair of a child and the Nth child granted after it (by token: Redis's
// clock at the grant, in µs) less than its key's min hold later, as long
// as Redis did not restart empty between (its data lost: documented). At
// most N grants of a key fall within any min hold.
func crowded(kids []kid, n int, d map[string]time.Duration, faults []fault) [][2]kid {
	var out [][2]kid
	for _, g := range byKey(kids, func(a, b kid) int { return cmp.Compare(a.token, b.token) }) {
		for i := 0; i+n < len(g); i++ {
			a, b := g[i], g[i+n]
			if b.token-a.token >= d[a.key].Microseconds() || slices.ContainsFunc(faults, func(f fault) bool {
				return f.restart && f.wallHeal > a.token && f.wallStart < b.token
			}) {
				continue
			}
			out = append(out, [2]kid{a, b})
		}
	}
	return out
}

// crowdedSlots is crowded per slot: each slot of a key is a permit of its
// own, so a slot is granted at most once within its key's min hold (by
// tokens), its grants being those of the children told it.
func crowdedSlots(kids []kid, d map[string]time.Duration, faults []fault) [][2]kid {
	per := bySlot(kids)
	ds := map[string]time.Duration{}
	for _, k := range per {
		key, _ := keySlot(k.key)
		ds[k.key] = d[key]
	}
	return crowded(per, 1, ds, faults)
}

// crowdedStarts is crowded read from the children's starts: a child
// starts after its grant, at most slack(a, b) later for the first child a
// of a pair (the machine's allowance, lag_test.go, or how late a started
// after its token says it was granted, as when a lost reply was asked
// again, and a margin), so the Nth child of a key to start after another
// starts no sooner than the min hold less that slack.
func crowdedStarts(kids []kid, n int, d map[string]time.Duration, faults []fault, slack func(a, b kid) time.Duration) [][2]kid {
	var out [][2]kid
	for _, g := range byKey(kids, func(a, b kid) int { return cmp.Compare(a.start, b.start) }) {
		for i := 0; i+n < len(g); i++ {
			a, b := g[i], g[i+n]
			if b.start-a.start >= int64(d[a.key]-slack(a, b)) || slices.ContainsFunc(faults, func(f fault) bool {
				return f.restart && f.heal > a.start && f.start < b.start
			}) {
				continue
			}
			out = append(out, [2]kid{a, b})
		}
	}
	return out
}

// byKey groups the children by key, each group sorted by order.
func byKey(kids []kid, order func(a, b kid) int) [][]kid {
	m := map[string][]kid{}
	for _, k := range kids {
		m[k.key] = append(m[k.key], k)
	}
	var out [][]kid
	for _, key := range slices.Sorted(maps.Keys(m)) {
		g := m[key]
		slices.SortFunc(g, order)
		out = append(out, g)
	}
	return out
}

// startSlack is what crowdedStarts allows between a's grant and its
// start: the machine's allowance, or how much later than its token (on
// the wall clock, turned into mono()) it started, and 100ms.
func (c *cluster) startSlack(a, b kid) time.Duration {
	late := time.Duration(a.start - (a.token*int64(time.Microsecond) - c.wallOff))
	return max(machine.allowance(a.start-int64(time.Second), b.start), late) + 100*time.Millisecond
}

// check runs min-hold-kill9's own checks: no more than N grants of a key
// within its min hold, by the tokens and by the children's starts; and
// at least one kill followed by a silence that tested the cooling (a
// checker that saw nothing fails).
func (m *minHold) check(fig *figures) {
	c := m.c
	kids, _ := c.rec.snapshot()
	c.mu.Lock()
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	m.mu.Lock()
	silences := slices.Clone(m.silences)
	freezes, restarts, skipped, drops := m.freezes, m.restarts, m.skipped, m.drops
	m.mu.Unlock()
	byTokens := crowded(kids, c.permits, m.d, faults)
	byStarts := crowdedStarts(kids, c.permits, m.d, faults, c.startSlack)
	// A cooling permit keeps its slot: one slot is granted once per min
	// hold.
	bySlots := crowdedSlots(kids, m.d, faults)
	for i, p := range bySlots {
		if i == 5 {
			c.t.Errorf("... and %d more slots granted twice within a min hold", len(bySlots)-5)
			break
		}
		key, slot := keySlot(p[0].key)
		c.t.Errorf("once per window: %s and %s were both granted slot %d of key %q (--min-hold %v) %v apart, by their tokens; faults near: %s",
			c.describe(p[0]), c.describe(p[1]), slot, key, m.d[key], time.Duration((p[1].token-p[0].token)*int64(time.Microsecond)).Round(time.Millisecond), c.faultsNear(p[1].start))
	}
	fig.slotOverlaps += len(bySlots)
	for i, p := range append(slices.Clone(byTokens), byStarts...) {
		if i == 10 {
			c.t.Errorf("... and %d more", len(byTokens)+len(byStarts)-10)
			break
		}
		how := "granted"
		if i >= len(byTokens) {
			how = "started"
		}
		c.t.Errorf("once per window: %s and %s, of key %q with %d permits and --min-hold %v, were %s %v apart, %d grants within the min hold; faults near: %s",
			c.describe(p[0]), c.describe(p[1]), p[0].key, c.permits, m.d[p[0].key], how, time.Duration(p[1].start-p[0].start).Round(time.Millisecond), c.permits+1, c.faultsNear(p[1].start))
	}
	fig.overlaps += len(byTokens) + len(byStarts)
	tested, why := silencesTested(silences)
	if why != "" {
		fig.bad++
		c.t.Errorf("%s: %s", c.keys, why)
	}
	var quiet []time.Duration
	for _, s := range silences {
		quiet = append(quiet, time.Duration(s.to-s.from))
	}
	least := time.Duration(0)
	if len(quiet) > 0 {
		least = slices.Min(quiet)
	}
	fig.faults = len(silences) + freezes + restarts + drops
	fig.faultNote = fmt.Sprintf("%d kills then silences (%d back within the min hold; silent %v to %v), %d group SIGSTOPs (%d skipped), %d restarts with data, %d spells of dropped replies (%d dropped); %d grants within a min hold by token, %d by start",
		len(silences), tested, least.Round(time.Millisecond), maxDur(quiet).Round(time.Millisecond), freezes, skipped, restarts, drops, c.proxy.Counts().Dropped, len(byTokens), len(byStarts))
}

// silencesTested counts the silences that tested the cooling, and says
// what is wrong when none did.
func silencesTested(ss []silence) (int, string) {
	n := 0
	for _, s := range ss {
		if s.meaningful() {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Sprintf("of %d kills and silences, none was silent for %v and let callers come back within the killed holder's min hold: nothing tested the cooling", len(ss), quietFor)
	}
	return n, ""
}
