package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Handoff targets: semrun with Redis against flock, in the same run.
const (
	handoffP50Target = 1.3
	handoffP99Target = 2.0
)

// handoffs are what handoff rounds measured.
type handoffs struct {
	gaps     []time.Duration // from a child's end to the next one's start
	crowded  []time.Duration // those with more than half the waiters still waiting
	thinned  []time.Duration // and the others
	exits    []time.Duration // from a child's end to its lock's process exiting
	granted  []time.Duration // from a child's end to the next one's grant (semrun)
	started  []time.Duration // from a grant to its child's start (semrun)
	overlaps int             // children that started before the one before ended
	phases                   // with a trace
}

func (h *handoffs) add(o handoffs) {
	h.gaps = append(h.gaps, o.gaps...)
	h.crowded = append(h.crowded, o.crowded...)
	h.thinned = append(h.thinned, o.thinned...)
	h.exits = append(h.exits, o.exits...)
	h.granted = append(h.granted, o.granted...)
	h.started = append(h.started, o.started...)
	h.overlaps += o.overlaps
}

// handoff measures how long a permit lies idle between two holders: in
// each round, waiters queue behind a first holder; when it lets go, each
// child in turn holds for -hold. The gaps are from one child's end to the
// next child's start, on the clock all processes share.
func (b *bench) handoff() ([]*table, error) {
	startup, err := b.childStartup(20)
	if err != nil {
		return nil, err
	}
	rs, traced, failed := b.handoffRounds()
	t, where := b.handoffTables(rs, traced)
	var overlapped, semrunOverlapped []string
	for _, r := range rs {
		if r.overlaps > 0 {
			overlapped = append(overlapped, fmt.Sprintf("%s %d times", r.l.name, r.overlaps))
			if strings.HasPrefix(r.l.name, "semrun") {
				semrunOverlapped = append(semrunOverlapped, overlapped[len(overlapped)-1])
			}
		}
	}
	if len(overlapped) > 0 {
		t.note("TWO CHILDREN RAN AT ONCE under one permit: %s.", strings.Join(overlapped, ", "))
	} else {
		t.note("No two children ever ran at once.")
	}
	if len(semrunOverlapped) > 0 { // a peer's is its own failing, shown above
		failed = errors.Join(failed, fmt.Errorf("permit held twice: %s", strings.Join(semrunOverlapped, ", ")))
	}
	where.note("The child is %s; started directly by the bench, it takes %s (p50) from fork to its first timestamp: that much of every gap is the child's own start.", b.childName(), ms(startup))
	where.note("Waiting: the processes still waiting behind the next holder, in the gap before its child starts.")
	where.note("Its lock's process exits: when the bench reaps the semrun, flock or sem that ran the child. semrun releases before it exits; flock's lock is freed as it exits.")
	where.note("Grant: the fencing token semrun hands the child (`$SEMRUN_FENCING_TOKEN`), which is the grant's time in µs on the host's clock (Redis's TIME, or the local clock).")
	if len(traced.release) > 0 {
		p50 := p50Of
		where.note("semrun (Redis), one more round traced with Redis's MONITOR: gap p50 %s. Of it (p50s of %d gaps): from a child's end to its semrun's release reaching Redis %s; from there to the next semrun's granted acquire reaching Redis %s, of which the release script took %s to push the wake-up; from there to the next child's start %s.",
			p50(traced.gaps), len(traced.release), p50(traced.release), p50(traced.wake), p50(traced.publish), p50(traced.start))
	}
	return []*table{t, where}, failed
}

// handoffResult is what the handoff rounds of one lock measured.
type handoffResult struct {
	l *locker
	handoffs
}

// handoffRounds runs the rounds of every lock, interleaved, so that noise
// falls on all, and one more round of semrun with Redis traced with
// MONITOR, which costs Redis and the bench some time: not in the table.
func (b *bench) handoffRounds() ([]*handoffResult, handoffs, error) {
	ls, rounds := plan(b.lockers(1, true), b.o.handoffRounds, b.o.handoffSemRounds)
	runs, err := measureRounds(ls, rounds, func(l *locker) (handoffs, error) { return b.handoffRound(l, false) })
	rs := make([]*handoffResult, len(ls))
	for i, l := range ls {
		rs[i] = &handoffResult{l: l}
		for _, h := range runs[i] {
			rs[i].add(h)
		}
	}
	if err != nil {
		return rs, handoffs{}, err
	}
	var traced handoffs
	if l := find(b.lockers(1, false), "semrun (Redis)"); l != nil && b.o.handoffTrace {
		if traced, err = b.handoffRound(l, true); err != nil {
			return rs, traced, fmt.Errorf("semrun (Redis), traced: %w", err)
		}
	}
	return rs, traced, nil
}

