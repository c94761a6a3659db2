//go:build linux

package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// The order of the line (semantics, section 14): the priorities nemesis
// and its checks. Callers of one key of two permits ask mixed priorities,
// some with --priority-age 1s, under several-keys' faults (runLines); the
// checks read the children's lines and the semruns' statuses: nobody is
// lost from the line, the caller of the highest priority is served as a
// head of the line is, and no caller of a lower priority is granted while
// one of a higher priority waits.

// prioCallers are the workers of the priorities nemesis: each asks its
// priority and, when age is set, --priority-age. The first alone asks the
// highest priority with no age: its place is ahead of every other's, ever
// (an age stands for 2^33 ms without one), so it waits only for a permit
// to free. The others may wait until their --timeout: a low priority is
// served after every higher one, and callers keep coming.
var prioCallers = []struct {
	prio int
	age  time.Duration
}{
	{100, 0}, {50, 0}, {0, 0}, {-100, 0},
	{0, time.Second}, {7, time.Second}, {-30, time.Second}, {-100, time.Second},
}

// runPriorities is the priorities nemesis.
func runPriorities(t *testing.T, n nemesis, seed uint64) figures {
	keys := []struct {
		name    string
		permits int
	}{{"k", 2}}
	orders := func(keys []string) [][]string {
		out := make([][]string, len(prioCallers))
		for i := range out {
			out[i] = keys
		}
		return out
	}
	flags := func(i int) []string {
		f := []string{"--priority", strconv.Itoa(prioCallers[i].prio)}
		if prioCallers[i].age > 0 {
			f = append(f, "--priority-age", prioCallers[i].age.String())
		}
		return f
	}
	seen := &seenLines{}
	check := func(s *several, fig *figures, stopped int64) {
		lines, reads, fails := seen.all()
		s.checkPriorities(fig, stopped, lines, reads, fails)
	}
	return runLines(t, n, seed, lines{keys: keys, orders: orders, flags: flags, peace: prioPeace, watch: seen.watch, check: check})
}

// seenLine is the line of a key as semrun status --json showed it, read
// from from until to (mono()): the pid and priority of each waiter, in
// its order. Each was in line at some instant between.
type seenLine struct {
	from, to int64
	waiters  []seenWaiter
}

type seenWaiter struct{ pid, prio int }

// seenLines are the lines read while the priorities nemesis ran.
type seenLines struct {
	mu    sync.Mutex
	lines []seenLine
	// reads counts the reads, and fails those that failed (under a fault
	// of Redis).
	reads, fails int
}

// all returns the lines read, how many reads were made and how many
// failed.
func (l *seenLines) all() ([]seenLine, int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines), l.reads, l.fails
}

