package semaphore

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
)

// These tests call the embedded scripts directly with chosen permit ids,
// on both miniredis (clock set by the test) and a real redis-server, so
// that a difference between gopher-lua and Redis's Lua shows up here.

type backend struct {
	name string
	c    *redis.Client
	// nowMicros is the server's clock in microseconds.
	nowMicros func(t *testing.T) int64
}

var scriptClock = time.Date(2031, 3, 4, 5, 6, 7, 891_234_000, time.UTC)

func backends(t *testing.T) []backend {
	t.Helper()
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	m := miniredis.RunT(t)
	m.SetTime(scriptClock)
	out := []backend{{
		name:      "miniredis",
		c:         client(m.Addr()),
		nowMicros: func(*testing.T) int64 { return scriptClock.UnixMicro() },
	}}
	srv := redistest.New(t)
	rc := client(srv.Addr)
	return append(out, backend{
		name: "redis-server",
		c:    rc,
		nowMicros: func(t *testing.T) int64 {
			now, err := rc.Time(context.Background()).Result()
			if err != nil {
				t.Fatalf("TIME: got error %v, want nil", err)
			}
			return now.UnixMicro()
		},
	})
}

func runAcquire(t *testing.T, c *redis.Client, keys []string, id string, n int, ttl time.Duration, meta string) grant {
	t.Helper()
	res, err := acquireScript.Run(context.Background(), c, keys, id, n, ttl.Milliseconds(), meta).Result()
	if err != nil {
		t.Fatalf("acquire script (id %q): got error %v, want a reply", id, err)
	}
	g, err := parseGrant(res)
	if err != nil {
		t.Fatalf("acquire script (id %q): got %v, want 5 integers", id, err)
	}
	return g
}

func TestAcquireScriptIdempotent(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			keys := (&Redis{prefix: "test:"}).keys("idem")
			const id = "PERMIT0FIXED0ID0FOR0TESTS0"

			first := runAcquire(t, b.c, keys, id, 1, 10*time.Second, `{"host":"h"}`)
			if !first.granted || first.held != 1 {
				t.Fatalf("first call: got %+v, want granted with 1 held", first)
			}
			// The retry of a client whose answer got lost: n=1 is full, but by itself.
			again := runAcquire(t, b.c, keys, id, 1, 10*time.Second, `{"host":"h"}`)
			if !again.granted || again.token != first.token || again.held != 1 {
				t.Fatalf("same id again: got %+v, want granted with the same token %d and 1 held", again, first.token)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Fatalf("ZCARD after a repeated acquire: got (%d, %v), want 1", n, err)
			}
			if tok, err := b.c.Get(ctx, keys[2]).Int64(); err != nil || tok != first.token {
				t.Errorf("token key after a repeated acquire: got (%d, %v), want %d (no token spent)", tok, err, first.token)
			}

			other := runAcquire(t, b.c, keys, "PERMIT0OTHER", 1, 10*time.Second, "")
			if other.granted || other.held != 1 || other.lapseIn <= 0 || other.lapseIn > 10_000 {
				t.Fatalf("another id with n=1 taken: got %+v, want not granted, 1 held, lapse in (0, 10000] ms", other)
			}
			second := runAcquire(t, b.c, keys, "PERMIT0SECOND", 2, 10*time.Second, "")
			if !second.granted || second.token <= first.token || second.held != 2 || second.previous != 1 {
				t.Fatalf("another id with n=2: got %+v, want granted, token > %d, 2 held, previous capacity 1", second, first.token)
			}
			if again := runAcquire(t, b.c, keys, "PERMIT0SECOND", 2, 10*time.Second, ""); again.token != second.token || again.held != 2 {
				t.Errorf("second id again: got %+v, want token %d and 2 held", again, second.token)
			}
		})
	}
}

// holderRecord is what acquire.lua stores per permit: "<n> <token> <granted ms> <meta>".
var holderRecord = regexp.MustCompile(`^(\d+) (\d+) (\d+) (.*)$`)