// p50Of is the median of ds, shown, or "–" for none.
func p50Of(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	slices.Sort(ds)
	return ms(quantile(ds, 0.5))
}

// handoffTables are the gaps of every lock next to flock's, and where
// their time goes.
func (b *bench) handoffTables(rs []*handoffResult, traced handoffs) (*table, *table) {
	t := &table{
		title: fmt.Sprintf("handoff: %d processes for 1 permit, each child holding %v; gap from one child's end to the next one's start",
			b.o.waiters, b.o.hold),
		head: []string{"lock", "gaps", "p50", "p99", "max", "p50 / flock's", "p99 / flock's", "target"},
	}
	where := &table{
		title: "handoff: where the time of a gap goes (p50s)",
		head: []string{"lock", "gap", fmt.Sprintf("gap, > %d waiting", (b.o.waiters-2)/2), fmt.Sprintf("gap, ≤ %d waiting", (b.o.waiters-2)/2),
			"child's end → its lock's process exits", "child's end → next grant", "grant → next child's start"},
	}
	var flock50, flock99 time.Duration
	for _, r := range rs {
		slices.Sort(r.gaps)
		if r.l.name == "flock" {
			flock50, flock99 = quantile(r.gaps, 0.5), quantile(r.gaps, 0.99)
		}
	}
	p50 := p50Of
	for _, r := range rs {
		if len(r.gaps) == 0 {
			continue
		}
		g50, g99 := quantile(r.gaps, 0.5), quantile(r.gaps, 0.99)
		target := ""
		if r.l.name == "semrun (Redis)" {
			target = handoffVerdict(g50, g99, flock50, flock99)
		}
		t.add(r.l.name, fmt.Sprint(len(r.gaps)), ms(g50), ms(g99), ms(r.gaps[len(r.gaps)-1]),
			ratio(float64(g50), float64(flock50)), ratio(float64(g99), float64(flock99)), target)
		where.add(r.l.name, ms(g50), p50(r.crowded), p50(r.thinned), p50(r.exits), p50(r.granted), p50(r.started))
	}
	t.note("Each round: one holder takes the permit, %d waiters start and queue behind it (the bench waits until they use no CPU), then it lets go; %d gaps a round, %d rounds (GNU sem %d). p99 is the nearest rank: with few gaps, close to the max.",
		b.o.waiters-1, b.o.waiters-1, b.o.handoffRounds, b.o.handoffSemRounds)
	t.note("flock: `flock FILE child`; GNU sem: `sem --fg --id K -j 1 child`, whose waiters poll with a random sleep of up to a second.")
	return t, where
}

// handoffVerdict says whether semrun's gaps meet their targets next to flock's.
func handoffVerdict(g50, g99, flock50, flock99 time.Duration) string {
	target := fmt.Sprintf("p50 ≤ %.1f×, p99 ≤ %.0f×", handoffP50Target, handoffP99Target)
	if flock50 == 0 {
		return target
	}
	ok50 := float64(g50) <= handoffP50Target*float64(flock50)
	ok99 := float64(g99) <= handoffP99Target*float64(flock99)
	target += ": " + verdict(ok50 && ok99)
	switch {
	case !ok50 && ok99:
		target += " (p50)"
	case ok50 && !ok99:
		target += " (p99)"
	}
	return target
}

// handoffRound runs one round under l; with trace, it also tells where
// the time of the gaps goes, from Redis's MONITOR.
func (b *bench) handoffRound(l *locker, trace bool) (handoffs, error) {
	held, err := b.holdKey(l, "handoff")
	if err != nil {
		return handoffs{}, err
	}
	defer held.close()
	if err := b.queueWaiters(held); err != nil {
		return handoffs{}, err
	}
	ivs, calls, err := b.drain(held, trace)
	if err != nil {
		return handoffs{}, err
	}
	var h handoffs
	if trace {
		h.phases = split(ivs, calls)
	}
	h.addGaps(ivs, exitTimes(held.g.list()), realtimeOffset())
	return h, nil
}

