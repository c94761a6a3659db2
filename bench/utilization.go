package main

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The utilization workload: 60 jobs of 200ms from 20 processes, each
// running 3 in sequence, under 3 permits: 4s of work for each permit. Its
// target: all done within utilTarget times the time the same jobs take in
// 3 lanes with no lock, measured in the same run.
const (
	utilPermits   = 3
	utilProcs     = 20
	utilPerProc   = 3
	utilJob       = 200 * time.Millisecond
	utilTarget    = 1.02
	utilSemLocker = "GNU sem"
	utilLanes     = "no lock, 3 lanes back to back"
)

type utilRound struct {
	makespan, busy      time.Duration
	ramp, tail, between time.Duration // permit time lost
	handoffs            int
	maxConcurrent       int
	wall                time.Duration
}

// utilResult is the rounds of one lock, or of the lanes without argv.
type utilResult struct {
	l    *locker
	runs []utilRound
}

// utilization runs the workload under each lock that counts to 3 and
// compares the permits' busy time with the makespan, from the first job's
// start to the last one's end.
func (b *bench) utilization() ([]*table, error) {
	ls, rounds := plan(b.lockers(utilPermits, false), b.o.utilRounds, b.o.utilSemRounds)
	// The floor: no lock, the jobs run in 3 lanes back to back, each
	// started by the bench as soon as the one before it ended.
	ls = slices.Insert(ls, 0, &locker{name: utilLanes})
	rounds = slices.Insert(rounds, 0, b.o.utilRounds)
	runs, failed := measureRounds(ls, rounds, b.utilRound)
	rs := make([]*utilResult, len(ls))
	for i, l := range ls {
		rs[i] = &utilResult{l: l, runs: runs[i]}
	}
	return []*table{b.utilTable(rs)}, failed
}

// total sums r's rounds.
func (r *utilResult) total() utilRound {
	var t utilRound
	for _, u := range r.runs {
		t.wall += u.wall
		t.makespan += u.makespan
		t.busy += u.busy
		t.ramp += u.ramp
		t.tail += u.tail
		t.between += u.between
		t.handoffs += u.handoffs
	}
	return t
}

// lanesWall is the lanes' mean wall time, the floor of the target.
func lanesWall(rs []*utilResult) time.Duration {
	var lanes time.Duration
	for _, r := range rs {
		if r.l.argv == nil && len(r.runs) > 0 {
			for _, u := range r.runs {
				lanes += u.wall / time.Duration(len(r.runs))
			}
		}
	}
	return lanes
}

// utilTable shows each lock's means next to the lanes'.
func (b *bench) utilTable(rs []*utilResult) *table {
	t := &table{
		title: fmt.Sprintf("utilization: %d jobs of %v from %d processes (%d each, in sequence), %d permits",
			utilProcs*utilPerProc, utilJob, utilProcs, utilPerProc, utilPermits),
		head: []string{"lock", "rounds", "all done", "/ lanes'", "makespan", "ideal", "utilization", "lost per handoff", "target"},
	}
	lanes := lanesWall(rs)
	var lost []string
	for _, r := range rs {
		if len(r.runs) == 0 {
			continue
		}
		sum, n := r.total(), time.Duration(len(r.runs))
		util := float64(sum.busy) / (utilPermits * float64(sum.makespan))
		target := ""
		if r.l.argv != nil && r.l.name != utilSemLocker && lanes > 0 {
			target = fmt.Sprintf("≤ %.2f× lanes': %s", utilTarget, verdict(float64(sum.wall/n) <= utilTarget*float64(lanes)))
		}
		perHandoff := sum.between / time.Duration(max(sum.handoffs, 1))
		t.add(r.l.name, fmt.Sprint(len(r.runs)), ms(sum.wall/n), ratio(float64(sum.wall/n), float64(lanes)), ms(sum.makespan/n),
			ms(sum.busy/n/utilPermits), fmt.Sprintf("%.1f%%", 100*util), ms(perHandoff), target)
		lost = append(lost, fmt.Sprintf("%s %s, %s and %s", r.l.name, ms(sum.ramp/n), ms(sum.tail/n), ms(sum.between/n)))
	}
	t.note("All done: from the bench starting the first process to the last one reaped, the mean of the rounds; / lanes': that against the same jobs in 3 lanes with no lock. ideal = the children's busy time / %d (nominally %v); utilization = ideal / makespan; makespan from the first child's start to the last one's end, all on CLOCK_MONOTONIC; lost per handoff: the permit time lost between jobs, per job that followed another on a permit.",
		utilPermits, time.Duration(utilProcs*utilPerProc)*utilJob/utilPermits)
	t.note("Each of the %d processes is a goroutine of the bench that runs its %d jobs one after the other, each job one call of the lock whose child holds %v; the child is %s. No lock: %d goroutines each run %d children back to back, which any lock's runs must also spend on starting the children.",
		utilProcs, utilPerProc, utilJob, b.childName(), utilPermits, utilProcs*utilPerProc/utilPermits)
	t.note("Permit time lost per round, filling the permits at the start, emptying them at the end and between jobs: %s.", strings.Join(lost, "; "))
	return t
}

