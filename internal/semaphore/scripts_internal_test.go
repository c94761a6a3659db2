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
	// advance moves the server's clock on by at least d: miniredis's at
	// once, by exactly d; a redis-server's by sleeping a little longer.
	advance func(d time.Duration)
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
	now := scriptClock
	out := []backend{{
		name:      "miniredis",
		c:         client(m.Addr()),
		nowMicros: func(*testing.T) int64 { return now.UnixMicro() },
		advance: func(d time.Duration) {
			now = now.Add(d)
			m.SetTime(now)
			m.FastForward(d)
		},
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
		advance: func(d time.Duration) { time.Sleep(d + 20*time.Millisecond) },
	})
}

// scriptKeys are the keys and the wake-up channel of key, with the tests' prefix.
func scriptKeys(key string) ([]string, string) {
	r := &Redis{prefix: "test:"}
	return r.keys(key), r.channel(key)
}

// call is one run of acquire.lua.
type call struct {
	n      int
	ttl    time.Duration
	meta   string
	weight int           // 0 is 1
	wait   time.Duration // the waiter lease; 0: the caller does not wait
}

func runCall(t *testing.T, c *redis.Client, key, id string, a call) grant {
	t.Helper()
	keys, channel := scriptKeys(key)
	res, err := acquireScript.Run(context.Background(), c, keys, id, a.n, a.ttl.Milliseconds(), a.meta,
		max(a.weight, 1), a.wait.Milliseconds(), channel).Result()
	if err != nil {
		t.Fatalf("acquire script (id %q): got error %v, want a reply", id, err)
	}
	g, err := parseGrant(res)
	if err != nil {
		t.Fatalf("acquire script (id %q): got %v, want 7 integers", id, err)
	}
	return g
}

func runAcquire(t *testing.T, c *redis.Client, key, id string, n int, ttl time.Duration, meta string) grant {
	t.Helper()
	return runCall(t, c, key, id, call{n: n, ttl: ttl, meta: meta})
}

func runRelease(t *testing.T, c *redis.Client, key, id string) int64 {
	t.Helper()
	keys, channel := scriptKeys(key)
	n, err := releaseScript.Run(context.Background(), c, keys, id, channel).Int64()
	if err != nil {
		t.Fatalf("release script (id %q): got error %v, want 0 or 1", id, err)
	}
	return n
}

func runStatus(t *testing.T, c *redis.Client, key string) KeyStatus {
	t.Helper()
	keys, _ := scriptKeys(key)
	res, err := statusScript.Run(context.Background(), c, keys).Result()
	if err != nil {
		t.Fatalf("status script: got error %v, want a reply", err)
	}
	st, err := parseStatus(key, res)
	if err != nil {
		t.Fatalf("status script: got %v, want a reply parseStatus reads", err)
	}
	return st
}

// wakeLists reads the wake lists of every waiter of a key.
type wakeLists struct {
	c       *redis.Client
	channel string // the key's wake-list prefix, to which each waiter's adds a hash
}

// listen checks that no wake list of key exists yet, and returns a reader
// of them.
func listen(t *testing.T, c *redis.Client, key string) wakeLists {
	t.Helper()
	_, channel := scriptKeys(key)
	w := wakeLists{c, channel}
	if got := woken(t, w); len(got) != 0 {
		t.Fatalf("wake lists before the test: got %v, want none", got)
	}
	return w
}

// woken returns every wake list under the key's prefix, by SCAN (never
// KEYS), with its length.
func woken(t *testing.T, w wakeLists) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	var cursor uint64
	for {
		names, next, err := w.c.Scan(ctx, cursor, w.channel+":*", 100).Result()
		if err != nil {
			t.Fatalf("SCAN MATCH %s:*: got error %v, want nil", w.channel, err)
		}
		for _, k := range names {
			n, err := w.c.LLen(ctx, k).Result()
			if err != nil {
				t.Fatalf("LLEN %s: got error %v, want a list", k, err)
			}
			out[k] = n
		}
		if cursor = next; cursor == 0 {
			return out
		}
	}
}

