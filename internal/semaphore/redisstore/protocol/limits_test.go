package protocol

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// TestLimitsAreTheGoConstants: the limits every script reads, as Lua
// evaluates them on both backends, are the Go constants the store
// checks, and each is declared before lib.lua.
func TestLimitsAreTheGoConstants(t *testing.T) {
	t.Parallel()
	chunk := limitsLua()
	if n := regexp.MustCompile("\n").FindAllStringIndex(chunk, -1); len(n) != limitLines {
		t.Fatalf("limits chunk: got %d lines, want %d (Wrap counts on it): %q", len(n), limitLines, chunk)
	}
	want := map[string]int64{
		"MAXTTL": MaxTTL.Milliseconds(), "MINTTL": MinTTL.Milliseconds(), "MAXPERMITS": MaxPermits,
		"PERWAITER": PerWaiter.Milliseconds(), "MAXWAIT": MaxWaiterLease.Milliseconds(), "MAXLINE": MaxLineArg,
		"CLAIM": Claim.Milliseconds(), "ROLLCALL": RollCall.Milliseconds(), "ROLLMAX": RollCallMax, "WAKELIFE": WakeListLife.Milliseconds(), "MAXLIST": MaxStatusList,
		"SWEEP": Sweep, "HOLDLIFE": 86400000, "MAXSHARES": 64, "MAXWHY": 200, "MAXREPLICAS": 1000, "MAXINT": 9007199254740991,
		"MAXBOUND": (31*24 + 24) * 3600_000, "MAXCOOL": 31 * 24 * 3600_000, "MAXREASON": 200, "MAXPAUSE": 31 * 24 * 3600_000,
		"MAXEVENTS": semaphore.MaxEvents, "EVENTLIFE": 8 * 24 * 3600_000, "EVENTREFRESH": 3600_000, "MAXMETA": 4096,
		"MAXKEYS": 8, "MAXSLOTS": 1024, "MAXSLOTNAME": 800,
		"MAXPRIO": 100, "MAXAGE": 86_400_000, "NOAGE": 1 << 33, "TIES": 1024, "BADTEXT": 100,
	}
	if len(limits) != len(want) {
		t.Errorf("limits: got %d, want %d", len(limits), len(want))
	}
	m := miniredis.RunT(t)
	for _, addr := range []string{m.Addr(), redistest.New(t).Addr} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		for name, value := range want {
			// As a string: a Lua number comes back as an integer, cut.
			got, err := c.Eval(context.Background(), chunk+"return string.format('%d', "+name+")", nil).Text()
			if err != nil || got != strconv.FormatInt(value, 10) {
				t.Errorf("%s in the scripts on %s: got (%s, %v), want %d", name, addr, got, err, value)
			}
		}
		var bounds []string
		for _, b := range semaphore.Buckets {
			bounds = append(bounds, strconv.FormatInt(b.Milliseconds(), 10))
		}
		got, err := c.Eval(context.Background(), chunk+"local out = {} for i, b in ipairs(BUCKETS) do out[i] = string.format('%d', b) end return table.concat(out, ' ')", nil).Text()
		if want := strings.Join(bounds, " "); err != nil || got != want {
			t.Errorf("BUCKETS in the scripts on %s: got (%s, %v), want %s (ms)", addr, got, err, want)
		}
		got, err = c.Eval(context.Background(), chunk+"return string.format('%d', OLDBUCKETS)", nil).Text()
		if want := strconv.Itoa(len(semaphore.OldBuckets)); err != nil || got != want {
			t.Errorf("OLDBUCKETS in the scripts on %s: got (%s, %v), want %s", addr, got, err, want)
		}
		got, err = c.Eval(context.Background(), chunk+"return string.format('%.6f', RECENTWEIGHT)", nil).Text()
		if want := strconv.FormatFloat(semaphore.RecentWeight, 'f', 6, 64); err != nil || got != want {
			t.Errorf("RECENTWEIGHT in the scripts on %s: got (%s, %v), want %s", addr, got, err, want)
		}
	}
}

// TestScriptsSpellNoLimit: no script writes a limit's value itself, only
// its name, so that the scripts cannot disagree with the Go constants.
// Arithmetic with 1000 and 1000000 converts units of time (s, ms, µs).
func TestScriptsSpellNoLimit(t *testing.T) {
	units := regexp.MustCompile(`[-+*/] 1000(000)?\b`)
	for _, sc := range append(Scripts(), &Script{name: "lib.lua", body: libLua}) {
		body := units.ReplaceAllString(sc.body, "")
		for _, l := range limits {
			if l.value < 30 {
				continue // too short to tell from a count
			}
			if regexp.MustCompile(`\b` + strconv.FormatInt(l.value, 10) + `\b`).MatchString(body) {
				t.Errorf("%s spells %s's value %d: want its name", sc.name, l.name, l.value)
			}
		}
	}
}

// TestScriptsReadTheLimitsFirst: every script's source is the limits,
// lib.lua and its own file, in this order; of lib.lua, the lines of what
// the script needs, the others blank (libFor), so that every line keeps
// its number (Script.Wrap).
func TestScriptsReadTheLimitsFirst(t *testing.T) {
	libLines := strings.Split(libLua, "\n")
	for _, sc := range Scripts() {
		rest, limitsFirst := strings.CutPrefix(sc.Source(), limitsLua())
		lib, bodyLast := strings.CutSuffix(rest, sc.body)
		if !limitsFirst || !bodyLast {
			t.Errorf("%s: source is not the limits, lib.lua and its own file", sc.name)
			continue
		}
		lines := strings.Split(lib, "\n")
		if len(lines) != len(libLines) {
			t.Errorf("%s: lib.lua takes %d lines, not %d", sc.name, len(lines), len(libLines))
			continue
		}
		for i, l := range lines {
			if l != "" && l != libLines[i] {
				t.Errorf("%s: lib.lua:%d is %q, not %q", sc.name, i+1, l, libLines[i])
				break
			}
		}
	}
}

// BenchmarkBuildAllScripts is what building every script costs: each run
// would pay it at start-up (--local and version too) if the scripts were
// built then rather than when first used (Script.Build). The first build
// also splits lib.lua (BenchmarkSplitLib).
func BenchmarkBuildAllScripts(b *testing.B) {
	for b.Loop() {
		for _, sc := range []*Script{newScript("acquire.lua", acquireLua), newScript("renew.lua", renewLua),
			newScript("release.lua", releaseLua), newScript("status.lua", statusLua), newScript("watch.lua", watchLua)} {
			sc.Build()
		}
	}
}

// BenchmarkSplitLib is what the first script a process builds pays to split
// lib.lua into its pieces (libPieces).
func BenchmarkSplitLib(b *testing.B) {
	for b.Loop() {
		if _, err := libPieces(libLua); err != nil {
			b.Fatal(err)
		}
	}
}
