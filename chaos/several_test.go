//go:build linux

package chaos

import (
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
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/semaphore"
)

// Several keys at once (semrun -k a -n 3 -k b -n 1 ...; semantics,
// section 12): the several-keys nemesis and its checks. Callers list three
// keys of different capacities in every order, and two of them in every
// order, under the harness's faults; the checks read each child's
// SEMRUN_FENCING_TOKENS and count it a holder of each of its keys, with
// that key's token. See the package comment.

// severalKeys are the keys of several-keys, by the end of their name, and
// their capacities. One has an '=' in its name: SEMRUN_FENCING_TOKENS's
// token follows the last one of its line.
var severalKeys = []struct {
	name    string
	permits int
}{{"a", 3}, {"b=x", 1}, {"c", 2}}

const (
	// severalWait is the callers' --timeout: a line whose head waits for
	// nobody moves well within it (ten callers want each key, and one key
	// has one permit: a turn of them takes about 5s), so a caller that
	// gives up tells of a line that did not move, or of a fault.
	severalWait = 5 * ttl
	// severalHoldMax bounds the children's holds (within -chaos.hold-min
	// and -max): every caller needs the key of one permit or the one of
	// two, one after another.
	severalHoldMax = 300 * time.Millisecond
	// severalTurns counts the workers' turns (enter, leave, silence): all
	// of them, since every caller shares a key with every other.
	severalTurns = "several"
)

// frozen is a run's semrun and child frozen whole (SIGSTOP), from when
// until when (mono()).
type frozen struct{ from, to int64 }

// several is the several-keys nemesis's run (and the priorities
// nemesis's): its cluster, its callers' orders of keys, and what it did.
type several struct {
	c      *cluster
	prefix string // of the keys' names, for the figures
	orders [][]string
	// flags, when set, are more flags for the semruns of the worker of
	// orders[i] (priorities_test.go).
	flags func(i int) []string
	// worker is the worker (its index in orders) of each run, by id.
	worker map[int]int
	mu     sync.Mutex
	kills  []time.Duration // from a kill until the child's connection ended
	// Counts of what it did, by kind.
	did map[string]int
	// givenBack: how many times Redis's holders were read once every
	// semrun but those killed had exited (endTurns); notGivenBack: the
	// semruns then holding a permit though they had exited, unexcused.
	givenBack, notGivenBack int
	checks                  sync.WaitGroup // the kills' looks at their child, killFailure later
}

// runSeveral is the several-keys nemesis: one cluster behind a proxy,
// a caller per order of keys, a fault at a time, then the checks of every
// nemesis, per key, and its own.
func runSeveral(t *testing.T, n nemesis, seed uint64) figures {
	return runLines(t, n, seed, lines{keys: severalKeys, orders: keyOrders, peace: onePeace, check: (*several).check})
}

// lines says what runLines runs and checks.
type lines struct {
	// keys are the keys, by the end of their name, and their capacities.
	keys []struct {
		name    string
		permits int
	}
	// orders are the workers' lists of keys, a worker per list.
	orders func(keys []string) [][]string
	// flags, when set, are more flags of the ith worker's semruns.
	flags func(i int) []string
	// peace is how long the callers call in peace after the ith fault.
	peace func(i int, rng *rand.Rand) time.Duration
	// watch, when set, watches from the first child until done is
	// closed, as the faults come and go, and returns then.
	watch func(s *several, done <-chan struct{})
	// check runs the nemesis's own checks, after every nemesis's.
	check func(s *several, fig *figures, stopped int64)
}

// onePeace is about one TTL of peace after each fault.
func onePeace(_ int, rng *rand.Rand) time.Duration { return ttl/2 + upTo(rng, ttl/2) }