// expectWoken checks that exactly ids have their turn pushed, each to its
// own wake list, one element that lapses within a minute, and that no other
// wake list exists. It pops them, so that the next check starts clean.
func expectWoken(t *testing.T, w wakeLists, when string, ids ...string) {
	t.Helper()
	ctx := context.Background()
	got := woken(t, w)
	for _, id := range ids {
		k := wakeKey(w.channel, id)
		if n, ok := got[k]; !ok || n != 1 {
			t.Errorf("wake-up %s: got list %q of length %d (exists: %v), want 1 element (waiter %s)", when, k, n, ok, id)
		}
		if ttl, err := w.c.PTTL(ctx, k).Result(); err == nil && got[k] > 0 && (ttl <= 0 || ttl > time.Minute) {
			t.Errorf("wake-up %s: list %q lapses in %v, want within a minute", when, k, ttl)
		}
		delete(got, k)
		if v, err := w.c.LPop(ctx, k).Result(); err == nil && v != "1" {
			t.Errorf("wake-up %s: list %q held %q, want \"1\"", when, k, v)
		}
	}
	for k, n := range got {
		t.Errorf("wake-up %s: got list %q of length %d, want no list but those of %v", when, k, n, ids)
		_ = w.c.Del(ctx, k).Err()
	}
	if left := woken(t, w); len(left) != 0 {
		t.Errorf("wake-up %s: lists left after popping: %v, want none", when, left)
	}
}

func TestAcquireScriptIdempotent(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "idem"
			keys, _ := scriptKeys(key)
			const id = "PERMIT0FIXED0ID0FOR0TESTS0"

			first := runAcquire(t, b.c, key, id, 1, 10*time.Second, `{"host":"h"}`)
			if !first.granted || first.held != 1 || first.position != 0 || first.waiting != 0 {
				t.Fatalf("first call: got %+v, want granted with 1 held, not in line, nobody waiting", first)
			}
			// The retry of a client whose answer got lost: n=1 is full, but by itself.
			again := runAcquire(t, b.c, key, id, 1, 10*time.Second, `{"host":"h"}`)
			if !again.granted || again.token != first.token || again.held != 1 {
				t.Fatalf("same id again: got %+v, want granted with the same token %d and 1 held", again, first.token)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Fatalf("ZCARD after a repeated acquire: got (%d, %v), want 1", n, err)
			}
			if tok, err := b.c.Get(ctx, keys[2]).Int64(); err != nil || tok != first.token {
				t.Errorf("token key after a repeated acquire: got (%d, %v), want %d (no token spent)", tok, err, first.token)
			}

			other := runAcquire(t, b.c, key, "PERMIT0OTHER", 1, 10*time.Second, "")
			if other.granted || other.held != 1 || other.lapseIn <= 0 || other.lapseIn > 10_000 || other.position != 0 || other.waiting != 0 {
				t.Fatalf("another id with n=1 taken, not waiting: got %+v, want not granted, 1 held, lapse in (0, 10000] ms, not in line", other)
			}
			second := runAcquire(t, b.c, key, "PERMIT0SECOND", 2, 10*time.Second, "")
			if !second.granted || second.token <= first.token || second.held != 2 || second.previous != 1 {
				t.Fatalf("another id with n=2: got %+v, want granted, token > %d, 2 held, previous capacity 1", second, first.token)
			}
			if again := runAcquire(t, b.c, key, "PERMIT0SECOND", 2, 10*time.Second, ""); again.token != second.token || again.held != 2 {
				t.Errorf("second id again: got %+v, want token %d and 2 held", again, second.token)
			}

			// A waiter asking again (its renewal, or a retry) keeps its one place.
			w := call{n: 2, ttl: 10 * time.Second, wait: 10 * time.Second}
			in := runCall(t, b.c, key, "WAITER0A", w)
			if in.granted || in.position != 1 || in.waiting != 1 {
				t.Fatalf("a waiter with n=2 taken: got %+v, want not granted, position 1 of 1", in)
			}
			rec0, _ := b.c.HGet(ctx, keys[4], "WAITER0A").Result()
			b.advance(5 * time.Millisecond)
			if again := runCall(t, b.c, key, "WAITER0A", w); again.granted || again.position != 1 || again.waiting != 1 {
				t.Errorf("the waiter again: got %+v, want not granted, still position 1 of 1", again)
			}
			if n, err := b.c.ZCard(ctx, keys[3]).Result(); err != nil || n != 1 {
				t.Errorf("ZCARD queue after a waiter asked twice: got (%d, %v), want 1", n, err)
			}
			rec1, _ := b.c.HGet(ctx, keys[4], "WAITER0A").Result()
			f0, f1 := waiterRecord.FindStringSubmatch(rec0), waiterRecord.FindStringSubmatch(rec1)
			if f0 == nil || f1 == nil {
				t.Fatalf("waiter record before and after it asked again: got %q and %q, want \"<ms> <n> <weight> <ms> <meta>\"", rec0, rec1)
			}
			exp0, _ := strconv.ParseInt(f0[1], 10, 64)
			exp1, _ := strconv.ParseInt(f1[1], 10, 64)
			if exp1 <= exp0 || f1[4] != f0[4] {
				t.Errorf("waiter record after it asked again: got %q then %q, want a later lease expiry and the same since", rec0, rec1)
			}
		})
	}
}

