package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandsTarget is the most top-level commands one grant may cost.
const commandsTarget = 6.0

// Commands a client sends itself, never a script.
var topLevel = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true,
	"script": true, "subscribe": true, "unsubscribe": true, "psubscribe": true, "punsubscribe": true,
	"ssubscribe": true, "sunsubscribe": true, "ping": true, "hello": true, "client": true, "select": true,
	"auth": true, "quit": true, "reset": true, "readonly": true, "echo": true, "multi": true, "exec": true,
	"discard": true, "watch": true, "unwatch": true,
}

// commands counts the Redis commands semrun sends per grant when many
// wait: the statistics are reset, semruns all start at once on one key
// with one permit and a child that does nothing, and INFO commandstats
// tells what the server ran. Then Redis's time per uncontended grant
// against a minimal semaphore (grantCost), and what logging events costs
// (eventsCost).
func (b *bench) commands() ([]*table, error) {
	if b.redis == nil {
		fmt.Fprintln(os.Stderr, "bench: commands: skipped, without redis-server")
		return nil, nil
	}
	n := b.o.commandWaiters
	calls, took, err := b.commandsRound(n, false)
	if err != nil {
		return nil, err
	}
	// A/B: the same on a key with a capacity an operator stored.
	stored, _, err := b.commandsRound(n, true)
	if err != nil {
		return nil, err
	}
	scripted := scriptCommands(b.root)
	t := commandsTable(n, took, calls, scripted)
	_, top, all := topLevelOf(calls, scripted)
	_, storedTop, storedAll := topLevelOf(stored, scripted)
	t.note("The same on a key with a capacity stored by an operator (semrun key set KEY --permits 1): %.2f top-level commands and %.1f in all per grant, against %.2f and %.1f.",
		float64(storedTop)/float64(n), float64(storedAll)/float64(n), float64(top)/float64(n), float64(all)/float64(n))
	grant, err := b.grantCost(scripted)
	if err != nil {
		return []*table{t}, err
	}
	events, err := b.eventsCost(scripted)
	if err != nil {
		return []*table{t, grant}, err
	}
	return []*table{t, grant, events}, nil
}

