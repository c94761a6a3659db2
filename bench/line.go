package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Targets of the line part: Redis's CPU per grant with the longest line
// within lineCPURatio of the shortest's, and at most lineCPUMax.
const (
	lineCPURatio = 2.0
	// lineAloneRatio bounds a grant from a line of lineAloneSize against
	// an uncontended one's, as lineAlone measures it.
	lineAloneRatio = 2.0
	lineAloneSize  = 50
	lineCPUMax     = 500 * time.Microsecond
	// lineCrowdMax bounds Redis's CPU per grant from a line of
	// lineCrowdSize.
	lineCrowdMax  = time.Millisecond
	lineCrowdSize = 1000
	linePermits   = 10
	lineHold      = 200 * time.Millisecond
)

// line measures what a long line costs Redis: for each size, that many
// semruns join the line of one key of 10 permits, one after the other,
// behind 10 holders; then the holders go, and the line drains, each child
// holding 200ms. While it drains, Redis's CPU (INFO cpu) and the commands
// semruns send (INFO commandstats) are counted per grant; and the children
// say their place and fencing token, which must rise in the order they
// arrived. The same line drains again with mixed priorities (this tree's
// semrun only): the children then say their priority too, and tokens must
// rise by priority, then arrival. With -compare, semrun B's line of each
// size drains after this tree's, in the same run.
func (b *bench) line() ([]*table, error) {
	if b.redis == nil {
		fmt.Fprintln(os.Stderr, "bench: line: skipped, without redis-server")
		return nil, nil
	}
	c := redis.NewClient(&redis.Options{Addr: b.redis.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	t := &table{
		title: fmt.Sprintf("line: Redis's work per grant as the line grows, one key of %d permits, children of %v", linePermits, lineHold),
		head:  []string{"semrun", "waiters", "Redis CPU / grant", "× shortest", "commands / grant", "in order", "drained in", "target"},
	}
	alone, err := b.lineAlone(c)
	if err != nil {
		return []*table{t}, err
	}
	// This tree's semrun, then the same with mixed priorities (semrun B,
	// an older build, may not know --priority), then semrun B.
	var names []string
	for _, l := range b.lockers(linePermits, false) {
		switch l.name {
		case "semrun (Redis)":
			names = append(names, l.name, lineMixed)
		case "semrun B (Redis)":
			names = append(names, l.name)
		}
	}
	first := map[string]time.Duration{}
	longest := map[string]lineResult{}
	for _, n := range b.o.lineSizes {
		for _, name := range names {
			r, err := b.lineRound(c, name, n)
			if err != nil {
				return []*table{t}, err
			}
			if first[name] == 0 {
				first[name] = r.cpu
			}
			longest[name] = r
			x := float64(r.cpu) / float64(first[name])
			var targets []string
			if n == b.o.lineSizes[len(b.o.lineSizes)-1] && len(b.o.lineSizes) > 1 {
				targets = append(targets, fmt.Sprintf("≤ %.0f× and ≤ %v: %s", lineCPURatio, lineCPUMax, verdict(x <= lineCPURatio && r.cpu <= lineCPUMax)))
			}
			if n == lineCrowdSize {
				targets = append(targets, fmt.Sprintf("≤ %v: %s", lineCrowdMax, verdict(r.cpu <= lineCrowdMax)))
			}
			if n == lineAloneSize {
				x := float64(r.cpu) / float64(alone)
				targets = append(targets, fmt.Sprintf("≤ %.0f× uncontended (%.2f×): %s", lineAloneRatio, x, verdict(x <= lineAloneRatio)))
			}
			if strings.HasPrefix(name, "semrun B") {
				targets = nil
			}
			t.add(strings.TrimSuffix(name, " (Redis)"), strconv.Itoa(n), fmt.Sprintf("%.3f ms", float64(r.cpu)/float64(time.Millisecond)), fmt.Sprintf("%.2f", x),
				fmt.Sprintf("%.2f", r.commands), r.order, r.took.Round(time.Millisecond).String(), strings.Join(targets, "; "))
		}
	}
	t.note("Uncontended: %d runs of the same semrun one after another on a key of %d permits, nothing waiting, the child `true`: %.3f ms of Redis CPU a grant, counted alike.", lineAloneSize, linePermits, float64(alone)/float64(time.Millisecond))
	t.note("%s: the same line, the waiter joining i-th asking --priority %s; in order means granted by priority, then arrival (every waiter is in line before the first grant, and nobody asks --priority-age, so that is the whole order).", strings.TrimSuffix(lineMixed, " (Redis)"), "((i*37) mod 201) - 100")
	t.note("Each waiter keeps its place with a lease of 120ms a waiter (from the TTL, at most 10s, to 20m); a permit handed over is claimed for 2s until its waiter takes it. CPU is used_cpu_user + used_cpu_sys of the server while the line drains, over the grants; commands are those semrun sends (EVALSHA, BLPOP...), not those its scripts run. The server's own timers count too: with a longer line, each grant waits on more clients.")
	return []*table{t, lineCommandTable(names, longest, b.o.lineSizes[len(b.o.lineSizes)-1])}, nil
}

// lineCommandTable shows what each command cost Redis per grant while the
// longest line (of n waiters) drained, for each semrun.
func lineCommandTable(names []string, rs map[string]lineResult, n int) *table {
	t := &table{
		title: fmt.Sprintf("line: what each command cost Redis per grant while a line of %d drained", n),
		head:  []string{"command"},
	}
	spent := map[string]int64{}
	for _, name := range names {
		short := strings.TrimSuffix(name, " (Redis)")
		t.head = append(t.head, short+" calls", short+" µs")
		for c, u := range rs[name].usec {
			spent[c] = max(spent[c], u)
		}
	}
	cmds := slices.Collect(maps.Keys(spent))
	slices.SortFunc(cmds, func(a, b string) int { return cmp.Or(cmp.Compare(spent[b], spent[a]), cmp.Compare(a, b)) })
	for _, c := range cmds {
		row := []string{strings.ToUpper(c)}
		for _, name := range names {
			r := rs[name]
			row = append(row, fmt.Sprintf("%.2f", float64(r.calls[c])/float64(n)), fmt.Sprintf("%.1f", float64(r.usec[c])/float64(n)))
		}
		t.add(row...)
	}
	t.note("The usec INFO commandstats gives each command, over the grants; a script's commands are counted in its EVALSHA's µs as well as in their own rows. The rest of Redis's CPU a grant is the connections' reads, writes, accepts and closes, and the server's timers.")
	return t
}

// lineAlone is Redis's CPU per grant of lineAloneSize runs one after
// another with nobody waiting: what a grant from a line is held against.
func (b *bench) lineAlone(c *redis.Client) (time.Duration, error) {
	key, _ := b.key("line-alone")
	l := find(b.lockers(linePermits, false), "semrun (Redis)")
	g := newGroup(b.ctx, b.env)
	defer g.close()
	if err := g.run(l.argv(key, linePermits, []string{"true"}), true); err != nil { // loads the scripts
		return 0, err
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return 0, err
	}
	for range lineAloneSize {
		if err := g.run(l.argv(key, linePermits, []string{"true"}), true); err != nil {
			return 0, err
		}
	}
	cpu1, err := serverCPU(c)
	if err != nil {
		return 0, err
	}
	return (cpu1 - cpu0) / lineAloneSize, nil
}

type lineResult struct {
	cpu      time.Duration
	commands float64
	order    string
	took     time.Duration
	// calls and usec are what INFO commandstats counted of each command
	// while the line drained.
	calls, usec map[string]int64
}

// lineMixed is the side of the line part whose waiters ask mixed
// priorities (linePriority), of this tree's semrun with Redis.
const lineMixed = "semrun, mixed priorities (Redis)"

// linePriority is the priority of the waiter that joins the line i-th on
// the mixed side: spread over -100..100, every value as often, ties among
// the 2,000, the same in every run.
func linePriority(i int) int { return i*37%201 - 100 }

// lineRound drains a line of n waiters, of the locker named name.
func (b *bench) lineRound(c *redis.Client, name string, n int) (lineResult, error) {
	var r lineResult
	key, log := b.key("line")
	mixed := name == lineMixed
	if mixed {
		name = "semrun (Redis)"
	}
	l := find(b.lockers(linePermits, false), name)
	gate := filepath.Join(b.dir, key+".gate")
	order := filepath.Join(b.dir, key+".order")
	g := newGroup(b.ctx, b.env)
	defer g.close()
	for i := range linePermits {
		p, err := g.start(l.argv(key, linePermits, b.childArgv(log, "gate:"+gate)), false)
		if err != nil {
			return r, err
		}
		if err := waitStarted(b.ctx, log, i+1, p, 30*time.Second); err != nil {
			return r, fmt.Errorf("holders: %w", err)
		}
	}
	waiters := semKey(key, "waiters")
	for i := range n {
		// Each child says its place, its priority and its token.
		prio := 0
		if mixed {
			prio = linePriority(i)
		}
		child := []string{"sh", "-c", `echo "$0 $5 $SEMRUN_FENCING_TOKEN" >> "$1"; exec "$2" "$3" "$4"`,
			strconv.Itoa(i), order, b.child, log, strconv.FormatFloat(lineHold.Seconds(), 'f', -1, 64), strconv.Itoa(prio)}
		argv := l.argv(key, linePermits, child)
		if mixed {
			argv = withPriority(argv, prio)
		}
		if _, err := g.start(argv, false); err != nil {
			return r, err
		}
		// Each takes its place before the next comes: their order is known.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			seq, _ := c.HGet(b.ctx, waiters, "#seq").Int()
			if seq > i {
				break
			}
			if time.Now().After(deadline) || b.ctx.Err() != nil {
				return r, fmt.Errorf("waiter %d did not join the line", i)
			}
		}
	}
	cpu0, err := serverCPU(c)
	if err != nil {
		return r, err
	}
	if err := c.ConfigResetStat(b.ctx).Err(); err != nil {
		return r, err
	}
	began := time.Now()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		return r, err
	}
	if err := g.waitAll(); err != nil {
		return r, err
	}
	r.took = time.Since(began)
	cpu1, err := serverCPU(c)
	if err != nil {
		return r, err
	}
	info, err := c.Info(b.ctx, "commandstats").Result()
	if err != nil {
		return r, err
	}
	calls := commandStats(info)
	r.usec = commandUsec(info)
	delete(calls, "config|resetstat") // the bench's
	delete(r.usec, "config|resetstat")
	r.calls = calls
	scripted := scriptCommands(b.root)
	var top int64
	for name, k := range calls {
		base, _, _ := strings.Cut(name, "|")
		if base != "info" && base != "config" && (topLevel[base] || (scripted != nil && !scripted[base])) {
			top += k
		}
	}
	r.cpu = (cpu1 - cpu0) / time.Duration(n)
	r.commands = float64(top) / float64(n)
	r.order, err = inOrder(order, n)
	return r, err
}