// runLines runs callers of l's keys, a worker per order of keys, under
// several-keys' faults, a fault at a time; then the checks of every
// nemesis, per key, and l's.
func runLines(t *testing.T, n nemesis, seed uint64, l lines) figures {
	keys, peace := l.keys, l.peace
	began := time.Now()
	c := newCluster(t, nemesis{name: n.name, proxied: true}, len(keys), 1, seed)
	c.keys, c.capacity, c.woke = nil, map[string]int{}, map[int]frozen{}
	for _, k := range keys {
		key := n.name + "-" + k.name
		c.keys = append(c.keys, key)
		c.capacity[key] = k.permits
	}
	s := &several{c: c, prefix: n.name + "-", orders: l.orders(c.keys), flags: l.flags, worker: map[int]int{}, did: map[string]int{}}
	s.start(seed)
	sampled := c.watchHolders()
	// A fresh server grants nothing for a TTL (the restart fence); the
	// bound only catches a hang.
	if c.startedAfter(c.t0, hangBound) < 0 {
		t.Fatalf("no child started within %v of the start", hangBound)
	}
	watched, watching := make(chan struct{}), sync.WaitGroup{}
	if l.watch != nil {
		watching.Go(func() { l.watch(s, watched) })
	}
	time.Sleep(ttl / 2)
	rng := rand.New(rand.NewPCG(seed, 1))
	kinds := []string{"kill9", "SIGSTOP", "proxy", "restart empty", "restart with data"}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	fig := figures{name: n.name}
	end, limit := time.Now().Add(*duration), time.Now().Add(4**duration)
	more := func() bool {
		return time.Now().Before(end) || grants.Load() < *grantsGoal && time.Now().Before(limit)
	}
	for i := 0; more(); i++ {
		kind := kinds[i%len(kinds)]
		f := s.strike(kind, rng)
		c.addFault(f)
		c.awaitHeal(t, f, &fig)
		slack := time.Duration(0)
		if kind == "restart with data" && !f.restart {
			// Restarted with its data, under a new replication id: each key's
			// fence starts at the first call that may grant it. Taken one
			// after another (a Cluster), a caller's keys' fences could run one
			// after another; on one Redis one call starts them all, and this
			// allowance is then more than needed.
			slack = time.Duration(max(len(keys)-1, 1)) * (ttl + time.Second)
		}
		fig.healMore = append(fig.healMore, slack)
		if more() {
			time.Sleep(peace(i, rng))
		}
	}
	s.checks.Wait()
	close(watched)
	watching.Wait()
	stopped := mono()
	// The callers stop, and those still waiting are SIGTERMed, so that the
	// run ends within a hold rather than a --timeout: what they took must
	// go back at once.
	s.endTurns()
	last, killed := c.drain(hangBound)
	if killed > 0 {
		t.Errorf("%d semruns still ran %v after the workers stopped; killed", killed, hangBound)
	}
	fig.leaked, fig.permitsFree = c.waitAllFree(last)
	if open := c.rec.quiet(hangBound); open > 0 {
		t.Errorf("%d children still connected %v after the last semrun ended", open, hangBound)
	}
	fig.overbookedCheck(t, sampled)
	c.check(&fig, nemesis{name: n.name, excuses: true})
	l.check(s, &fig, stopped)
	fig.wall = time.Since(began)
	t.Logf("%s: %d semruns, %d children, %d faults, %d overlaps, %d by token order, %d tokens reused, %s, %d leaked permits (all free %v after the last semrun), "+
		"heal max %v (target %v), %d lost (112), %d unreachable (125), %d of them on a starved machine, %d bad statuses; %s; machine lag max %v, wall %v",
		n.name, fig.runs, fig.grants, fig.faults, fig.overlaps, fig.tokenOrder, fig.reused, fig.slotNote(), fig.leaked, fig.permitsFree.Round(time.Millisecond),
		maxDur(fig.heal).Round(time.Millisecond), healTarget.Round(time.Millisecond), fig.lost, fig.failed, fig.starved, fig.bad, fig.faultNote,
		machine.lag(c.t0, mono()).Round(time.Millisecond), fig.wall.Round(100*time.Millisecond))
	return fig
}

// keyOrders are every order of keys, and every order of every two of
// them: the callers' -k lists.
func keyOrders(keys []string) [][]string {
	var out [][]string
	var perm func(done, rest []string)
	perm = func(done, rest []string) {
		if len(rest) == 0 {
			out = append(out, done)
			return
		}
		for i := range rest {
			perm(append(slices.Clone(done), rest[i]), slices.Delete(slices.Clone(rest), i, i+1))
		}
	}
	perm(nil, keys)
	for _, a := range keys {
		for _, b := range keys {
			if a != b {
				out = append(out, []string{a, b})
			}
		}
	}
	return out
}

// start starts a worker per order of keys: each calls semrun on its keys
// again and again, waiting in line for at most severalWait, in a process
// group of its own, pausing up to 100ms between calls.
func (s *several) start(seed uint64) {
	c := s.c
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	for i, order := range s.orders {
		rng := rand.New(rand.NewPCG(seed, uint64(2000+i)))
		c.workers.Go(func() {
			for ctx.Err() == nil {
				if !c.enter(severalTurns) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				s.call(i, order, rng)
				c.leave(severalTurns)
				select {
				case <-ctx.Done():
				case <-time.After(upTo(rng, 100*time.Millisecond)):
				}
			}
		})
	}
	c.t.Cleanup(func() {
		stop()
		c.killUntilDone()
	})
}

