package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Start-up targets: semrun's whole-process time next to the floor of a Go
// wrapper's (gowrap), in the same run.
const (
	overheadRedisTarget = 2.0
	overheadLocalTarget = 1.6
)

// unlinkedTag builds semrun without the metrics code (cmd's
// metrics_unlinked.go): its runs are timed beside the others', so that
// what the metrics code costs a run that serves none is seen.
const unlinkedTag = "semrun_nometrics"

// A contender is one command line whose whole-process time is measured.
type contender struct {
	name   string
	argv   []string
	every  int     // measured in one round out of every
	target float64 // the most its p50 may be, as a multiple of the Go wrapper's
	times  []time.Duration
}

// overhead times whole processes of uncontended runs, interleaved in
// random order, next to flock(1), true(1), the floor of a Go wrapper
// (gowrap) and GNU sem.
func (b *bench) overhead() ([]*table, error) {
	rounds := max(b.o.rounds, 1)
	if b.unlinked == "" {
		var err error
		if b.unlinked, err = b.build("semrun-unlinked", ".", unlinkedTag); err != nil {
			return nil, err
		}
	}
	cs := b.contenders(rounds, b.o.semRounds)
	if err := b.timeContenders(cs, rounds); err != nil {
		return nil, err
	}
	return []*table{b.overheadTable(cs, rounds)}, nil
}

// contenders are the command lines to time: the floors, flock, and every
// lock that counts to 3, with their targets.
func (b *bench) contenders(rounds, semRounds int) []*contender {
	cs := []*contender{
		{name: "true", argv: []string{"true"}},
		{name: "Go wrapper: gowrap true", argv: []string{b.gowrap, "true"}},
		{name: "semrun version", argv: []string{b.semrun, "version"}},
	}
	if b.flock {
		cs = slices.Insert(cs, 1, &contender{name: "flock f true", argv: []string{"flock", filepath.Join(b.dir, "f"), "true"}})
	}
	for _, l := range b.lockers(3, true) {
		c := &contender{every: 1, argv: l.argv("b", 3, []string{"true"})}
		store, _ := strings.CutPrefix(l.name, "semrun ")
		switch l.name {
		case "flock":
			continue // n is 3: not here
		case "GNU sem":
			if semRounds <= 0 {
				continue
			}
			c.name, c.every = "sem -j 3 true", max(rounds/semRounds, 1)
		case "semrun --local":
			c.name, c.target = "semrun --local -k K -n 3 -- true", overheadLocalTarget
		case "semrun (Redis)":
			c.name, c.target = "semrun -k K -n 3 -- true "+store, overheadRedisTarget
		default:
			c.name = "semrun -k K -n 3 -- true " + store
		}
		cs = append(cs, c)
		if b.unlinked != "" && (l.name == "semrun --local" || l.name == "semrun (Redis)") {
			argv := slices.Clone(c.argv)
			argv[0] = b.unlinked
			cs = append(cs, &contender{name: c.name + ", metrics not linked", every: 1, argv: argv})
		}
	}
	version := slices.IndexFunc(cs, func(c *contender) bool { return c.name == "semrun version" }) + 1
	if b.o.compare != "" {
		cs = slices.Insert(cs, version, &contender{name: "semrun B version", argv: []string{b.o.compare, "version"}})
	}
	if b.unlinked != "" {
		cs = slices.Insert(cs, version, &contender{name: "semrun version, metrics not linked", argv: []string{b.unlinked, "version"}})
	}
	return cs
}

// timeContenders runs each contender once to warm caches, then times
// rounds of them, each round in a random order.
func (b *bench) timeContenders(cs []*contender, rounds int) error {
	g := newGroup(b.ctx, b.env)
	defer g.close()
	for _, c := range cs {
		if err := g.run(c.argv, true); err != nil { // warms caches
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	for r := range rounds {
		for _, i := range rand.Perm(len(cs)) {
			c := cs[i]
			if c.every > 1 && r%c.every != 0 {
				continue
			}
			start := time.Now()
			if err := g.run(c.argv, false); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.times = append(c.times, time.Since(start))
		}
		g.drop()
	}
	return nil
}

// overheadTable shows each contender's times next to flock's and the Go
// wrapper's.
func (b *bench) overheadTable(cs []*contender, rounds int) *table {
	var flock, floor time.Duration
	for _, c := range cs {
		slices.Sort(c.times)
		switch c.argv[0] {
		case "flock":
			flock = quantile(c.times, 0.5)
		case b.gowrap:
			floor = quantile(c.times, 0.5)
		}
	}
	t := &table{
		title: fmt.Sprintf("overhead: whole-process time of one uncontended run, %d rounds in random order", rounds),
		head:  []string{"command", "runs", "p50", "p90", "p50 / flock's", "p50 / Go wrapper's", "target"},
	}
	for _, c := range cs {
		p50 := quantile(c.times, 0.5)
		target := ""
		if c.target > 0 && floor > 0 {
			ok := float64(p50) <= c.target*float64(floor)
			target = fmt.Sprintf("≤ %.1f× Go wrapper: %s", c.target, verdict(ok))
		}
		t.add(b.code(c.name), fmt.Sprint(len(c.times)), ms(p50), ms(quantile(c.times, 0.9)),
			ratio(float64(p50), float64(flock)), ratio(float64(p50), float64(floor)), target)
	}
	t.note("Each process is started by the bench and timed from fork to reaped; in each round every command runs once, in a random order, so that noise falls on all alike.")
	t.note("Go wrapper: bench/gowrap, which runs its arguments with os/exec and does nothing else, built as semrun is: the floor of any wrapper written in Go.")
	if b.unlinked != "" {
		t.note("metrics not linked: the same tree built with -tags %s, whose semrun metrics is a stub: what the metrics code costs a run that serves none is the difference.", unlinkedTag)
	}
	t.note("semrun runs with a restart fence of %v (the Redis servers are older), keys and lock files that exist after the first run, and the local store in a lock directory of the bench's.", benchFence)
	return t
}