// withPriority is semrun's argv asking priority p: --priority before the
// command's "--".
func withPriority(argv []string, p int) []string {
	i := slices.Index(argv, "--")
	return slices.Concat(argv[:i], []string{"--priority", strconv.Itoa(p)}, argv[i:])
}

// semKey is a Redis key of semaphore key, as the store names it with the
// default prefix.
func semKey(key, name string) string { return "semrun:{" + key + "}:" + name }

// serverCPU is the CPU time the server has used, from INFO cpu.
func serverCPU(c *redis.Client) (time.Duration, error) {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	for l := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %q", l)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// inOrder says whether the n waiters, all in line before the first
// grant, were granted in the line's order: by priority, higher first,
// then in the order they joined (their place); or how many were granted
// out of place. Each child said its place, its priority and its token,
// and tokens rise with the grants.
func inOrder(path string, n int) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	type got struct{ place, prio, token int64 }
	var all []got
	for l := range strings.Lines(string(data)) {
		f := strings.Fields(l)
		if len(f) != 3 {
			return "", fmt.Errorf("order: line %q", l)
		}
		var v [3]int64
		for i := range v {
			if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				return "", fmt.Errorf("order: line %q", l)
			}
		}
		all = append(all, got{v[0], v[1], v[2]})
	}
	if len(all) != n {
		return "", fmt.Errorf("order: %d children ran, want %d", len(all), n)
	}
	want := slices.Clone(all)
	slices.SortFunc(want, func(a, b got) int { return cmp.Or(cmp.Compare(b.prio, a.prio), cmp.Compare(a.place, b.place)) })
	slices.SortFunc(all, func(a, b got) int { return cmp.Compare(a.token, b.token) })
	late := 0
	for i, x := range all {
		if x.place != want[i].place {
			late++
		}
	}
	if late == 0 {
		return "yes", nil
	}
	return fmt.Sprintf("no: %d of %d out of place", late, n), nil
}