// call runs one semrun of worker i on keys, -n and --weight once per
// key.
func (s *several) call(i int, keys []string, rng *rand.Rand) {
	c := s.c
	lo, hi := holdMin.Milliseconds(), max(min(holdMax.Milliseconds(), severalHoldMax.Milliseconds()), holdMin.Milliseconds())
	r := c.newRun(keys[0], int(lo+rng.Int64N(hi-lo+1)), rng.IntN(101))
	c.mu.Lock()
	r.keys, r.mayBeBusy, r.group, r.timeout = keys, true, true, severalWait
	c.mu.Unlock()
	s.mu.Lock()
	s.worker[r.id] = i
	s.mu.Unlock()
	// Half the calls ask for two permits of the key of three, so that
	// SEMRUN_KEY_SLOTS lists several slots of a key.
	heavy := rng.IntN(2) == 0
	var args []string
	var weights []int
	for _, key := range keys {
		w := 1
		if heavy && c.permitsOf(key) == 3 {
			w = 2
		}
		args = append(args, "-k", key, "-n", strconv.Itoa(c.permitsOf(key)), "--weight", strconv.Itoa(w))
		weights = append(weights, w)
	}
	c.mu.Lock()
	r.weights = weights
	c.mu.Unlock()
	if s.flags != nil {
		args = append(args, s.flags(i)...)
	}
	args = append(args, "--ttl", ttl.String(), "--timeout", severalWait.String(), "--kill-after", killAfter.String(),
		"--connect-timeout", c.connect.String(), "--")
	wait, err := c.spawn(r, append(args, c.childArgs(r)...))
	if err != nil {
		c.t.Errorf("start semrun: %v", err)
		time.Sleep(100 * time.Millisecond)
		return
	}
	wait()
}

// count counts one thing done.
func (s *several) count(what string) {
	s.mu.Lock()
	s.did[what]++
	s.mu.Unlock()
}

// strike makes one fault of kind and returns it once it healed.
func (s *several) strike(kind string, rng *rand.Rand) fault {
	c := s.c
	switch kind {
	case "kill9":
		return s.killThenSilence(rng)
	case "SIGSTOP":
		return s.freeze(rng)
	case "proxy":
		d := opFaultTime(rng)
		switch rng.IntN(3) {
		case 0:
			s.count("late replies")
			late := ttl/2 + upTo(rng, ttl)
			f := fault{what: fmt.Sprintf("every reply %v late for %v", late.Round(time.Millisecond), d.Round(time.Millisecond)), start: mono()}
			c.proxy.Delay(late)
			time.Sleep(d)
			c.proxy.Heal()
			f.heal = mono()
			return f
		case 1:
			s.count("blackhole")
			return blackhole(c, rng, d)
		default:
			s.count("dropped replies")
			f := fault{what: fmt.Sprintf("drop 1/4 of replies for %v", d.Round(time.Millisecond)), start: mono()}
			c.proxy.DropReplies(0.25)
			time.Sleep(d)
			c.proxy.Heal()
			f.heal = mono()
			return f
		}
	case "restart empty":
		s.count(kind)
		return restartRedis(c, rng)
	default:
		s.count(kind)
		return c.restartWithData(rng)
	}
}

// killThenSilence stops the callers from calling, SIGKILLs a semrun whose
// child runs and one that holds some of its keys while it waits for the
// others, SIGTERMs every semrun still waiting, reads Redis's holders once
// every semrun but those killed has exited (all they held was given
// back), leaves the keys silent for 0.5 to 2.5 TTLs, and lets the callers
// call again. A kill excuses nothing.
func (s *several) killThenSilence(rng *rand.Rand) fault {
	c := s.c
	c.silence(severalTurns, true, 0)
	defer c.silence(severalTurns, false, 0)
	f := fault{start: mono(), operator: true}
	var victims []*run
	var what []string
	if k, r := c.victim(rng); r != nil {
		victims, what = append(victims, r), append(what, s.kill(r, k))
	}
	if r, _ := s.waiter(true); r != nil {
		victims, what = append(victims, r), append(what, s.kill(r, nil))
	}
	if len(victims) == 0 {
		f.what, f.heal = "kill: no semrun under way", mono()
		return f
	}
	interrupted := s.endTurns()
	quiet := ttl/2 + upTo(rng, 2*ttl)
	time.Sleep(quiet)
	f.heal = mono()
	f.what = fmt.Sprintf("%s; %d waiters SIGTERMed, silent %v", strings.Join(what, "; "), interrupted, quiet.Round(time.Millisecond))
	return f
}