// holderRecord is what acquire.lua stores per permit: "<n> <token> <granted ms> <weight> <meta>".
var holderRecord = regexp.MustCompile(`^(\d+) (\d+) (\d+) (\d+) (.*)$`)

// waiterRecord is what acquire.lua stores per waiter: "<lease expiry ms> <n> <weight> <since ms> <meta>".
var waiterRecord = regexp.MustCompile(`^(\d+) (\d+) (\d+) (\d+) (.*)$`)

func TestScriptsAgreeOnBothBackends(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "shapes"
			keys, _ := scriptKeys(key)
			const id, meta = "PERMIT0SHAPES", `{"host":"h","pid":1,"command":"a b  c"}`
			before := b.nowMicros(t)
			g := runCall(t, b.c, key, id, call{n: 3, ttl: 10 * time.Second, meta: meta, weight: 2})
			if !g.granted || g.token < before || g.previous != 3 || g.lapseIn <= 0 || g.lapseIn > 10_000 || g.held != 2 {
				t.Fatalf("acquire: got %+v, want granted, token >= %d µs, previous 3, lapse in (0, 10000] ms, 2 held", g, before)
			}

			// string.format('%d') of a 16-digit token and a 13-digit time.
			rec, err := b.c.HGet(ctx, keys[1], id).Result()
			if err != nil {
				t.Fatalf("HGET info: got error %v, want the record", err)
			}
			f := holderRecord.FindStringSubmatch(rec)
			if f == nil || f[1] != "3" || f[2] != strconv.FormatInt(g.token, 10) || f[4] != "2" || f[5] != meta {
				t.Fatalf("holder record: got %q, want \"3 %d <ms> 2 %s\"", rec, g.token, meta)
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

			// A waiter of weight 2 beside the holder of weight 2, under n=3.
			const wmeta = `{"host":"w","pid":2,"command":"wait"}`
			wg := runCall(t, b.c, key, "WAITER0SHAPES", call{n: 3, ttl: 20 * time.Second, meta: wmeta, weight: 2, wait: 5 * time.Second})
			if wg.granted || wg.held != 2 || wg.position != 1 || wg.waiting != 1 || wg.lapseIn <= 0 {
				t.Fatalf("waiter of weight 2 beside a holder of weight 2, n=3: got %+v, want not granted, 2 held, position 1 of 1", wg)
			}
			wrec, err := b.c.HGet(ctx, keys[4], "WAITER0SHAPES").Result()
			if err != nil {
				t.Fatalf("HGET waiters: got error %v, want the record", err)
			}
			wf := waiterRecord.FindStringSubmatch(wrec)
			if wf == nil || wf[2] != "3" || wf[3] != "2" || wf[5] != wmeta {
				t.Fatalf("waiter record: got %q, want \"<ms> 3 2 <ms> %s\"", wrec, wmeta)
			}
			expiry, _ := strconv.ParseInt(wf[1], 10, 64)
			since, _ := strconv.ParseInt(wf[4], 10, 64)
			if expiry != since+5_000 {
				t.Errorf("waiter record %q: got lease expiry %d, want since+5000 = %d", wrec, expiry, since+5_000)
			}
			if seq, err := b.c.HGet(ctx, keys[4], "#seq").Result(); err != nil || seq != "1" {
				t.Errorf("#seq: got (%q, %v), want \"1\"", seq, err)
			}
			if ticket, err := b.c.ZScore(ctx, keys[3], "WAITER0SHAPES").Result(); err != nil || ticket != 1 {
				t.Errorf("waiter's ticket: got (%v, %v), want 1", ticket, err)
			}

			st := runStatus(t, b.c, key)
			if st.Held != 2 || st.Capacity != 3 || len(st.Holders) != 1 || st.Holders[0].Token != g.token || st.Holders[0].Command != "a b  c" || st.Holders[0].Weight != 2 || st.Holders[0].Permits != 3 {
				t.Errorf("status: got %+v, want 1 holder with token %d, weight 2, permits 3, capacity 3, 2 held", st, g.token)
			}
			wantW := Waiter{HolderInfo: HolderInfo{Host: "w", PID: 2, Command: "wait"}, Permits: 3, Weight: 2, Position: 1}
			if len(st.Waiters) != 1 {
				t.Fatalf("status waiters: got %+v, want [%+v]", st.Waiters, wantW)
			}
			if w := st.Waiters[0]; w.Waited < 0 || w.Waited > time.Second {
				t.Errorf("status waiter waited: got %v, want in [0, 1s]", w.Waited)
			}
			if w := st.Waiters[0]; (Waiter{HolderInfo: w.HolderInfo, Permits: w.Permits, Weight: w.Weight, Position: w.Position}) != wantW {
				t.Errorf("status waiter: got %+v, want %+v", w, wantW)
			}

			if n, err := renewScript.Run(ctx, b.c, keys, id, 10_000).Int64(); err != nil || n != 1 {
				t.Errorf("renew: got (%d, %v), want 1", n, err)
			}
			if n, err := renewScript.Run(ctx, b.c, keys, "PERMIT0NEVER", 10_000).Int64(); err != nil || n != 0 {
				t.Errorf("renew of an id never granted: got (%d, %v), want 0", n, err)
			}
			if n, err := renewScript.Run(ctx, b.c, keys, "WAITER0SHAPES", 10_000).Int64(); err != nil || n != 0 {
				t.Errorf("renew of a waiter: got (%d, %v), want 0 (only a holder renews)", n, err)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Errorf("ZCARD after renewing ids never granted: got (%d, %v), want 1 (nothing created)", n, err)
			}
			for i, want := range []int64{1, 0} {
				if n := runRelease(t, b.c, key, id); n != want {
					t.Errorf("release #%d: got %d, want %d", i+1, n, want)
				}
			}
			if fields, err := b.c.HKeys(ctx, keys[1]).Result(); err != nil || len(fields) != 1 || fields[0] != "#cap" {
				t.Errorf("info fields after release: got (%q, %v), want only #cap", fields, err)
			}
			// The waiter's turn came; it takes its seat when it asks.
			if g := runCall(t, b.c, key, "WAITER0SHAPES", call{n: 3, ttl: 20 * time.Second, meta: wmeta, weight: 2, wait: 5 * time.Second}); !g.granted || g.held != 2 || g.waiting != 0 {
				t.Errorf("the waiter after the holder released: got %+v, want granted, 2 held, nobody waiting", g)
			}
			if n, err := b.c.Exists(ctx, keys[3]).Result(); err != nil || n != 0 {
				t.Errorf("queue key once nobody waits: got (%d, %v), want it gone", n, err)
			}
			if fields, err := b.c.HKeys(ctx, keys[4]).Result(); err != nil || len(fields) != 1 || fields[0] != "#seq" {
				t.Errorf("waiters fields once nobody waits: got (%q, %v), want only #seq", fields, err)
			}
			if rec, err := b.c.HGet(ctx, keys[1], "WAITER0SHAPES").Result(); err != nil || holderRecord.FindStringSubmatch(rec) == nil || holderRecord.FindStringSubmatch(rec)[1] != "3" || holderRecord.FindStringSubmatch(rec)[4] != "2" {
				t.Errorf("info of the waiter granted: got (%q, %v), want n 3 and weight 2", rec, err)
			}
		})
	}
}