func TestScriptsAgreeOnBothBackends(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			keys := (&Redis{prefix: "test:"}).keys("shapes")
			const id, meta = "PERMIT0SHAPES", `{"host":"h","pid":1,"command":"a b  c"}`
			before := b.nowMicros(t)
			g := runAcquire(t, b.c, keys, id, 3, 10*time.Second, meta)
			if !g.granted || g.token < before || g.previous != 3 || g.lapseIn <= 0 || g.lapseIn > 10_000 {
				t.Fatalf("acquire: got %+v, want granted, token >= %d µs, previous 3, lapse in (0, 10000] ms", g, before)
			}

			// string.format('%d') of a 16-digit token and a 13-digit time.
			rec, err := b.c.HGet(ctx, keys[1], id).Result()
			if err != nil {
				t.Fatalf("HGET info: got error %v, want the record", err)
			}
			f := holderRecord.FindStringSubmatch(rec)
			if f == nil || f[1] != "3" || f[2] != strconv.FormatInt(g.token, 10) || f[4] != meta {
				t.Fatalf("holder record: got %q, want \"3 %d <ms> %s\"", rec, g.token, meta)
			}
			granted, _ := strconv.ParseInt(f[3], 10, 64)
			if now := b.nowMicros(t) / 1000; granted < before/1000 || granted > now {
				t.Errorf("granted ms in the record: got %d, want in [%d, %d]", granted, before/1000, now)
			}
			score, err := b.c.ZScore(ctx, keys[0], id).Result()
			if err != nil || int64(score) != granted+10_000 {
				t.Errorf("lease expiry: got (%v, %v), want granted+10000 = %d", score, err, granted+10_000)
			}
			if capacity, err := b.c.HGet(ctx, keys[1], "#cap").Result(); err != nil || capacity != "3" {
				t.Errorf("#cap: got (%q, %v), want \"3\"", capacity, err)
			}
			if tok, err := b.c.Get(ctx, keys[2]).Result(); err != nil || tok != strconv.FormatInt(g.token, 10) {
				t.Errorf("token key: got (%q, %v), want %q (an integer, not a float rendering)", tok, err, strconv.FormatInt(g.token, 10))
			}

			res, err := statusScript.Run(ctx, b.c, keys[:2]).Result()
			if err != nil {
				t.Fatalf("status script: got error %v, want a reply", err)
			}
			st, err := parseStatus("shapes", res)
			if err != nil || st.Held != 1 || st.Capacity != 3 || st.Holders[0].Token != g.token || st.Holders[0].Command != "a b  c" {
				t.Errorf("status: got (%+v, %v), want 1 holder with token %d, capacity 3", st, err, g.token)
			}

			if n, err := renewScript.Run(ctx, b.c, keys, id, 10_000).Int64(); err != nil || n != 1 {
				t.Errorf("renew: got (%d, %v), want 1", n, err)
			}
			if n, err := renewScript.Run(ctx, b.c, keys, "PERMIT0NEVER", 10_000).Int64(); err != nil || n != 0 {
				t.Errorf("renew of an id never granted: got (%d, %v), want 0", n, err)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Errorf("ZCARD after renewing an id never granted: got (%d, %v), want 1 (nothing created)", n, err)
			}
			for i, want := range []int64{1, 0} {
				if n, err := releaseScript.Run(ctx, b.c, keys[:2], id).Int64(); err != nil || n != want {
					t.Errorf("release #%d: got (%d, %v), want %d", i+1, n, err, want)
				}
			}
			if fields, err := b.c.HKeys(ctx, keys[1]).Result(); err != nil || len(fields) != 1 || fields[0] != "#cap" {
				t.Errorf("info fields after release: got (%q, %v), want only #cap", fields, err)
			}
		})
	}
}

func TestTokenIsServerClockOnEmptyStore(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(scriptClock)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	keys := (&Redis{prefix: "test:"}).keys("clock")
	g := runAcquire(t, c, keys, "PERMIT0CLOCK", 1, time.Second, "")
	if want := scriptClock.UnixMicro(); g.token != want {
		t.Errorf("first token on an empty store: got %d, want the server clock %d µs", g.token, want)
	}
}

func TestKeysEscapeBraces(t *testing.T) {
	r := &Redis{prefix: "p:"}
	seen := map[string]string{}
	for _, key := range []string{"a", "a}", "{a}", "}x", "%7B", "%7D", "{", "}", "%", "%25", "a:b}:holders"} {
		ks := r.keys(key)
		if len(ks) != 3 {
			t.Fatalf("keys(%q): got %d keys, want 3", key, len(ks))
		}
		lo, hi := strings.IndexByte(ks[0], '{'), strings.IndexByte(ks[0], '}')
		if lo != len("p:") || hi < lo {
			t.Fatalf("keys(%q)[0] = %q: got tag at [%d, %d], want it right after the prefix", key, ks[0], lo, hi)
		}
		tag := ks[0][:hi+1]
		for _, k := range ks {
			if !strings.HasPrefix(k, tag) || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Errorf("keys(%q): got %q, want one {tag} %q shared by all three and no other brace", key, k, tag)
			}
		}
		if prev, dup := seen[tag]; dup {
			t.Errorf("keys(%q) and keys(%q): got the same tag %q, want different keys", prev, key, tag)
		}
		seen[tag] = key
	}
}