// endTurns stops the callers from calling, SIGTERMs every semrun that
// waits until none is under way, and then reads Redis's holders: nothing
// may be held for a semrun that exited, but those killed (checkGivenBack).
// It returns how many it SIGTERMed.
func (s *several) endTurns() int {
	c := s.c
	c.silence(severalTurns, true, 0)
	// Which waiters hold some of their keys, as they are SIGTERMed.
	held, err := s.holders()
	if err != nil {
		c.t.Errorf("several-keys: read the holders before the waiters were SIGTERMed: %v", err)
	}
	n := s.interrupt(held)
	deadline := time.Now().Add(hangBound)
	for c.silence(severalTurns, true, 20*time.Millisecond) == 0 {
		if time.Now().After(deadline) {
			c.t.Errorf("semruns still under way %v after the waiters were SIGTERMed", hangBound)
			return n
		}
		n += s.interrupt(nil)
	}
	s.checkGivenBack()
	return n
}

// kill SIGKILLs r's semrun. When its child k runs, a pidfd of the child,
// opened before the kill, tells killFailure later whether it still lives
// (it must not); and the kill's latency, until the child's connection
// ended, is a figure. It says what it did.
func (s *several) kill(r *run, k *kid) string {
	c := s.c
	pidfd := -1
	if k != nil {
		if fd, err := unix.PidfdOpen(k.pid, 0); err == nil {
			pidfd = fd
		}
	}
	at := mono()
	if r.proc.Kill() != nil {
		if pidfd >= 0 {
			_ = unix.Close(pidfd)
		}
		return fmt.Sprintf("SIGKILL of run %d: it had ended", r.id)
	}
	c.mu.Lock()
	r.killed = true
	c.mu.Unlock()
	if k == nil {
		s.count("kill of a waiter")
		return fmt.Sprintf("SIGKILL semrun %d (run %d, waiting, %q)", r.proc.Pid, r.id, r.keys)
	}
	s.count("kill of a holder")
	if pidfd >= 0 {
		s.checks.Go(func() {
			defer unix.Close(pidfd)
			time.Sleep(time.Duration(at + int64(killFailure) - mono()))
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			if n, err := unix.Poll(fds, 0); err == nil && n == 0 {
				c.t.Errorf("the child (pid %d) of SIGKILLed semrun %d (run %d) still lived %v after the kill (target %v)",
					k.pid, r.proc.Pid, r.id, killFailure, killTarget)
			}
		})
	}
	select {
	case <-k.goneCh:
		if k.end >= at {
			s.mu.Lock()
			s.kills = append(s.kills, time.Duration(k.gone-at))
			s.mu.Unlock()
		}
	case <-time.After(hangBound):
		c.t.Errorf("the child (pid %d) of SIGKILLed semrun %d (run %d) is still there after %v", k.pid, r.proc.Pid, r.id, hangBound)
	}
	return fmt.Sprintf("SIGKILL semrun %d (run %d, its child running, %q)", r.proc.Pid, r.id, r.keys)
}

// waiting returns the semruns under way whose child has not said it
// started, launched at least since ago, neither killed nor SIGTERMed.
func (s *several) waiting(since time.Duration) []*run {
	c := s.c
	before := mono() - int64(since)
	c.mu.Lock()
	var out []*run
	for _, r := range c.runs {
		if r.proc != nil && r.exited == 0 && !r.killed && !r.interrupted && r.launched <= before {
			out = append(out, r)
		}
	}
	c.mu.Unlock()
	return slices.DeleteFunc(out, func(r *run) bool { _, ok := c.rec.get(r.id); return ok })
}

// waiter picks a semrun that waits, launched at least 200ms ago; with
// holding, one that Redis counts among the holders of a key, if any: it
// holds some of its keys and waits for the others. It returns the keys it
// holds, as Redis said.
func (s *several) waiter(holding bool) (*run, []string) {
	ws := s.waiting(200 * time.Millisecond)
	if len(ws) == 0 {
		return nil, nil
	}
	slices.SortFunc(ws, func(a, b *run) int { return cmp.Compare(a.launched, b.launched) })
	if holding {
		held, err := s.holders()
		if err != nil {
			s.c.t.Logf("several-keys: %v", err)
		}
		for _, r := range ws {
			if keys := held[r.proc.Pid]; len(keys) > 0 {
				return r, keys
			}
		}
	}
	return ws[0], nil
}

