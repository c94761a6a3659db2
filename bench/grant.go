package main

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/bench/minimal"
	"github.com/semrun/semrun/internal/semaphore"
)

// Grant: what one uncontended grant and release cost Redis, semrun's
// against the least a Redis semaphore can do.
const (
	grantRuns   = 3000
	grantRounds = 15
	// grantRatioTarget is the most Redis's time per semrun grant may be,
	// as a multiple of the minimal semaphore's.
	grantRatioTarget = 8.0
)

// grantCost measures, A/B in one run, Redis's time per uncontended grant
// and release: semrun's store asked as a run asks (a lease of 30s, 3
// permits, the bench's restart fence, waiting if it must), with events
// and without, and the minimal semaphore, each one grant after another
// on one connection, in process.
func (b *bench) grantCost(scripted map[string]bool) (*table, error) {
	c := redis.NewClient(&redis.Options{Addr: b.redis.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	req := semaphore.Request{Permits: 3, TTL: 30 * time.Second, RestartFence: benchFence, Holder: eventsHolder}
	sides, _, err := b.storeSides("bench-grant:", "grant", req, scripted, [2]string{"semrun", "semrun, events off"})
	if err != nil {
		return nil, err
	}
	defer closeSides(sides)
	key, _ := b.key("minimal")
	n := 0
	least := &costSide{name: "minimal semaphore", scripted: minimal.Scripted, run: func() error {
		n++
		return minimal.GrantRelease(b.ctx, c, key, fmt.Sprintf("%026d", n))
	}}
	sides = append(sides, least)
	if err := b.costRounds(c, sides, grantRuns, grantRounds); err != nil {
		return nil, err
	}
	return grantTable(sides, least), nil
}

// grantTable shows each side's cost per grant and release, against the
// minimal semaphore's.
func grantTable(sides []*costSide, least *costSide) *table {
	t := &table{
		title: fmt.Sprintf("grant: Redis's time per uncontended grant and release, against a minimal semaphore (%d each, A/B alternated in %d rounds)", grantRuns, grantRounds),
		head:  []string{"store", "commands sent", "commands in all", "Redis µs", "/ minimal", "target"},
	}
	per := func(n int64) float64 { return float64(n) / grantRuns }
	floor := median(least.usec)
	for _, s := range sides {
		// Each round's ratio: both sides ran then, on the same machine.
		ratios := make([]float64, len(s.usec))
		for r := range ratios {
			ratios[r] = s.usec[r] / max(least.usec[r], 0.01)
		}
		ratio, target := median(ratios), ""
		if s == sides[0] {
			target = fmt.Sprintf("≤ %.0f×: %s", grantRatioTarget, verdict(ratio <= grantRatioTarget))
		}
		t.add(s.name, fmt.Sprintf("%.2f", per(s.top)), fmt.Sprintf("%.1f", per(s.all)), fmt.Sprintf("%.1f", median(s.usec)),
			fmt.Sprintf("%.1f×", ratio), target)
	}
	t.note("In process, on one connection, one grant after another, nothing waiting: only the store's own work counts, not a process's start. semrun's store is asked as a run asks: 3 permits, a 30s lease, a restart fence of %v, waiting if it must. Redis µs is the usec INFO commandstats gives the commands sent (the scripts' time included), the median of the rounds; / minimal, the median of each round's ratio. The minimal semaphore (%.1f µs) is one sorted set of leases, swept, counted and added to by one script, and a ZREM: no line, fencing token, restart fence, weights or events.", benchFence, floor)
	return t
}
