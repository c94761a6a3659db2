package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// Events: what logging and counting a key's events costs Redis.
const (
	// eventsRuns is how many uncontended grants and releases each side of
	// the A/B makes, in eventsRounds rounds that alternate the sides, so
	// that a machine busy for a while weighs on both.
	eventsRuns   = 4000
	eventsRounds = 16
	// eventsExtraTarget is the most commands logging and counting may add
	// to an uncontended grant and release, in all (the scripts' included).
	eventsExtraTarget = 8.0
)

// eventsHolder is what a run tells of itself, as cmd fills it: the
// events log it whole.
var eventsHolder = semaphore.HolderInfo{Host: "build-agent-17.example.com", PID: 123456, Command: "render.sh",
	Label: "https://ci.example.com/org/repo/-/jobs/1234567"}

// costSide is one side of an A/B of what grants cost Redis: what one
// grant and release is (run), the commands its scripts call (scripted,
// which INFO commandstats counts as well as those sent), and what its
// runs cost.
type costSide struct {
	name     string
	run      func() error
	close    func() error
	scripted map[string]bool
	top, all int64
	// usec is the µs per run of each round: their median says less of a
	// round the machine was busy for.
	usec []float64
}

// eventsCost measures, A/B in one run, what one uncontended grant and
// release cost Redis on a store that logs events and on one with
// NoEvents: the commands and the µs Redis spent in those semrun sent
// (INFO commandstats), in process, so that only the store's work counts.
// Then the memory of one key's whole log (MEMORY USAGE).
func (b *bench) eventsCost(scripted map[string]bool) (*table, error) {
	c := redis.NewClient(&redis.Options{Addr: b.redis.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	req := semaphore.Request{Permits: 1, TTL: 10 * time.Second, NoWait: true, Holder: eventsHolder}
	sides, keys, err := b.storeSides("bench-events:", "events", req, scripted, [2]string{"events on", "events off (NoEvents)"})
	if err != nil {
		return nil, err
	}
	defer closeSides(sides)
	if err := b.costRounds(c, sides, eventsRuns, eventsRounds); err != nil {
		return nil, err
	}
	t := eventsTable(sides[0], sides[1])
	if err := b.eventsLogSize(c, t, keys[0]); err != nil {
		return nil, err
	}
	t.note("In process, Acquire (NoWait) then Release on one key, nothing waiting: only the store's own commands count, not a process's start. Redis µs is the usec INFO commandstats gives the commands semrun sent (the scripts' time included), not the ones the scripts ran, which it also counts: the median of the rounds, and of the rounds' differences.")
	return t, nil
}

// costRounds runs each side once (which loads its scripts and makes its
// keys), then runs grants and releases on each, runs in all, in rounds
// that alternate the sides, so that a machine busy for a while weighs on
// all: each side first in as many rounds.
func (b *bench) costRounds(c *redis.Client, sides []*costSide, runs, rounds int) error {
	for _, s := range sides {
		if err := s.run(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	for r := range rounds {
		for i := range sides {
			s := sides[(r+i)%len(sides)]
			if err := b.costRound(c, s, runs/rounds); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	return nil
}

// costRound makes n grants and releases on s, and adds to s the commands
// they cost and the µs Redis spent in those sent (not in those a script
// ran, which INFO commandstats also counts).
func (b *bench) costRound(c *redis.Client, s *costSide, n int) error {
	if err := c.ConfigResetStat(b.ctx).Err(); err != nil {
		return err
	}
	for range n {
		if err := s.run(); err != nil {
			return err
		}
	}
	info, err := c.Info(b.ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	calls, usec := commandStats(info), commandUsec(info)
	delete(calls, "config|resetstat")
	_, top, all := topLevelOf(calls, s.scripted)
	s.top, s.all = s.top+top, s.all+all
	var spent int64
	for name, u := range usec {
		if sentBySemrun(name, s.scripted) && name != "config|resetstat" && name != "info" {
			spent += u
		}
	}
	s.usec = append(s.usec, float64(spent)/float64(n))
	return nil
}

// eventsTable shows what each side cost per run, and what logging events
// adds: on's cost less off's.
func eventsTable(on, off *costSide) *table {
	t := &table{
		title: fmt.Sprintf("events: what logging a key's events costs Redis, per uncontended grant and release (%d each side, A/B alternated in %d rounds)", eventsRuns, eventsRounds),
		head:  []string{"store", "commands sent", "commands in all", "Redis µs", "target"},
	}
	per := func(n int64) float64 { return float64(n) / eventsRuns }
	for _, s := range []*costSide{on, off} {
		t.add(s.name, fmt.Sprintf("%.2f", per(s.top)), fmt.Sprintf("%.1f", per(s.all)), fmt.Sprintf("%.1f", median(s.usec)), "")
	}
	extra := per(on.all - off.all)
	// Each round's pair: both sides ran then, on the same machine.
	diffs := make([]float64, eventsRounds)
	for r := range diffs {
		diffs[r] = on.usec[r] - off.usec[r]
	}
	t.add("events on − off", fmt.Sprintf("%+.2f", per(on.top-off.top)), fmt.Sprintf("%+.1f", extra), fmt.Sprintf("%+.1f", median(diffs)),
		fmt.Sprintf("≤ %.0f more in all: %s", eventsExtraTarget, verdict(extra <= eventsExtraTarget)))
	return t
}

// eventsLogSize notes on t the memory of key's whole log and counters,
// after every run of the events-on side.
func (b *bench) eventsLogSize(c *redis.Client, t *table, key string) error {
	k := protocol.NewKeys("bench-events:", key)
	bytes, err := c.MemoryUsage(b.ctx, k.Events, 0).Result()
	if err != nil {
		return err
	}
	entries, err := c.XLen(b.ctx, k.Events).Result()
	if err != nil {
		return err
	}
	stats, err := c.MemoryUsage(b.ctx, k.Stats, 0).Result()
	if err != nil {
		return err
	}
	t.note("One key's whole log after %d runs (%d events): %d entries, %.0f KiB (MEMORY USAGE %s SAMPLES 0), %.0f bytes an entry; its counters %d bytes. Each event tells the holder as cmd does: host, pid, command and a label of %d bytes.",
		eventsRuns+1, 2*(eventsRuns+1), entries, float64(bytes)/1024, k.Events, float64(bytes)/float64(max(entries, 1)), stats, len(eventsHolder.Label))
	return nil
}

// median is the median of v.
func median(v []float64) float64 {
	v = slices.Sorted(slices.Values(v))
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// storeSides are two sides of an A/B, named names, each a store of its
// own under prefix and a key named after name, whose runs take a permit
// as req asks (its Key set) and give it back: the first logs events, the
// second not (NoEvents). It returns their keys too; closeSides closes the
// stores.
func (b *bench) storeSides(prefix, name string, req semaphore.Request, scripted map[string]bool, names [2]string) ([]*costSide, []string, error) {
	var sides []*costSide
	var keys []string
	for i, noEvents := range []bool{false, true} {
		st, err := redisstore.New(redisstore.Options{URL: b.redis.URL(), Prefix: prefix, NoEvents: noEvents})
		if err != nil {
			closeSides(sides)
			return nil, nil, err
		}
		key, _ := b.key(name)
		r := req
		r.Key = key
		sides = append(sides, &costSide{name: names[i], run: func() error { return grantAndRelease(b, st, r) }, scripted: scripted, close: st.Close})
		keys = append(keys, key)
	}
	return sides, keys, nil
}

// closeSides closes what the sides opened.
func closeSides(sides []*costSide) {
	for _, s := range sides {
		if s.close != nil {
			_ = s.close()
		}
	}
}

// grantAndRelease takes a permit as req asks and gives it back, as a run
// whose command exited 0 does.
func grantAndRelease(b *bench, st *redisstore.Store, req semaphore.Request) error {
	l, err := st.Acquire(b.ctx, req)
	if err != nil {
		return err
	}
	return l.Finish(b.ctx, 0)
}