// holders reads, with semrun status --json as an operator does, the keys
// each semrun (by pid) holds a live permit of.
func (s *several) holders() (map[int][]string, error) {
	c := s.c
	res := c.operate(opBound, opConnect, append([]string{"status", "--json"}, c.keys...)...)
	if res.status != 0 {
		return nil, fmt.Errorf("semrun status exited %d: %q", res.status, res.stderr)
	}
	var st []semaphore.KeyStatus
	if err := json.Unmarshal([]byte(res.stdout), &st); err != nil {
		return nil, fmt.Errorf("semrun status --json printed %q: %v", res.stdout, err)
	}
	held := map[int][]string{}
	for _, k := range st {
		for _, h := range k.Holders {
			if h.ExpiresIn > 0 {
				held[h.PID] = append(held[h.PID], k.Key)
			}
		}
	}
	return held, nil
}

// interrupt SIGTERMs every semrun that waits, and returns how many: a
// terminating signal ends a wait at once, and every key taken goes back.
func (s *several) interrupt(held map[int][]string) int {
	n, holding := 0, 0
	for _, r := range s.waiting(0) {
		s.c.mu.Lock()
		r.interrupted, r.interruptedAt = true, mono()
		s.c.mu.Unlock()
		if r.proc.Signal(syscall.SIGTERM) == nil {
			n++
			if len(held[r.proc.Pid]) > 0 {
				holding++
			}
		}
	}
	s.mu.Lock()
	s.did["waiter SIGTERMed"] += n
	s.did["waiter holding some keys SIGTERMed"] += holding
	s.mu.Unlock()
	return n
}

// checkGivenBack reads Redis's holders once every semrun but the ones
// killed has exited: a live permit of any other tells of a semrun that did
// not give back what it held, unless a fault of Redis, or a starved
// machine, came while it ran (a release is given 2s at most, and a permit
// it failed to give back lapses within the TTL). A semrun SIGKILLed, now
// or before, gives nothing back: its permits lapse, or live on a little
// when a silence pushed its leases back.
func (s *several) checkGivenBack() {
	c := s.c
	held, err := s.holders()
	if err != nil {
		c.t.Errorf("several-keys: read the holders after the silence began: %v", err)
		return
	}
	c.mu.Lock()
	byPID := map[int]run{}
	killed := map[int]bool{}
	for _, r := range c.runs {
		if r.proc == nil {
			continue
		}
		if r.killed {
			killed[r.proc.Pid] = true
			continue
		}
		byPID[r.proc.Pid] = *r
	}
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	s.mu.Lock()
	s.givenBack++
	s.mu.Unlock()
	for _, pid := range slices.Sorted(maps.Keys(held)) {
		if killed[pid] {
			continue
		}
		r, ok := byPID[pid]
		excused := ok && (starved(statusFailure, r.launched, r.exited) || slices.ContainsFunc(faults, func(f fault) bool {
			return !f.operator && r.launched <= f.heal+int64(ttl) && r.exited >= f.start
		}))
		if excused {
			continue
		}
		s.mu.Lock()
		s.notGivenBack++
		s.mu.Unlock()
		c.t.Errorf("not given back: pid %d (run %d, %q, exited %d at %s, interrupted %v) still held %q once it had exited; its stderr: %q",
			pid, r.id, r.keys, r.status, c.rel(r.exited), r.interrupted, held[pid], r.stderr)
	}
}