// TestScriptsServeTheLineInOrder: waiters are served in the order they
// came, and the scripts push to the wake lists of exactly the waiters whose
// turn it is.
func TestScriptsServeTheLineInOrder(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "line"
			sub := listen(t, b.c, key)
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			if g := runAcquire(t, b.c, key, "H", 1, 10*time.Second, ""); !g.granted {
				t.Fatalf("holder: got %+v, want granted", g)
			}
			for i, id := range []string{"W1", "W2", "W3"} {
				g := runCall(t, b.c, key, id, wait)
				if g.granted || g.held != 1 || g.position != int64(i+1) || g.waiting != int64(i+1) || g.lapseIn <= 0 {
					t.Fatalf("waiter %s: got %+v, want not granted, 1 held, position %d of %d", id, g, i+1, i+1)
				}
			}
			if g := runCall(t, b.c, key, "W2", wait); g.granted || g.position != 2 || g.waiting != 3 {
				t.Errorf("W2 asking again: got %+v, want not granted, position 2 of 3", g)
			}
			// A caller that will not wait does not join the line, even
			// where its larger n would fit it.
			if g := runAcquire(t, b.c, key, "X", 3, 10*time.Second, ""); g.granted || g.position != 0 || g.waiting != 3 {
				t.Errorf("no-wait caller with n=3 while 3 wait: got %+v, want not granted, not in line, 3 waiting", g)
			}
			st := runStatus(t, b.c, key)
			if len(st.Waiters) != 3 {
				t.Fatalf("status waiters: got %+v, want 3", st.Waiters)
			}
			for i, w := range st.Waiters {
				if w.Position != i+1 || w.Weight != 1 || w.Permits != 1 {
					t.Errorf("status waiter %d: got %+v, want position %d, weight 1, permits 1", i, w, i+1)
				}
			}
			expectWoken(t, sub, "before any release")

			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release of the holder: got %d, want 1", n)
			}
			expectWoken(t, sub, "after the holder released", "W1")
			if g := runCall(t, b.c, key, "W2", wait); g.granted || g.held != 0 || g.position != 2 {
				t.Errorf("W2 while W1 has its turn: got %+v, want not granted, 0 held, position 2", g)
			}
			if g := runCall(t, b.c, key, "W1", wait); !g.granted || g.held != 1 || g.position != 0 || g.waiting != 2 {
				t.Errorf("W1 on its turn: got %+v, want granted, 1 held, not in line, 2 waiting", g)
			}
			// W2 leaves the line: W3 moves up, but a seat is still taken.
			if n := runRelease(t, b.c, key, "W2"); n != 1 {
				t.Errorf("release of a waiter: got %d, want 1", n)
			}
			expectWoken(t, sub, "after a waiter behind a holder left")
			if st := runStatus(t, b.c, key); len(st.Waiters) != 1 || st.Waiters[0].Position != 1 {
				t.Errorf("status after W2 left: got waiters %+v, want one at position 1", st.Waiters)
			}
			if n := runRelease(t, b.c, key, "W1"); n != 1 {
				t.Errorf("release of W1: got %d, want 1", n)
			}
			expectWoken(t, sub, "after W1 released", "W3")
			if n := runRelease(t, b.c, key, "W3"); n != 1 {
				t.Errorf("release of W3 while in line: got %d, want 1", n)
			}
			if n := runRelease(t, b.c, key, "W3"); n != 0 {
				t.Errorf("release of W3 again: got %d, want 0", n)
			}
			expectWoken(t, sub, "after the last waiter left")
			if g := runAcquire(t, b.c, key, "X", 1, 10*time.Second, ""); !g.granted || g.waiting != 0 {
				t.Errorf("no-wait caller once the line is empty: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsWeights: a waiter takes its weight's seats, a light waiter
// does not pass a heavy one, and one release can wake several waiters.
func TestScriptsWeights(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "weights"
			sub := listen(t, b.c, key)
			if g := runCall(t, b.c, key, "H", call{n: 3, ttl: 10 * time.Second, weight: 2}); !g.granted || g.held != 2 {
				t.Fatalf("holder of weight 2: got %+v, want granted, 2 held", g)
			}
			if g := runCall(t, b.c, key, "X", call{n: 3, ttl: 10 * time.Second, weight: 2}); g.granted || g.held != 2 {
				t.Errorf("no-wait weight 2 beside a holder of weight 2, n=3: got %+v, want not granted", g)
			}
			heavy := call{n: 3, ttl: 10 * time.Second, weight: 3, wait: 10 * time.Second}
			light := call{n: 3, ttl: 10 * time.Second, weight: 1, wait: 10 * time.Second}
			if g := runCall(t, b.c, key, "HEAVY", heavy); g.granted || g.position != 1 {
				t.Fatalf("heavy waiter: got %+v, want not granted, position 1", g)
			}
			// One seat is free, but the heavy waiter came first.
			if g := runCall(t, b.c, key, "LIGHT", light); g.granted || g.position != 2 {
				t.Errorf("light waiter behind a heavy one, a seat free: got %+v, want not granted, position 2", g)
			}
			if g := runCall(t, b.c, key, "Y", call{n: 3, ttl: 10 * time.Second}); g.granted {
				t.Errorf("no-wait weight 1 with a seat free and a line: got %+v, want not granted", g)
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			expectWoken(t, sub, "after the holder released", "HEAVY")
			if g := runCall(t, b.c, key, "LIGHT", light); g.granted {
				t.Errorf("light waiter while the heavy one has its turn: got %+v, want not granted", g)
			}
			if g := runCall(t, b.c, key, "HEAVY", heavy); !g.granted || g.held != 3 || g.waiting != 1 {
				t.Fatalf("heavy waiter on its turn: got %+v, want granted, 3 held, 1 waiting", g)
			}
			if st := runStatus(t, b.c, key); st.Held != 3 || len(st.Holders) != 1 || st.Holders[0].Weight != 3 {
				t.Errorf("status with the heavy holder: got %+v, want held 3 by one holder of weight 3", st)
			}
			for _, id := range []string{"L2", "L3"} {
				if g := runCall(t, b.c, key, id, light); g.granted {
					t.Fatalf("light waiter %s behind the heavy holder: got %+v, want not granted", id, g)
				}
			}
			if n := runRelease(t, b.c, key, "HEAVY"); n != 1 {
				t.Fatalf("release of the heavy holder: got %d, want 1", n)
			}
			// Three light waiters fit at once: one release wakes them all.
			expectWoken(t, sub, "after the heavy holder released", "LIGHT", "L2", "L3")
			for i, id := range []string{"L3", "LIGHT", "L2"} {
				if g := runCall(t, b.c, key, id, light); !g.granted || g.held != int64(i+1) {
					t.Errorf("light waiter %s on its turn: got %+v, want granted, %d held", id, g, i+1)
				}
			}
			expectWoken(t, sub, "after the light waiters took their seats")
		})
	}
}

