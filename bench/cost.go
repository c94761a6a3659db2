package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/bench/minimal"
	"github.com/semrun/semrun/internal/semaphore"
)

// Cost: what one run costs Redis, measured as a fleet makes runs: a
// process per grant and release, each on a connection of its own, one
// after another with a gap between them, so that Redis's caches are as
// cold as between the runs of many hosts; beside the minimal semaphore
// (package minimal) driven the same way, a process per grant and release.
const (
	costRuns   = 20 // processes a side and a round
	costRounds = 15
	// costGap is the pause between two processes, besides their start.
	costGap = 5 * time.Millisecond
	// costRatioTarget is the most Redis's time per run may be, as a
	// multiple of the minimal semaphore's, a process per run.
	costRatioTarget = 3.0
)

// procSide is one side of the cost part: a process per grant and release
// (argv, the i-th), the commands its scripts call (which INFO commandstats
// counts as well as those sent), and what its runs cost.
type procSide struct {
	name     string
	argv     func(i int) []string
	scripted map[string]bool
	// usec and cpu are each round's µs per run: Redis's time in the
	// commands sent (INFO commandstats), and the server's CPU (INFO cpu).
	usec, cpu []float64
	// calls and spent are every command's calls and µs, over all rounds.
	calls, spent map[string]int64
	runs         int
}