// freeze SIGSTOPs, for 1.25 to 1.75 TTLs, past the lease, a semrun that
// holds some of its keys and waits for the others (it must not start its
// command on a permit that lapsed meanwhile), and a semrun whose child
// runs, with the child's group (a paused VM: on waking it must stop the
// child, exit 112 and name a key). Each semrun leads a group of its own;
// a waiter whose child started as it was stopped is frozen whole too.
func (s *several) freeze(rng *rand.Rand) fault {
	c := s.c
	type target struct {
		r      *run
		kind   string
		held   []string
		groups []int
	}
	var ts []*target
	if _, r := c.victim(rng); r != nil {
		ts = append(ts, &target{r: r, kind: "a holder"})
	}
	if r, held := s.waiter(true); r != nil {
		kind := "a waiter"
		if len(held) > 0 {
			kind = "a waiter holding some keys"
		}
		ts = append(ts, &target{r: r, kind: kind, held: held})
	}
	f := fault{start: mono()}
	if len(ts) == 0 {
		f.what, f.heal = "SIGSTOP: no semrun under way", mono()
		return f
	}
	own := syscall.Getpgrp()
	for _, t := range ts {
		if t.r.proc.Pid <= 1 || t.r.proc.Pid == own {
			c.t.Errorf("will not stop process group %d (the harness's is %d)", t.r.proc.Pid, own)
			f.what, f.heal = "SIGSTOP: refused", mono()
			return f
		}
	}
	d := ttl + ttl/4 + upTo(rng, ttl/2)
	for _, t := range ts {
		t.groups = []int{t.r.proc.Pid}
		_ = syscall.Kill(-t.r.proc.Pid, syscall.SIGSTOP)
		// Its child, if it started one: in a group of its own once it runs.
		for _, pid := range childPIDs(t.r.proc.Pid) {
			if pg, err := unix.Getpgid(pid); err == nil && pg > 1 && pg != own && !slices.Contains(t.groups, pg) {
				_ = syscall.Kill(-pg, syscall.SIGSTOP)
				t.groups = append(t.groups, pg)
			}
		}
	}
	time.Sleep(d)
	for _, t := range ts {
		for _, pg := range t.groups {
			_ = syscall.Kill(-pg, syscall.SIGCONT)
		}
	}
	f.heal = mono()
	var what []string
	for _, t := range ts {
		whole := ""
		if len(t.groups) > 1 {
			whole = " with its child"
			c.mu.Lock()
			c.woke[t.r.id] = frozen{from: f.start, to: f.heal}
			c.mu.Unlock()
		}
		s.count("SIGSTOP of " + t.kind + whole)
		what = append(what, fmt.Sprintf("%s%s, process groups %v (run %d, %q, holding %q)", t.kind, whole, t.groups, t.r.id, t.r.keys, t.held))
	}
	f.what = fmt.Sprintf("SIGSTOP of %s, for %v", strings.Join(what, " and "), d.Round(time.Millisecond))
	return f
}

// childPIDs are the children of process pid, of all its threads.
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// check runs several-keys' own checks, on the children's lines and the
// semruns' statuses: each child's SEMRUN_FENCING_TOKENS names its run's
// keys in order, the first as SEMRUN_HELD_KEY and SEMRUN_FENCING_TOKEN;
// a 112 or a 75 names a key of its own; no span from the first child to
// stopped when no child ran, with no fault near (a deadlock); every order
// of keys ran unless faults explain its waits given up, and more runs ran
// than gave up with nothing to explain it (progress). The checks of every
// nemesis (overlaps, tokens, per key) ran before.
func (s *several) check(fig *figures, stopped int64) {
	c := s.c
	kids, byRun, first := kidsByRun(c.rec)
	c.mu.Lock()
	runs := make([]run, 0, len(c.runs))
	for _, r := range c.runs {
		if r.proc != nil {
			runs = append(runs, *r)
		}
	}
	faults := slices.Clone(c.faults)
	c.mu.Unlock()
	slices.SortFunc(runs, func(a, b run) int { return a.id - b.id })
	reported := 0
	for _, r := range runs {
		why := severalVerdict(r, byRun[r.id])
		if why == "" {
			continue
		}
		fig.bad++
		if reported++; reported <= 10 {
			c.t.Errorf("semrun run %d on %q from %s to %s: %s", r.id, r.keys, c.rel(r.launched), c.rel(r.exited), why)
		}
	}
	if reported > 10 {
		c.t.Errorf("... and %d more", reported-10)
	}

	// A heal may take longer after some faults (runSeveral): so may a stall.
	longer := slices.Clone(faults)
	for i := range longer {
		if i < len(fig.healMore) {
			longer[i].heal += int64(fig.healMore[i])
		}
	}
	gaps := stalls(kids, first, stopped, longer, func(from, to int64) time.Duration { return healFailure + machine.allowance(from, to) })
	for _, g := range gaps {
		fig.bad++
		c.t.Errorf("no child of any key ran from %s to %s (%v), with callers waiting and no fault within %v before: a deadlock, or a line that did not move; faults near: %s",
			c.rel(g[0]), c.rel(g[1]), time.Duration(g[1]-g[0]).Round(time.Millisecond), healFailure, c.faultsNear(g[0]))
	}

	counts, why := progress(runs, byRun, len(s.orders), func(r run) bool {
		return starved(statusLost, r.launched, r.exited) || slices.ContainsFunc(longer, func(f fault) bool {
			return r.launched <= f.heal+int64(healFailure) && r.exited >= f.start
		})
	})
	if why != "" {
		fig.bad++
		c.t.Errorf("several-keys: %s", why)
	}
	ran, gaveUp, clear := 0, 0, 0
	var byOrder []string
	for _, order := range slices.Sorted(maps.Keys(counts)) {
		n := counts[order]
		ran, gaveUp, clear = ran+n[0], gaveUp+n[1], clear+n[2]
		byOrder = append(byOrder, fmt.Sprintf("%s %d/%d", strings.ReplaceAll(order, s.prefix, ""), n[0], n[1]))
	}
	held := map[string]int{}
	for _, k := range perKey(kids) {
		held[k.key]++
	}
	var intervals []string
	for _, key := range c.keys {
		intervals = append(intervals, fmt.Sprintf("%s (N=%d) %d", strings.TrimPrefix(key, s.prefix), c.permitsOf(key), held[key]))
	}
	did, givenBack, notGivenBack := s.tally(fig, len(faults))
	fig.faultNote = fmt.Sprintf("%s; holders per key: %s; ran/gave up (75) by order: %s (%d/%d in all, %d given up with no fault near); holders read %d times once every semrun but the killed had exited, %d not given back; %d stalls",
		did, strings.Join(intervals, ", "), strings.Join(byOrder, ", "), ran, gaveUp, clear, givenBack, notGivenBack, len(gaps))
}