// TestScriptsSweepGivesTurns: waiters and holders whose lease lapsed leave
// when anyone next asks, and the waiters whose turn that made are woken.
func TestScriptsSweepGivesTurns(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "sweep"
			sub := listen(t, b.c, key)
			if g := runAcquire(t, b.c, key, "H", 1, time.Second, ""); !g.granted {
				t.Fatalf("holder: got %+v, want granted", g)
			}
			if g := runCall(t, b.c, key, "GONE", call{n: 1, ttl: 10 * time.Second, wait: 200 * time.Millisecond}); g.position != 1 {
				t.Fatalf("waiter with a 200ms waiter lease: got %+v, want position 1", g)
			}
			if g := runCall(t, b.c, key, "W", call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}); g.position != 2 {
				t.Fatalf("waiter behind it: got %+v, want position 2", g)
			}
			b.advance(200 * time.Millisecond)
			// GONE never asked again: it leaves the line; the holder remains.
			if g := runAcquire(t, b.c, key, "X", 1, time.Second, ""); g.granted || g.waiting != 1 {
				t.Errorf("no-wait caller after the first waiter's lease lapsed: got %+v, want not granted, 1 waiting", g)
			}
			expectWoken(t, sub, "after a waiter left with a holder still in")
			if st := runStatus(t, b.c, key); len(st.Waiters) != 1 || st.Waiters[0].Position != 1 || st.Held != 1 {
				t.Errorf("status after the first waiter's lease lapsed: got %+v, want 1 held, one waiter at position 1", st)
			}
			b.advance(800 * time.Millisecond)
			// The holder's lease lapsed: the caller that swept it wakes W.
			if g := runAcquire(t, b.c, key, "X", 1, time.Second, ""); g.granted || g.held != 0 || g.waiting != 1 {
				t.Errorf("no-wait caller after the holder's lease lapsed: got %+v, want not granted (W first), 0 held", g)
			}
			expectWoken(t, sub, "after the holder's lease lapsed", "W")
			if g := runCall(t, b.c, key, "W", call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}); !g.granted {
				t.Errorf("W on its turn: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsDropTheirOwnWakeList: a waiter's wake list goes when it is
// granted its permit, or leaves the line, even before reading its turn.
func TestScriptsDropTheirOwnWakeList(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "ownlist"
			w := listen(t, b.c, key)
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			if g := runAcquire(t, b.c, key, "H", 1, 10*time.Second, ""); !g.granted {
				t.Fatalf("holder: got %+v, want granted", g)
			}
			for _, id := range []string{"W1", "W2", "W3"} {
				if g := runCall(t, b.c, key, id, wait); g.granted {
					t.Fatalf("waiter %s: got %+v, want not granted", id, g)
				}
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release of the holder: got %d, want 1", n)
			}
			if got := woken(t, w); len(got) != 1 || got[wakeKey(w.channel, "W1")] != 1 {
				t.Fatalf("wake lists after the holder released: got %v, want W1's only, of 1 element", got)
			}
			// W1 asks before reading its list: the grant drops it.
			if g := runCall(t, b.c, key, "W1", wait); !g.granted {
				t.Fatalf("W1 on its turn: got %+v, want granted", g)
			}
			if n, err := b.c.Exists(ctx, wakeKey(w.channel, "W1")).Result(); err != nil || n != 0 {
				t.Errorf("W1's wake list once granted: got (%d, %v), want gone", n, err)
			}
			expectWoken(t, w, "after W1 was granted")
			if n := runRelease(t, b.c, key, "W1"); n != 1 {
				t.Fatalf("release of W1: got %d, want 1", n)
			}
			if got := woken(t, w); len(got) != 1 || got[wakeKey(w.channel, "W2")] != 1 {
				t.Fatalf("wake lists after W1 released: got %v, want W2's only, of 1 element", got)
			}
			// W2 leaves the line before reading its turn: its list goes,
			// and W3, whose turn it is now, is woken.
			if n := runRelease(t, b.c, key, "W2"); n != 1 {
				t.Fatalf("release of W2 in line: got %d, want 1", n)
			}
			expectWoken(t, w, "after W2 left with its turn unread", "W3")
		})
	}
}

