package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"time"
)

// A contender is one command line whose whole-process time is measured.
type contender struct {
	name  string
	argv  []string
	every int // measured in one round out of every
	times []time.Duration
}

// overhead times whole processes of uncontended runs, interleaved in
// random order, next to flock(1), true(1) and GNU sem.
func (b *bench) overhead() ([]*table, error) {
	rounds, semRounds := max(b.o.rounds, 1), b.o.semRounds
	cs := []*contender{
		{name: "true", argv: []string{"true"}},
		{name: "flock f true", argv: []string{"flock", filepath.Join(b.dir, "f"), "true"}},
		{name: "semrun --local -n 3 -- true", argv: []string{b.semrun, "--local", "--lock-dir", filepath.Join(b.dir, "locks"), "-k", "b", "-n", "3", "--", "true"}},
		{name: "semrun version", argv: []string{b.semrun, "version"}},
	}
	if !b.flock {
		cs = slices.Delete(cs, 1, 2)
	}
	if b.sem && semRounds > 0 {
		cs = append(cs, &contender{name: "sem -j 3 true", every: max(rounds/semRounds, 1),
			argv: []string{"sem", "--will-cite", "--fg", "--id", "semrun-bench", "-j", "3", "true"}})
	}
	if b.redis != nil {
		cs = append(cs, &contender{name: "semrun -n 3 -- true (Redis)",
			argv: []string{b.semrun, "--redis", b.redis.URL(), "-k", "b", "-n", "3", "--", "true"}})
	}
	g := newGroup(b.ctx, b.env)
	defer g.close()
	for _, c := range cs {
		if err := g.run(c.argv, true); err != nil { // warms caches
			return nil, fmt.Errorf("%s: %w", c.name, err)
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
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			c.times = append(c.times, time.Since(start))
		}
		g.drop()
	}

	var base time.Duration
	for _, c := range cs {
		slices.Sort(c.times)
		if c.name == "flock f true" {
			base = quantile(c.times, 0.5)
		}
	}
	t := &table{
		title: fmt.Sprintf("overhead: whole-process time of one uncontended run, %d rounds in random order", rounds),
		head:  []string{"command", "runs", "p50", "p90", "p50 / flock's"},
	}
	for _, c := range cs {
		p50 := quantile(c.times, 0.5)
		t.add(b.code(c.name), fmt.Sprint(len(c.times)), ms(p50), ms(quantile(c.times, 0.9)), ratio(float64(p50), float64(base)))
	}
	return []*table{t}, nil
}