// tally gives fig the nemesis's kills and its count of faults, and says
// what it did ("N what, ...") and how many holders it found given back
// or not.
func (s *several) tally(fig *figures, faults int) (did string, givenBack, notGivenBack int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fig.kills = slices.Clone(s.kills)
	fig.faults = faults
	var each []string
	for _, what := range slices.Sorted(maps.Keys(s.did)) {
		each = append(each, fmt.Sprintf("%d %s", s.did[what], what))
	}
	return strings.Join(each, ", "), s.givenBack, s.notGivenBack
}

// perKey returns the children with each child of several keys (it said
// more than one KEY=TOKEN) in its place once per key, with that key's
// token and slots (SEMRUN_KEY_SLOTS; none when it named no such key): it
// held a permit of each, from its start to its end.
func perKey(kids []kid) []kid {
	out := make([]kid, 0, len(kids))
	for _, k := range kids {
		if len(k.tokens) < 2 {
			out = append(out, k)
			continue
		}
		for _, kt := range k.tokens {
			x := k
			x.key, x.token = kt.key, kt.token
			x.slots, x.slotted = nil, false
			if i := slices.IndexFunc(k.keySlots, func(ks keySlots) bool { return ks.key == kt.key }); i >= 0 {
				x.slots, x.slotted = k.keySlots[i].slots, true
			}
			out = append(out, x)
		}
	}
	return out
}

// clipWoken ends at the freeze the children frozen whole with their
// semrun (woke, by run) that were stopped, or ended, as they woke: within
// --kill-after, 100ms and the machine's allowance of the thaw. Such a
// child runs for a moment on waking beside whoever its permit lapsed to
// meanwhile, which no semrun can help (a paused VM: docs/how-it-works.md,
// "Known limits"), and its token fences it. One that ran on longer held
// throughout, and its overlaps count. A child whose process was frozen
// before it said it started (its group was stopped with its semrun's)
// says so only on waking: stopped as it woke, it held nothing after the
// freeze, and is left out.
func clipWoken(kids []kid, woke map[int]frozen, allowance func(from, to int64) time.Duration) []kid {
	if len(woke) == 0 {
		return kids
	}
	out := make([]kid, 0, len(kids))
	for _, k := range kids {
		f, ok := woke[k.run]
		if ok && k.end != 0 && k.end > f.from && k.end <= f.to+int64(killAfter+100*time.Millisecond+allowance(f.to, k.end)) {
			if k.start >= f.from {
				continue
			}
			k.end = f.from
		}
		out = append(out, k)
	}
	return out
}