// queueWaiters starts the waiters behind the holder and waits until they
// use no CPU, blocked: the line is formed before the holder lets go.
func (b *bench) queueWaiters(held *heldKey) error {
	var waiting []*proc
	for range b.o.waiters - 1 {
		p, err := held.g.start(held.argv(b.o.hold.String()), true)
		if err != nil {
			return err
		}
		waiting = append(waiting, p)
	}
	if err := settle(b.ctx, waiting, 150*time.Millisecond, 20*time.Second); err != nil {
		return err
	}
	if n := started(held.log); n != 1 {
		return fmt.Errorf("%d children started while the first held the only permit", n-1)
	}
	return nil
}

// drain opens the gate and waits for every child to have run, with
// MONITOR on when traced; it returns the children's runs and, traced, the
// script calls Redis ran meanwhile.
func (b *bench) drain(held *heldKey, trace bool) ([]interval, []scriptCall, error) {
	var mon *monitor
	if trace {
		var err error
		if mon, err = startMonitor(b.redis.Addr); err != nil {
			return nil, nil, err
		}
		defer func() { // on a failure: the monitor's connection is closed
			if mon != nil {
				mon.calls()
			}
		}()
	}
	if err := held.open(); err != nil {
		return nil, nil, err
	}
	if err := held.g.waitAll(); err != nil {
		return nil, nil, err
	}
	ivs, err := readLog(held.log)
	if err != nil {
		return nil, nil, err
	}
	if len(ivs) != b.o.waiters {
		return nil, nil, fmt.Errorf("%d children ran, want %d", len(ivs), b.o.waiters)
	}
	var calls []scriptCall
	if mon != nil {
		calls, mon = mon.calls(), nil
	}
	return ivs, calls, nil
}

// exitTimes are when each process exited, by pid: for a lock's process,
// the pid its child records as its parent.
func exitTimes(ps []*proc) map[int]int64 {
	exits := map[int]int64{}
	for _, p := range ps {
		exits[p.pid()] = p.exitAt
	}
	return exits
}

// addGaps records the gaps between the children's runs ivs, sorted by
// start: exits tells when each lock's process exited, and offset turns a
// fencing token (µs of the time of day) into the children's clock.
func (h *handoffs) addGaps(ivs []interval, exits map[int]int64, offset int64) {
	for i := 1; i < len(ivs); i++ {
		prev, next := ivs[i-1], ivs[i]
		gap := time.Duration(next.start - prev.end)
		if gap < 0 {
			h.overlaps++
		}
		h.gaps = append(h.gaps, gap)
		if waiting := len(ivs) - 1 - i; 2*waiting > len(ivs)-2 {
			h.crowded = append(h.crowded, gap)
		} else {
			h.thinned = append(h.thinned, gap)
		}
		if exit, ok := exits[prev.ppid]; ok {
			h.exits = append(h.exits, time.Duration(exit-prev.end))
		}
		// A token that is not a time of the handoff (one more than the
		// last, on a clock that went back) tells nothing.
		if next.token > 0 {
			grant := next.token*1000 - offset
			if grant > prev.end-int64(time.Millisecond) && grant <= next.start {
				h.granted = append(h.granted, time.Duration(grant-prev.end))
				h.started = append(h.started, time.Duration(next.start-grant))
			}
		}
	}
}

// childStartup is the p50 time from starting the child directly to its
// first timestamp: the floor of every gap.
func (b *bench) childStartup(n int) (time.Duration, error) {
	g := newGroup(b.ctx, b.env)
	defer g.close()
	var ds []time.Duration
	for range n {
		_, log := b.key("startup")
		before := monotonic()
		if err := g.run(b.childArgv(log, "0"), true); err != nil {
			return 0, err
		}
		ivs, err := readLog(log)
		if err != nil {
			return 0, err
		}
		ds = append(ds, time.Duration(ivs[0].start-before))
	}
	slices.Sort(ds)
	return quantile(ds, 0.5), nil
}