// TestScriptsKeepKeysAliveForWaiters: a waiter's lease, longer than any
// holder's, keeps every key alive, and no call shortens a key's life.
func TestScriptsKeepKeysAliveForWaiters(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "alive"
			keys, _ := scriptKeys(key)
			runAcquire(t, b.c, key, "H", 1, 2*time.Second, "")
			runCall(t, b.c, key, "W", call{n: 1, ttl: time.Second, wait: 10 * time.Second})
			runAcquire(t, b.c, key, "X", 1, time.Second, "")
			if n, err := renewScript.Run(ctx, b.c, keys, "H", 2000).Int64(); err != nil || n != 1 {
				t.Fatalf("renew: got (%d, %v), want 1", n, err)
			}
			for _, k := range keys {
				if got, err := b.c.PTTL(ctx, k).Result(); err != nil || got < 10*time.Second || got > 11*time.Second {
					t.Errorf("PTTL %s with a waiter's 10s lease: got (%v, %v), want in [10s, 11s]", k, got, err)
				}
			}
		})
	}
}

func TestTokenIsServerClockOnEmptyStore(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(scriptClock)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	g := runAcquire(t, c, "clock", "PERMIT0CLOCK", 1, time.Second, "")
	if want := scriptClock.UnixMicro(); g.token != want {
		t.Errorf("first token on an empty store: got %d, want the server clock %d µs", g.token, want)
	}
}