// cost measures, A/B in one run, what a run costs Redis a process per run:
// semrun's (and semrun B's, with -compare) `semrun -k KEY -n 3 -- true`
// and the minimal semaphore's minsem, alternated in rounds; then what
// each command of a run costs.
func (b *bench) cost() ([]*table, error) {
	if b.redis == nil {
		fmt.Fprintln(os.Stderr, "bench: cost: skipped, without redis-server")
		return nil, nil
	}
	minsem, err := b.build("minsem", "./bench/minimal/minsem")
	if err != nil {
		return nil, err
	}
	scripted := scriptCommands(b.root)
	var sides, crowded []*procSide
	// preholds hold every slot of a crowded key but its last.
	var preholds [][]string
	var crowdedKeys []string
	for _, l := range b.lockers(3, false) {
		if l.name != "semrun (Redis)" && l.name != "semrun B (Redis)" {
			continue
		}
		key, _ := b.key("cost")
		argv := l.argv(key, 3, []string{"true"})
		name := strings.TrimSuffix(l.name, " (Redis)")
		sides = append(sides, &procSide{name: name, scripted: scripted,
			argv: func(int) []string { return argv }})
		// Slots, at their dearest: the grant's slot is the last of
		// semaphore.MaxSlots, every other held, so that it reads every
		// slot's holder (A/B with semrun B, which numbers none).
		key, _ = b.key("cost-slots")
		last := l.argv(key, semaphore.MaxSlots, []string{"true"})
		crowded = append(crowded, &procSide{name: fmt.Sprintf("%s, slot %d of %d", name, semaphore.MaxSlots-1, semaphore.MaxSlots),
			scripted: scripted, argv: func(int) []string { return last }})
		hold := l.argv(key, semaphore.MaxSlots, []string{"sleep", "3600"})
		dash := slices.Index(hold, "--")
		preholds = append(preholds, slices.Insert(hold, dash, "--weight", strconv.Itoa(semaphore.MaxSlots-1)))
		crowdedKeys = append(crowdedKeys, key)
	}
	// Several keys at once, A/B against one key in the same rounds:
	// semrun's own build only.
	if one := sides[0]; one.name == "semrun" {
		for _, k := range []int{2, 3} {
			argv := slices.Clone(one.argv(0))
			dash := slices.Index(argv, "--")
			var more []string
			for range k - 1 {
				key, _ := b.key("cost")
				more = append(more, "-k", key)
			}
			argv = slices.Insert(argv, dash, more...)
			sides = slices.Insert(sides, k-1, &procSide{name: fmt.Sprintf("semrun, %d keys", k), scripted: scripted,
				argv: func(int) []string { return argv }})
		}
	}
	sides = append(sides, crowded...)
	key, _ := b.key("cost-minimal")
	least := &procSide{name: "minimal semaphore", scripted: minimal.Scripted, argv: func(i int) []string {
		return []string{minsem, b.redis.Addr, key, fmt.Sprintf("%026d", i)}
	}}
	sides = append(sides, least)
	c := redis.NewClient(&redis.Options{Addr: b.redis.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	g := newGroup(b.ctx, b.env)
	defer g.close()
	for i, argv := range preholds {
		if _, err := g.start(argv, true); err != nil {
			return nil, err
		}
		if err := awaitHolder(b.ctx, c, crowdedKeys[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", crowded[i].name, err)
		}
	}
	for _, s := range sides { // loads the scripts and makes the keys, as an earlier run would have
		s.calls, s.spent = map[string]int64{}, map[string]int64{}
		if err := g.run(s.argv(0), true); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	for r := range costRounds {
		for i := range sides {
			s := sides[(r+i)%len(sides)]
			if err := b.procRound(c, g, s); err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	return []*table{costTable(sides, least), commandCostTable(sides[:len(sides)-1], least)}, nil
}

// procRound runs costRuns processes of s, one after another, and adds to
// s what they cost Redis.
func (b *bench) procRound(c *redis.Client, g *group, s *procSide) error {
	cpu0, err := serverCPU(c)
	if err != nil {
		return err
	}
	if err := c.ConfigResetStat(b.ctx).Err(); err != nil {
		return err
	}
	for range costRuns {
		s.runs++
		if err := g.run(s.argv(s.runs), true); err != nil {
			return err
		}
		g.drop()
		select {
		case <-b.ctx.Done():
			return b.ctx.Err()
		case <-time.After(costGap):
		}
	}
	info, err := c.Info(b.ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	cpu1, err := serverCPU(c)
	if err != nil {
		return err
	}
	calls, usec := commandStats(info), commandUsec(info)
	delete(calls, "config|resetstat")
	var spent int64
	for name, n := range calls {
		s.calls[name] += n
		s.spent[name] += usec[name]
		if sentBySemrun(name, s.scripted) {
			spent += usec[name]
		}
	}
	s.usec = append(s.usec, float64(spent)/costRuns)
	s.cpu = append(s.cpu, float64(cpu1-cpu0)/float64(time.Microsecond)/costRuns)
	return nil
}

// costTable shows each side's cost per run, against the minimal
// semaphore's.
func costTable(sides []*procSide, least *procSide) *table {
	t := &table{
		title: fmt.Sprintf("cost: what one run costs Redis, a process per grant and release (%d each, alternated in %d rounds)", costRuns*costRounds, costRounds),
		head:  []string{"run", "commands sent", "commands in all", "Redis µs", "/ minimal", "Redis CPU µs", "CPU / minimal", "target"},
	}
	for _, s := range sides {
		var top, all int64
		for name, n := range s.calls {
			all += n
			if sentBySemrun(name, s.scripted) {
				top += n
			}
		}
		// Each round's ratio: both sides ran then, on the same machine.
		ratio := func(of, to []float64) float64 {
			r := make([]float64, len(of))
			for i := range r {
				r[i] = of[i] / max(to[i], 0.01)
			}
			return median(r)
		}
		x, target := ratio(s.usec, least.usec), ""
		if s == sides[0] {
			target = fmt.Sprintf("≤ %.0f×: %s", costRatioTarget, verdict(x <= costRatioTarget))
		}
		runs := float64(s.runs)
		t.add(s.name, fmt.Sprintf("%.2f", float64(top)/runs), fmt.Sprintf("%.1f", float64(all)/runs),
			fmt.Sprintf("%.0f", median(s.usec)), fmt.Sprintf("%.2f×", x), fmt.Sprintf("%.0f", median(s.cpu)),
			fmt.Sprintf("%.2f×", ratio(s.cpu, least.cpu)), target)
	}
	t.note("semrun, slot %d of %d is `semrun -k KEY -n %d -- true` beside a holder of every other slot (one process with --weight %d): its grant reads every slot's holder to find the free one, the dearest a grant's slots can be; semrun B's, the same runs of the build compared.", semaphore.MaxSlots-1, semaphore.MaxSlots, semaphore.MaxSlots, semaphore.MaxSlots-1)
	t.note("semrun, 2 keys and 3 keys are `semrun -k KEY -k KEY2 [-k KEY3] -n 3 -- true`: a caller of several keys takes them one after another, a grant and a release of each.")
	t.note("Each run is a process of its own, started one after another, %v apart besides their start: semrun is `semrun -k KEY -n 3 -- true` (a 30s lease, the bench's restart fence of %v), the minimal semaphore bench/minimal/minsem, one grant and release of one sorted set of leases (a script and a ZREM, on a connection of its own, with semrun's handshake). Between two processes Redis's caches go cold, as between the runs of a fleet: a command costs it several times what it does back to back (the grant table).", costGap, benchFence)
	t.note("Redis µs is the usec INFO commandstats gives the commands sent (the scripts' commands included), per run, the median of the rounds; / minimal, the median of each round's ratio. Redis CPU is used_cpu_user + used_cpu_sys of the server (INFO cpu) per run, which also counts the connection's accept and close, its reads and writes, and the server's own timers.")
	return t
}

// commandCostTable shows what each command of a run costs Redis, for the
// semrun sides, and the minimal semaphore's in a note.
func commandCostTable(sides []*procSide, least *procSide) *table {
	t := &table{
		title: "cost: what each command of a run costs Redis, a process per run (calls and µs per run)",
		head:  []string{"command", "sent by"},
	}
	for _, s := range sides {
		t.head = append(t.head, s.name+" calls", s.name+" µs")
	}
	spent := map[string]int64{}
	for _, s := range sides {
		for name, u := range s.spent {
			spent[name] = max(spent[name], u*int64(sides[0].runs)/int64(max(s.runs, 1)))
		}
	}
	names := slices.Collect(func(yield func(string) bool) {
		for name := range spent {
			if !yield(name) {
				return
			}
		}
	})
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(spent[b], spent[a]), cmp.Compare(a, b)) })
	for _, name := range names {
		by := "script"
		if sentBySemrun(name, sides[0].scripted) {
			by = "semrun"
		}
		row := []string{strings.ToUpper(name), by}
		for _, s := range sides {
			runs := float64(max(s.runs, 1))
			row = append(row, fmt.Sprintf("%.2f", float64(s.calls[name])/runs), fmt.Sprintf("%.1f", float64(s.spent[name])/runs))
		}
		t.add(row...)
	}
	// What EVALSHA and EVAL took beyond the commands their scripts called:
	// the scripts' own Lua, and making their arguments and replies.
	row := []string{"(the scripts' Lua, arguments and replies)", "script"}
	for _, s := range sides {
		var lua int64
		for name, u := range s.spent {
			switch {
			case name == "evalsha" || name == "eval":
				lua += u
			case !sentBySemrun(name, s.scripted):
				lua -= u
			}
		}
		row = append(row, "", fmt.Sprintf("%.1f", float64(lua)/float64(max(s.runs, 1))))
	}
	t.add(row...)
	var parts []string
	for name, n := range least.calls {
		parts = append(parts, fmt.Sprintf("%s %.2f× %.1f µs", strings.ToUpper(name), float64(n)/float64(least.runs), float64(least.spent[name])/float64(least.runs)))
	}
	slices.Sort(parts)
	t.note("Over every round: µs is the usec INFO commandstats gives each command, per run; a script's commands are counted in its EVALSHA's µs as well as in their own rows. PING and PUBLISH, and a few INFO, are the bench's Sentinel's. The minimal semaphore's run: %s.", strings.Join(parts, ", "))
	return t
}

// awaitHolder waits, for at most a minute, until key (with the default
// prefix) has a holder.
func awaitHolder(ctx context.Context, c *redis.Client, key string) error {
	for range 600 {
		if n, err := c.ZCard(ctx, "semrun:{"+key+"}:holders").Result(); err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("key %q: no holder within a minute", key)
}