// stalls returns the spans from from to to in which no child of any key
// ran, less each fault and healFailure after it (a heal may take that),
// that last longer than bound says. The callers wait all the time, and
// every caller takes its keys in one order: one of them can always go on.
// A span with nobody running is a deadlock, or a line that does not move.
func stalls(kids []kid, from, to int64, faults []fault, bound func(from, to int64) time.Duration) [][2]int64 {
	var busy [][2]int64
	for _, k := range kids {
		end := k.end
		if end == 0 {
			end = 1<<63 - 1
		}
		busy = append(busy, [2]int64{k.start, end})
	}
	for _, f := range faults {
		busy = append(busy, [2]int64{f.start, f.heal + int64(healFailure)})
	}
	slices.SortFunc(busy, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	gap := func(a, b int64) {
		if b > a && time.Duration(b-a) > bound(a, b) {
			out = append(out, [2]int64{a, b})
		}
	}
	at := from
	for _, b := range busy {
		if at >= to {
			break
		}
		gap(at, min(b[0], to))
		at = max(at, b[1])
	}
	gap(at, to)
	return out
}

// progress counts, by order of keys (joined with commas), the runs whose
// child started, those that gave up waiting (75), and those of them that
// nothing excuses (excused: a fault while it waited, or a starved
// machine), and says what is wrong: an order none of whose runs ran, that
// gave up with nothing to excuse it (callers that listed the keys in
// another order passed it for good), or fewer runs that ran than gave up
// with nothing to excuse it, in all (the lines hardly moved).
func progress(runs []run, byRun map[int]*kid, orders int, excused func(run) bool) (map[string][3]int, string) {
	counts := map[string][3]int{}
	for _, r := range runs {
		if len(r.keys) < 2 {
			continue
		}
		order := strings.Join(r.keys, ",")
		n := counts[order]
		switch {
		case byRun[r.id] != nil:
			n[0]++
		case r.status == statusBusy:
			n[1]++
			if !excused(r) {
				n[2]++
			}
		}
		counts[order] = n
	}
	ran, clear := 0, 0
	var never []string
	for _, order := range slices.Sorted(maps.Keys(counts)) {
		n := counts[order]
		ran, clear = ran+n[0], clear+n[2]
		if n[0] == 0 && n[2] > 0 {
			never = append(never, order)
		}
	}
	switch {
	case len(counts) < orders:
		return counts, fmt.Sprintf("callers of %d orders of keys ran semrun, want %d", len(counts), orders)
	case len(never) > 0:
		return counts, fmt.Sprintf("the callers of %q never ran their command, and gave up waiting with no fault near", never)
	case ran < clear:
		return counts, fmt.Sprintf("%d runs ran their command and %d gave up waiting (--timeout %v) with no fault near: the lines hardly moved", ran, clear, severalWait)
	}
	return counts, ""
}

// severalVerdict says what is wrong with a run of several keys beyond its
// status (judge), "" when nothing: its child's SEMRUN_FENCING_TOKENS names
// the run's keys in the order given, the first with SEMRUN_HELD_KEY and
// SEMRUN_FENCING_TOKEN; a loss (112) names a key of its own, and so does a
// wait given up (75).
func severalVerdict(r run, k *kid) string {
	if len(r.keys) < 2 {
		return ""
	}
	if k != nil {
		if !k.told {
			return "its child got no SEMRUN_FENCING_TOKENS"
		}
		var keys []string
		for _, kt := range k.tokens {
			keys = append(keys, kt.key)
		}
		if !slices.Equal(keys, r.keys) {
			return fmt.Sprintf("its child's SEMRUN_FENCING_TOKENS names %q, want %q, the order given", keys, r.keys)
		}
		if first := k.tokens[0]; first.key != k.key || first.token != k.token {
			return fmt.Sprintf("its child's SEMRUN_FENCING_TOKENS begins %s=%d, yet SEMRUN_HELD_KEY=%s and SEMRUN_FENCING_TOKEN=%d", first.key, first.token, k.key, k.token)
		}
	}
	if r.killed || r.signal != 0 {
		return ""
	}
	names := func(what string) bool {
		return slices.ContainsFunc(strings.Split(r.stderr, "\n"), func(line string) bool {
			return strings.Contains(line, what) && slices.ContainsFunc(r.keys, func(key string) bool { return strings.Contains(line, fmt.Sprintf("key %q: ", key)) })
		})
	}
	switch {
	case r.status == statusLost && !names("permit lost"):
		return fmt.Sprintf("status 112, and no line of its stderr says which of its keys was lost: %q", r.stderr)
	case r.status == statusBusy && k == nil && !names("(--timeout)"):
		return fmt.Sprintf("status 75, and no line of its stderr names a key of its own it gave up waiting for: %q", r.stderr)
	}
	return ""
}

// kidsByRun are the children rec recorded, those by the run that started
// each, and the earliest start among them (0: none).
func kidsByRun(rec *recorder) ([]kid, map[int]*kid, int64) {
	kids, _ := rec.snapshot()
	byRun := map[int]*kid{}
	first := int64(0)
	for i, k := range kids {
		byRun[k.run] = &kids[i]
		if first == 0 || k.start < first {
			first = k.start
		}
	}
	return kids, byRun, first
}