// commandsRound starts n semruns at once and tells the calls of each
// command Redis ran meanwhile, and how long all took; stored first keeps
// the key's capacity in the store (semrun key set).
func (b *bench) commandsRound(n int, stored bool) (map[string]int64, time.Duration, error) {
	key, _ := b.key("commands")
	l := find(b.lockers(1, false), "semrun (Redis)")
	argv := l.argv(key, 1, []string{"true"})
	g := newGroup(b.ctx, b.env)
	defer g.close()
	if stored {
		if err := g.run([]string{b.semrun, "key", "set", key, "--permits", "1", "--redis", b.redis.URL()}, true); err != nil {
			return nil, 0, err
		}
	}
	// Loads the scripts, as any earlier run on the server would have.
	if err := g.run(argv, true); err != nil {
		return nil, 0, err
	}
	c := redis.NewClient(&redis.Options{Addr: b.redis.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	if err := c.Ping(b.ctx).Err(); err != nil { // connected before the reset
		return nil, 0, err
	}
	if err := c.ConfigResetStat(b.ctx).Err(); err != nil {
		return nil, 0, err
	}
	began := time.Now()
	for range n {
		if _, err := g.start(argv, true); err != nil {
			return nil, 0, err
		}
	}
	if err := g.waitAll(); err != nil {
		return nil, 0, err
	}
	took := time.Since(began)
	info, err := c.Info(b.ctx, "commandstats").Result()
	if err != nil {
		return nil, 0, err
	}
	calls := commandStats(info)
	delete(calls, "config|resetstat") // the bench's own
	delete(calls, "info")
	return calls, took, nil
}

// commandCount is the calls of one command.
type commandCount struct {
	name  string
	calls int64
}

// topLevelOf splits calls into those a client sent itself, most first,
// and tells their total and the total of all: scripted is the commands
// the scripts call, or nil when their sources were not found.
func topLevelOf(calls map[string]int64, scripted map[string]bool) (top []commandCount, topTotal, all int64) {
	for name, n := range calls {
		all += n
		if sentBySemrun(name, scripted) {
			top = append(top, commandCount{name, n})
			topTotal += n
		}
	}
	slices.SortFunc(top, func(a, b commandCount) int { return cmp.Compare(b.calls, a.calls) })
	return top, topTotal, all
}

// sentBySemrun tells whether a command, named as INFO commandstats names
// it ("config|resetstat"), is one a client sends itself rather than one a
// script runs: scripted is the commands the scripts call, or nil when
// their sources were not found.
func sentBySemrun(name string, scripted map[string]bool) bool {
	base, _, _ := strings.Cut(name, "|")
	return topLevel[base] || (scripted != nil && !scripted[base])
}

// commandsTable shows the calls of n grants that took took, per grant.
func commandsTable(n int, took time.Duration, calls map[string]int64, scripted map[string]bool) *table {
	top, topTotal, all := topLevelOf(calls, scripted)
	grants := float64(n) // every semrun exited 0, so each was granted once
	per := float64(topTotal) / grants
	t := &table{
		title: fmt.Sprintf("commands: Redis commands per grant, %d semruns started at once on one key, -n 1, child `true`", n),
		head:  []string{"commands", "calls", "per grant", "target"},
	}
	t.add("top-level, sent by semrun", fmt.Sprint(topTotal), fmt.Sprintf("%.2f", per),
		fmt.Sprintf("≤ %.0f: %s", commandsTarget, verdict(per <= commandsTarget)))
	for _, c := range top {
		t.add("top-level: "+strings.ToUpper(c.name), fmt.Sprint(c.calls), fmt.Sprintf("%.2f", float64(c.calls)/grants), "")
	}
	t.add("all, with those the scripts run", fmt.Sprint(all), fmt.Sprintf("%.1f", float64(all)/grants), "")
	if scripts := calls["evalsha"] + calls["eval"]; scripts > 0 {
		t.add("run by scripts, per script", fmt.Sprint(all-topTotal), fmt.Sprintf("%.1f / script", float64(all-topTotal)/float64(scripts)), "")
	}
	t.note("%d grants in %v, %.0f grants/s; %d BLPOPs by waiters blocked on their wake lists.", n, took.Round(time.Millisecond),
		grants/took.Seconds(), calls["blpop"])
	if scripted != nil {
		t.note("Top-level: EVALSHA, EVAL, BLPOP, (UN)SUBSCRIBE, PING, SCRIPT and any command the scripts in internal/semaphore/redisstore/protocol/*.lua never call; the bench's own CONFIG RESETSTAT and INFO are left out.")
	} else {
		t.note("Top-level: EVALSHA, EVAL, BLPOP, (UN)SUBSCRIBE, PING, SCRIPT and other connection commands (the scripts' sources were not found to tell more); the bench's own CONFIG RESETSTAT and INFO are left out.")
	}
	return t
}

// commandStats reads the calls of each command from INFO commandstats.
func commandStats(info string) map[string]int64 { return commandField(info, "calls") }

// commandUsec reads the µs each command took from INFO commandstats.
func commandUsec(info string) map[string]int64 { return commandField(info, "usec") }

// commandField reads one field of each command's line of INFO
// commandstats ("cmdstat_get:calls=2,usec=10,...").
func commandField(info, field string) map[string]int64 {
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[name] = n
			}
		}
	}
	return out
}

// redisCall finds a command a script runs: redis.call('X', ...), and
// pcall(redis.call, 'X', ...) where a failure must not stop the script.
var redisCall = regexp.MustCompile(`redis\.p?call(?:\(|,)\s*['"]([A-Za-z_]+)['"]`)

// scriptCommands are the commands semrun's scripts call, from their
// sources in the module at root, or nil.
func scriptCommands(root string) map[string]bool {
	files, _ := filepath.Glob(filepath.Join(root, "internal", "semaphore", "redisstore", "protocol", "*.lua"))
	if len(files) == 0 {
		return nil
	}
	out := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil
		}
		for _, m := range redisCall.FindAllSubmatch(src, -1) {
			out[strings.ToLower(string(m[1]))] = true
		}
	}
	return out
}