func TestKeysEscapeBraces(t *testing.T) {
	r := &Redis{prefix: "p:"}
	seen := map[string]string{}
	for _, key := range []string{"a", "a}", "{a}", "}x", "%7B", "%7D", "{", "}", "%", "%25", "a:b}:holders"} {
		ks := r.keys(key)
		if len(ks) != 5 {
			t.Fatalf("keys(%q): got %d keys, want 5", key, len(ks))
		}
		lo, hi := strings.IndexByte(ks[0], '{'), strings.IndexByte(ks[0], '}')
		if lo != len("p:") || hi < lo {
			t.Fatalf("keys(%q)[0] = %q: got tag at [%d, %d], want it right after the prefix", key, ks[0], lo, hi)
		}
		tag := ks[0][:hi+1]
		names := map[string]bool{}
		for i, k := range append(ks, r.channel(key)) {
			if !strings.HasPrefix(k, tag) || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Errorf("keys(%q) and channel: got %q, want one {tag} %q shared by all and no other brace", key, k, tag)
			}
			suffix := []string{"holders", "info", "token", "queue", "waiters", "wake"}[i]
			if k != tag+":"+suffix {
				t.Errorf("keys(%q) #%d: got %q, want %q", key, i, k, tag+":"+suffix)
			}
			names[k] = true
		}
		if len(names) != 6 {
			t.Errorf("keys(%q) and channel: got %v, want 6 different names", key, names)
		}
		if prev, dup := seen[tag]; dup {
			t.Errorf("keys(%q) and keys(%q): got the same tag %q, want different keys", prev, key, tag)
		}
		seen[tag] = key
	}
}

func TestParseHolderReadsRecordsFromBeforeWeights(t *testing.T) {
	for _, tc := range []struct {
		rec        string
		wantWeight int
	}{
		{`2 1700000000000000 1700000000000 {"host":"h","pid":1,"command":"a b"}`, 1},
		{`2 1700000000000000 1700000000000 `, 1},
		{`2 1700000000000000 1700000000000 3 {"host":"h","pid":1,"command":"a b"}`, 3},
		{`2 1700000000000000 1700000000000 3 `, 3},
	} {
		h, err := parseHolder(tc.rec, 1700000001000)
		if err != nil {
			t.Fatalf("parseHolder(%q): got error %v, want nil", tc.rec, err)
		}
		if h.Weight != tc.wantWeight || h.Permits != 2 || h.Token != 1700000000000000 || h.Age != time.Second {
			t.Errorf("parseHolder(%q): got %+v, want weight %d, 2 permits, the token, age 1s", tc.rec, h, tc.wantWeight)
		}
	}
}