// utilRound runs the workload once under l, or in lanes without argv.
func (b *bench) utilRound(l *locker) (utilRound, error) {
	key, log := b.key("util")
	argv := b.childArgv(log, utilJob.String())
	procs, perProc := utilProcs, utilPerProc
	if l.argv != nil {
		argv = l.argv(key, utilPermits, argv)
	} else {
		procs, perProc = utilPermits, utilProcs*utilPerProc/utilPermits
	}
	wall, err := b.runJobs(argv, procs, perProc)
	if err != nil {
		return utilRound{}, err
	}
	ivs, err := readLog(log)
	if err != nil {
		return utilRound{}, err
	}
	if len(ivs) != utilProcs*utilPerProc {
		return utilRound{}, fmt.Errorf("%d jobs ran, want %d", len(ivs), utilProcs*utilPerProc)
	}
	u := permitTime(ivs)
	u.wall = wall
	// No more than 3 jobs at once, ever.
	if u.maxConcurrent = mostAtOnce(ivs); u.maxConcurrent > utilPermits {
		return u, fmt.Errorf("%d jobs ran at once under %d permits", u.maxConcurrent, utilPermits)
	}
	return u, nil
}

// runJobs runs argv perProc times in sequence in each of procs goroutines,
// all at once, and tells the wall time from the first start to the last
// one reaped.
func (b *bench) runJobs(argv []string, procs, perProc int) (time.Duration, error) {
	g := newGroup(b.ctx, b.env)
	defer g.close()
	var wg sync.WaitGroup
	errs := make([]error, procs)
	began := time.Now()
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perProc {
				p, err := g.start(argv, true)
				if err == nil {
					err = p.wait()
				}
				if err != nil {
					errs[i] = err
					g.cancel() // the others need not go on
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(began)
	return wall, errors.Join(errs...)
}

// permitTime is how the jobs ivs, sorted by start, filled the permits:
// their busy time, the makespan, and the permit time lost before, after
// and between them.
func permitTime(ivs []interval) utilRound {
	u := utilRound{handoffs: len(ivs) - utilPermits}
	first, last := ivs[0].start, ivs[0].end
	for _, iv := range ivs {
		u.busy += time.Duration(iv.end - iv.start)
		first, last = min(first, iv.start), max(last, iv.end)
	}
	u.makespan = time.Duration(last - first)
	// The permits fill with the first 3 starts and empty with the last 3 ends.
	for _, iv := range ivs[:utilPermits] {
		u.ramp += time.Duration(iv.start - first)
	}
	ends := make([]int64, len(ivs))
	for i, iv := range ivs {
		ends[i] = iv.end
	}
	slices.Sort(ends)
	for _, e := range ends[len(ends)-utilPermits:] {
		u.tail += time.Duration(last - e)
	}
	u.between = utilPermits*u.makespan - u.busy - u.ramp - u.tail
	return u
}

// mostAtOnce is the most jobs of ivs that ran at the same time.
func mostAtOnce(ivs []interval) int {
	type event struct {
		at    int64
		delta int
	}
	var evs []event
	for _, iv := range ivs {
		evs = append(evs, event{iv.start, 1}, event{iv.end, -1})
	}
	slices.SortFunc(evs, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta) // an end before a start at the same instant
	})
	at, most := 0, 0
	for _, e := range evs {
		at += e.delta
		most = max(most, at)
	}
	return most
}