// watch reads the line with semrun status --json, as an operator does,
// every 200ms until done is closed.
func (l *seenLines) watch(s *several, done <-chan struct{}) {
	c := s.c
	for {
		select {
		case <-done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		from := mono()
		res := c.operate(opBound, opConnect, append([]string{"status", "--json"}, c.keys...)...)
		to := mono()
		var st []semaphore.KeyStatus
		ok := res.status == 0 && json.Unmarshal([]byte(res.stdout), &st) == nil
		l.mu.Lock()
		l.reads++
		if !ok {
			l.fails++ // under a fault of Redis: nothing to judge
		}
		for _, k := range st {
			line := seenLine{from: from, to: to}
			for _, w := range k.Waiters {
				line.waiters = append(line.waiters, seenWaiter{pid: w.PID, prio: w.Priority})
			}
			if len(line.waiters) > 1 {
				l.lines = append(l.lines, line)
			}
		}
		l.mu.Unlock()
	}
}

// prioPeace is the peace after the ith fault: after every other one (the
// first included), 4 to 6 TTLs, so that the checks of the order, which
// judge only what no fault touched (and 2 TTLs after each heal), have
// stretches of a few seconds to judge; else about one TTL, as in
// several-keys.
func prioPeace(i int, rng *rand.Rand) time.Duration {
	if i%2 == 0 {
		return 4*ttl + upTo(rng, 2*ttl)
	}
	return onePeace(i, rng)
}

// prioRun is what the checks of the order know of one semrun: its run,
// its child (nil: none said it started), its priority and age.
type prioRun struct {
	r    run
	pid  int
	k    *kid
	prio int
	age  time.Duration
}

// checkPriorities runs the priorities nemesis's own checks (the checks of
// every nemesis ran before): no span with no child running away from
// faults (a line that did not move); every semrun ended within its
// --timeout and the faults' (lost); the top caller's waits; the order.
func (s *several) checkPriorities(fig *figures, stopped int64, seen []seenLine, reads, fails int) {
	c := s.c
	kids, byRun, first := kidsByRun(c.rec)
	c.mu.Lock()
	faults := slices.Clone(c.faults)
	var runs []prioRun
	for _, r := range c.runs {
		if r.proc == nil {
			continue
		}
		s.mu.Lock()
		w, ok := s.worker[r.id]
		s.mu.Unlock()
		if ok {
			runs = append(runs, prioRun{r: *r, pid: r.proc.Pid, k: byRun[r.id], prio: prioCallers[w].prio, age: prioCallers[w].age})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(runs, func(a, b prioRun) int { return a.r.id - b.r.id })
	// A heal may take longer after some faults (runLines): so may a wait.
	for i := range faults {
		if i < len(fig.healMore) {
			faults[i].heal += int64(fig.healMore[i])
		}
	}
	allowance := func(from, to int64) time.Duration { return machine.allowance(from, to) }

	gaps := stalls(kids, first, stopped, faults, func(from, to int64) time.Duration { return healFailure + allowance(from, to) })
	for _, g := range gaps {
		fig.bad++
		c.t.Errorf("priorities: no child ran from %s to %s (%v), with callers waiting and no fault within %v before: a line that did not move; faults near: %s",
			c.rel(g[0]), c.rel(g[1]), time.Duration(g[1]-g[0]).Round(time.Millisecond), healFailure, c.faultsNear(g[0]))
	}
	report := func(what string, bad []string) {
		for i, b := range bad {
			if i == 10 {
				c.t.Errorf("... and %d more", len(bad)-10)
				break
			}
			c.t.Errorf("priorities: %s: %s", what, b)
		}
	}
	lost := lostFromLine(runs, faults, allowance)
	fig.bad += len(lost)
	report("lost from the line", lost)
	waits, late := topWaits(runs, first, stopped, faults, allowance)
	fig.bad += len(late)
	report("the top caller not served as the head of the line", late)
	shown := shownPriorities(runs, seen)
	fig.bad += len(shown)
	report("status shows a wrong priority", shown)
	judged, wrong := outOfOrder(runs, seen, c.wallOff, faults, func(from, to int64) bool { return machine.lag(from, to) >= starvedLag })
	fig.bad += len(wrong)
	report("granted out of order", wrong)

	// Figures: by priority, the runs that ran and those that gave up (75).
	type count struct{ ran, gaveUp int }
	by := map[string]*count{}
	for _, p := range runs {
		name := fmt.Sprintf("%d", p.prio)
		if p.age > 0 {
			name += "/" + p.age.String()
		}
		if by[name] == nil {
			by[name] = &count{}
		}
		switch {
		case p.k != nil:
			by[name].ran++
		case p.r.status == statusBusy:
			by[name].gaveUp++
		}
	}
	var per []string
	for _, name := range slices.SortedFunc(maps.Keys(by), func(a, b string) int {
		pa, _ := strconv.Atoi(strings.Split(a, "/")[0])
		pb, _ := strconv.Atoi(strings.Split(b, "/")[0])
		return cmp.Or(cmp.Compare(pb, pa), cmp.Compare(a, b))
	}) {
		per = append(per, fmt.Sprintf("%s %d/%d", name, by[name].ran, by[name].gaveUp))
	}
	if by["100"] == nil || by["100"].ran == 0 {
		fig.bad++
		c.t.Errorf("priorities: the caller of priority 100 never ran its command")
	}
	did, givenBack, notGivenBack := s.tally(fig, len(faults))
	fig.faultNote = fmt.Sprintf("%s; ran/gave up (75) by priority[/age]: %s; priority 100's waits away from faults: %d, p50 %v, max %v; %d lost from the line; lines of several waiters read %d times (%d of %d reads failed), %d pairs judged for order, %d out of order; holders read %d times once every semrun but the killed had exited, %d not given back; %d stalls",
		did, strings.Join(per, ", "), len(waits), quantile(waits, 0.5).Round(time.Millisecond), maxDur(waits).Round(time.Millisecond),
		len(lost), len(seen), fails, reads, judged, len(wrong), givenBack, notGivenBack, len(gaps))
}

// nearFault tells whether a fault (or the healFailure after its heal, as
// a heal may take) touches from..to.
func nearFault(faults []fault, from, to int64) bool {
	return slices.ContainsFunc(faults, func(f fault) bool { return f.start <= to && f.heal+int64(healFailure) >= from })
}

// lostFromLine says which semruns were lost from the line: a semrun that
// was neither killed nor SIGTERMed, and whose child never started, must
// have exited within its --timeout of its launch, and healFailure and the
// machine's allowance more, and as long again as every fault it waited
// through lasted (a frozen semrun's clock runs on, yet it looks only
// when it wakes). One that waited on, or never exited, was lost.
func lostFromLine(runs []prioRun, faults []fault, allowance func(from, to int64) time.Duration) []string {
	var out []string
	for _, p := range runs {
		r := p.r
		if r.killed || r.interrupted || p.k != nil || r.timeout == 0 {
			continue
		}
		bound := r.timeout + healFailure
		for _, f := range faults {
			if f.start <= r.exited && f.heal >= r.launched {
				bound += time.Duration(f.heal - f.start)
			}
		}
		if r.exited == 0 || time.Duration(r.exited-r.launched) > bound+allowance(r.launched, r.exited) {
			how := "never exited"
			if r.exited != 0 {
				how = fmt.Sprintf("exited %d after %v", r.status, time.Duration(r.exited-r.launched).Round(time.Millisecond))
			}
			out = append(out, fmt.Sprintf("run %d (priority %d) with --timeout %v ran no child and %s, more than %v and the machine's allowance",
				r.id, p.prio, r.timeout, how, bound))
		}
	}
	return out
}

// topWaits are the waits (launch to its child's start) of the semruns of
// the highest priority with no age, launched from first (the first
// child: a fresh server's fence is over) until stopped, away from faults;
// and what is wrong with them. Its place is ahead of every other's, and
// one such semrun waits at a time: it waits only for a permit to free,
// which a holder's child of at most severalHoldMax does. It must start
// its child within healFailure and the machine's allowance, and never
// give up waiting.
func topWaits(runs []prioRun, first, stopped int64, faults []fault, allowance func(from, to int64) time.Duration) ([]time.Duration, []string) {
	var waits []time.Duration
	var bad []string
	if len(runs) == 0 {
		return nil, nil
	}
	top := slices.MaxFunc(runs, func(a, b prioRun) int { return cmp.Compare(a.prio, b.prio) })
	for _, p := range runs {
		r := p.r
		if p.prio != top.prio || p.age != 0 || r.killed || r.interrupted || r.launched < first || r.launched > stopped {
			continue
		}
		end := r.exited
		if p.k != nil {
			end = p.k.start
		}
		if end == 0 || nearFault(faults, r.launched, end) {
			continue
		}
		wait := time.Duration(end - r.launched)
		switch {
		case p.k == nil && r.status == statusBusy:
			bad = append(bad, fmt.Sprintf("run %d (priority %d) gave up waiting after %v, with no fault near", r.id, p.prio, wait.Round(time.Millisecond)))
		case p.k == nil:
			continue // judge says what is wrong with its status
		case wait > healFailure+allowance(r.launched, end):
			bad = append(bad, fmt.Sprintf("run %d (priority %d) waited %v for its child, more than %v and the machine's allowance, with no fault near",
				r.id, p.prio, wait.Round(time.Millisecond), healFailure))
		default:
			waits = append(waits, wait)
		}
	}
	return waits, bad
}

// matchRun is the index in runs of the semrun of pid under way while l
// was read, -1 for none.
func matchRun(runs []prioRun, pid int, l seenLine) int {
	return slices.IndexFunc(runs, func(p prioRun) bool {
		return p.pid == pid && p.r.launched <= l.to && (p.r.exited == 0 || p.r.exited >= l.from)
	})
}

// shownPriorities says where status showed a waiter's priority wrong: with
// no age, the one it asked; with an age, at least that (it rises as the
// waiter waits).
func shownPriorities(runs []prioRun, seen []seenLine) []string {
	var bad []string
	for _, l := range seen {
		for _, w := range l.waiters {
			i := matchRun(runs, w.pid, l)
			if i < 0 {
				continue
			}
			p := runs[i]
			if p.age == 0 && w.prio != p.prio || p.age > 0 && w.prio < p.prio {
				bad = append(bad, fmt.Sprintf("run %d asked --priority %d (age %v), and status showed it waiting with priority %d", p.r.id, p.prio, p.age, w.prio))
			}
		}
	}
	return bad
}

// outOfOrder counts the pairs of semruns it can judge, and says which were
// granted out of order: a (of lower priority) granted while b (of higher
// priority) waited. Only semruns with no age are judged: between them a
// higher priority comes first whatever their arrivals, even when one left
// the line and came back. A pair is judged when a line read (seen) shows
// b waiting, a's token (Redis's clock at its grant, in µs, which wallOff
// turns into mono()) comes after the read, and b still waited then: its
// child started later, or its --timeout, counted from its launch, ran out
// later (it gave up, 75); and no fault touched them, nor was the machine
// starved (starved), from the read until a's grant. Then b surely waited
// at a's grant, and a is out of order when b was granted after it (b's
// token larger), or never. The token is taken when a permit is handed to
// the head of the line, not when its waiter claims it.
func outOfOrder(runs []prioRun, seen []seenLine, wallOff int64, faults []fault, starved func(from, to int64) bool) (int, []string) {
	type pair struct{ a, b int }
	judged := map[pair]bool{}
	var bad []string
	for _, l := range seen {
		for _, w := range l.waiters {
			// b: the semrun of that pid under way during the read.
			i := matchRun(runs, w.pid, l)
			if i < 0 {
				continue
			}
			b := runs[i]
			if b.age != 0 || b.r.killed || b.r.interrupted {
				continue
			}
			for _, a := range runs {
				if a.age != 0 || a.k == nil || a.prio >= b.prio || judged[pair{a.r.id, b.r.id}] {
					continue
				}
				grant := a.k.token*int64(time.Microsecond) - wallOff
				if grant <= l.to || nearFault(faults, l.from, grant) || starved(l.from, grant) {
					continue
				}
				var after bool
				switch {
				case b.k != nil:
					after = b.k.token > a.k.token
				case b.r.status == statusBusy && b.r.timeout > 0 && b.r.launched+int64(b.r.timeout) > grant:
					after = true
				default:
					continue
				}
				judged[pair{a.r.id, b.r.id}] = true
				if after {
					bad = append(bad, fmt.Sprintf("run %d (priority %d) was granted (token %d) while run %d (priority %d), seen waiting in line %v before, waited",
						a.r.id, a.prio, a.k.token, b.r.id, b.prio, time.Duration(grant-l.to).Round(time.Millisecond)))
				}
			}
		}
	}
	return len(judged), bad
}
