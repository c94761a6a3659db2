package protocol

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
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

// scriptKeys are the keys of key, with the tests' prefix, in the order
// the scripts take them, and the prefix of its wake lists.
func scriptKeys(key string) ([]string, string) {
	k := NewKeys(testPrefix, key)
	return k.List(), k.Wake
}

// call is one run of acquire.lua.
type call struct {
	n      int
	ttl    time.Duration
	meta   string
	weight int           // 0 is 1
	wait   time.Duration // the waiter lease; 0: the caller does not wait
}

func runCall(t *testing.T, c *redis.Client, key, id string, a call) AcquireReply {
	t.Helper()
	return runAcquireArgs(t, c, NewKeys(testPrefix, key), AcquireArgs{ID: id, Permits: a.n, TTL: a.ttl, Meta: []byte(a.meta), Weight: a.weight, Wait: a.wait})
}

func runAcquire(t *testing.T, c *redis.Client, key, id string, n int, ttl time.Duration, meta string) AcquireReply {
	t.Helper()
	return runCall(t, c, key, id, call{n: n, ttl: ttl, meta: meta})
}

// runRelease runs release.lua for id, and returns 1 when id held or waited.
func runRelease(t *testing.T, c *redis.Client, key, id string) int64 {
	t.Helper()
	k := NewKeys(testPrefix, key)
	r, err := DecodeRelease(runScript(t, c, k, ReleaseArgs{ID: id}))
	if err != nil {
		t.Fatalf("release script (id %q): got %v, want its reply", id, err)
	}
	if r.Released {
		return 1
	}
	return 0
}

// runRenew runs renew.lua for id, and returns 1 when it renewed the lease.
func runRenew(t *testing.T, c *redis.Client, key, id string, ttl time.Duration) int64 {
	t.Helper()
	r, err := DecodeRenew(runScript(t, c, NewKeys(testPrefix, key), RenewArgs{ID: id, TTL: ttl}))
	if err != nil {
		t.Fatalf("renew script (id %q): got %v, want its reply", id, err)
	}
	if r.Renewed {
		return 1
	}
	return 0
}

func runStatus(t *testing.T, c *redis.Client, key string) semaphore.KeyStatus {
	t.Helper()
	st, err := DecodeStatus(key, runScript(t, c, NewKeys(testPrefix, key), StatusArgs{}))
	if err != nil {
		t.Fatalf("status script: got %v, want a reply readStatus reads", err)
	}
	return st
}

// wakeKey is the wake list of the waiter id under the wake-list prefix.
func wakeKey(prefix, id string) string { return Keys{Wake: prefix}.WakeList(id) }

// wakeLists reads the wake lists of every waiter of a key.
type wakeLists struct {
	c    *redis.Client
	key  string
	wake string // the key's wake-list prefix, to which each waiter's adds a hash
}

// listen checks that no wake list of key exists yet, and returns a reader
// of them.
func listen(t *testing.T, c *redis.Client, key string) wakeLists {
	t.Helper()
	_, channel := scriptKeys(key)
	w := wakeLists{c, key, channel}
	if got := woken(t, w); len(got) != 0 {
		t.Fatalf("wake lists before the test: got %v, want none", got)
	}
	return w
}

// woken returns every wake list under the key's prefix, by SCAN (never
// KEYS), with its length.
//
// Lists that hold only look-again hints ("c <ms>", for the first waiter
// left in line) are not turns: they are dropped, and left out.
func woken(t *testing.T, w wakeLists) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	hintsOnly := func(k string) bool {
		elems, err := w.c.LRange(ctx, k, 0, -1).Result()
		return err == nil && len(elems) > 0 && !slices.ContainsFunc(elems, func(e string) bool { return ReadTurn(e).Look == 0 })
	}
	var cursor uint64
	for {
		names, next, err := w.c.Scan(ctx, cursor, w.wake+":*", 100).Result()
		if err != nil {
			t.Fatalf("SCAN MATCH %s:*: got error %v, want nil", w.wake, err)
		}
		for _, k := range names {
			if hintsOnly(k) {
				_ = w.c.Del(ctx, k).Err()
				continue
			}
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

// expectHandedOver checks the wake lists of a key: each waiter of ids has
// one element, "g <token> <expiry ms>", and holds that very permit: its
// holder record has the token, its score in holders is the expiry, status
// shows a holder with the token, and it is out of the line. Every such
// list lapses within a minute, and no other list exists. It pops them, so
// that the next check starts clean, and returns the turns read, by id.
func expectHandedOver(t *testing.T, w wakeLists, when string, handed ...string) map[string]Turn {
	t.Helper()
	ctx := context.Background()
	keys, _ := scriptKeys(w.key)
	got := woken(t, w)
	st := runStatus(t, w.c, w.key)
	pop := func(id string) (string, bool) {
		t.Helper()
		k := wakeKey(w.wake, id)
		n, ok := got[k]
		delete(got, k)
		if !ok || n != 1 {
			t.Errorf("wake-up %s: got list %q of length %d (exists: %v), want 1 element (waiter %s)", when, k, n, ok, id)
			if !ok {
				return "", false
			}
		}
		if ttl, err := w.c.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("wake-up %s: list %q lapses in (%v, %v), want within a minute", when, k, ttl, err)
		}
		v, err := w.c.LPop(ctx, k).Result()
		if err != nil {
			t.Errorf("wake-up %s: LPOP %q: got error %v, want an element", when, k, err)
			return "", false
		}
		return v, true
	}
	turns := map[string]Turn{}
	for _, id := range handed {
		v, ok := pop(id)
		if !ok {
			continue
		}
		tr := ReadTurn(v)
		if !tr.Handed {
			t.Errorf("wake-up %s: list of %s held %q, want \"g <token> <expiry ms>\"", when, id, v)
			continue
		}
		turns[id] = tr
		rec, err := w.c.HGet(ctx, keys[1], Member(id)).Result()
		f := holderRecord.FindStringSubmatch(rec)
		if err != nil || f == nil || f[2] != strconv.FormatInt(tr.Token, 10) {
			t.Errorf("wake-up %s: holder record of %s: got (%q, %v), want token %d, as its list said", when, id, rec, err, tr.Token)
		}
		// Until the waiter takes its turn, its permit is a claim of at
		// most Claim; the lease its list said comes once it does.
		if full, err := w.c.HGet(ctx, keys[1], "#claim "+Member(id)).Int64(); err != nil || full != tr.Expiry {
			t.Errorf("wake-up %s: claim of %s: got (%v, %v), want the full lease %d ms, as its list said", when, id, full, err, tr.Expiry)
		}
		if f != nil {
			since, _ := strconv.ParseInt(f[3], 10, 64)
			want := since + min(Claim.Milliseconds(), tr.Expiry-since)
			if score, err := w.c.ZScore(ctx, keys[0], Member(id)).Result(); err != nil || int64(score) != want {
				t.Errorf("wake-up %s: claim expiry of %s: got (%v, %v), want %d ms (granted at %d)", when, id, score, err, want, since)
			}
		}
		if !slices.ContainsFunc(st.Holders, func(h semaphore.Holder) bool { return h.Token == tr.Token }) {
			t.Errorf("wake-up %s: status holders: got %+v, want one with %s's token %d", when, st.Holders, id, tr.Token)
		}
		if err := w.c.ZScore(ctx, keys[3], Member(id)).Err(); err != redis.Nil {
			t.Errorf("wake-up %s: ZSCORE queue %s: got %v, want redis.Nil (out of the line)", when, id, err)
		}
		if err := w.c.HGet(ctx, keys[4], Member(id)).Err(); err != redis.Nil {
			t.Errorf("wake-up %s: HGET waiters %s: got %v, want redis.Nil (no waiter record)", when, id, err)
		}
	}
	for k, n := range got {
		// The first waiter left in line may be asked to look again when
		// the claims lapse: "c <ms>".
		elems, _ := w.c.LRange(ctx, k, 0, -1).Result()
		if !slices.ContainsFunc(elems, func(e string) bool { return ReadTurn(e).Look == 0 }) {
			_ = w.c.Del(ctx, k).Err()
			continue
		}
		t.Errorf("wake-up %s: got list %q of length %d (%q), want no list but those of %v and look-again hints", when, k, n, elems, handed)
		_ = w.c.Del(ctx, k).Err()
	}
	if left := woken(t, w); len(left) != 0 {
		t.Errorf("wake-up %s: lists left after popping: %v, want none", when, left)
	}
	return turns
}

// expectSamePermit checks that id, handed tr, asking again with a is
// granted that very permit: the same token, no new one spent, what is left
// of the lease it was handed, and its wake list gone. It returns the reply.
func expectSamePermit(t *testing.T, w wakeLists, id string, a call, tr Turn) AcquireReply {
	t.Helper()
	ctx := context.Background()
	keys, _ := scriptKeys(w.key)
	last, err := w.c.Get(ctx, keys[2]).Int64()
	if err != nil {
		t.Fatalf("GET token: got error %v, want the last token", err)
	}
	g := runCall(t, w.c, w.key, id, a)
	if !g.Granted || g.Token != tr.Token || g.Position != 0 || g.Left != tr.Expiry-g.Now {
		t.Errorf("%s asking after it was handed its permit: got %+v, want granted, token %d, not in line, left = expiry %d - now", id, g, tr.Token, tr.Expiry)
	}
	if tok, err := w.c.Get(ctx, keys[2]).Int64(); err != nil || tok != last {
		t.Errorf("token key after %s asked again: got (%d, %v), want %d (no token spent)", id, tok, err, last)
	}
	if n, err := w.c.Exists(ctx, wakeKey(w.wake, id)).Result(); err != nil || n != 0 {
		t.Errorf("wake list of %s once it asked again: got (%d, %v), want gone", id, n, err)
	}
	return g
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
			if !first.Granted || first.Held != 1 || first.Position != 0 || first.Waiting != 0 {
				t.Fatalf("first call: got %+v, want granted with 1 held, not in line, nobody waiting", first)
			}
			// The retry of a client whose answer got lost: n=1 is full, but by itself.
			again := runAcquire(t, b.c, key, id, 1, 10*time.Second, `{"host":"h"}`)
			if !again.Granted || again.Token != first.Token || again.Held != 1 {
				t.Fatalf("same id again: got %+v, want granted with the same token %d and 1 held", again, first.Token)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Fatalf("ZCARD after a repeated acquire: got %d, want 1", n)
			}
			if tok, err := b.c.Get(ctx, keys[2]).Int64(); err != nil || tok != first.Token {
				t.Errorf("token key after a repeated acquire: got (%d, %v), want %d (no token spent)", tok, err, first.Token)
			}

			other := runAcquire(t, b.c, key, "PERMIT0OTHER", 1, 10*time.Second, "")
			if other.Granted || other.Held != 1 || other.Lapse <= 0 || other.Lapse > 10_000 || other.Position != 0 || other.Waiting != 0 {
				t.Fatalf("another id with n=1 taken, not waiting: got %+v, want not granted, 1 held, lapse in (0, 10000] ms, not in line", other)
			}
			second := runAcquire(t, b.c, key, "PERMIT0SECOND", 2, 10*time.Second, "")
			if !second.Granted || second.Token <= first.Token || second.Held != 2 || second.Previous != 1 {
				t.Fatalf("another id with n=2: got %+v, want granted, token > %d, 2 held, previous capacity 1", second, first.Token)
			}
			if again := runAcquire(t, b.c, key, "PERMIT0SECOND", 2, 10*time.Second, ""); again.Token != second.Token || again.Held != 2 {
				t.Errorf("second id again: got %+v, want token %d and 2 held", again, second.Token)
			}

			// A waiter asking again (its renewal, or a retry) keeps its one place.
			w := call{n: 2, ttl: 10 * time.Second, wait: 10 * time.Second}
			in := runCall(t, b.c, key, "WAITER0A", w)
			if in.Granted || in.Position != 1 || in.Waiting != 1 {
				t.Fatalf("a waiter with n=2 taken: got %+v, want not granted, position 1 of 1", in)
			}
			rec0, _ := b.c.HGet(ctx, keys[4], Member("WAITER0A")).Result()
			b.advance(5 * time.Millisecond)
			if again := runCall(t, b.c, key, "WAITER0A", w); again.Granted || again.Position != 1 || again.Waiting != 1 {
				t.Errorf("the waiter again: got %+v, want not granted, still position 1 of 1", again)
			}
			if n, err := b.c.ZCard(ctx, keys[3]).Result(); err != nil || n != 1 {
				t.Errorf("ZCARD queue after a waiter asked twice: got %d, want 1", n)
			}
			rec1, _ := b.c.HGet(ctx, keys[4], Member("WAITER0A")).Result()
			f0, f1 := waiterRecord.FindStringSubmatch(rec0), waiterRecord.FindStringSubmatch(rec1)
			if f0 == nil || f1 == nil {
				t.Fatalf("waiter record before and after it asked again: got %q and %q, want \"<ms> <n> <weight> <ms> <ttl ms> <meta>\"", rec0, rec1)
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
var holderRecord = regexp.MustCompile(`^(\d+) (\d+) (\d+) (\d+) (?:s([\d,]+) )?(.*)$`)

// waiterRecord is what acquire.lua stores per waiter: "<lease expiry ms> <n> <weight> <since ms> <ttl ms> <meta>".
var waiterRecord = regexp.MustCompile(`^(\d+) (\d+) (\d+) (\d+) (\d+) (.*)$`)

func TestScriptsAgreeOnBothBackends(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "shapes"
			keys, _ := scriptKeys(key)
			wl := listen(t, b.c, key)
			const id, meta = "PERMIT0SHAPES", `{"host":"h","pid":1,"command":"a b  c"}`
			before := b.nowMicros(t)
			g := runCall(t, b.c, key, id, call{n: 3, ttl: 10 * time.Second, meta: meta, weight: 2})
			if !g.Granted || g.Token < before || g.Previous != 3 || g.Lapse <= 0 || g.Lapse > 10_000 || g.Held != 2 {
				t.Fatalf("acquire: got %+v, want granted, token >= %d µs, previous 3, lapse in (0, 10000] ms, 2 held", g, before)
			}

			// string.format('%d') of a 16-digit token and a 13-digit time.
			rec, err := b.c.HGet(ctx, keys[1], Member(id)).Result()
			if err != nil {
				t.Fatalf("HGET info: got error %v, want the record", err)
			}
			f := holderRecord.FindStringSubmatch(rec)
			if f == nil || f[1] != "3" || f[2] != strconv.FormatInt(g.Token, 10) || f[4] != "2" || f[5] != "0,1" || f[6] != meta {
				t.Fatalf("holder record: got %q, want \"3 %d <ms> 2 s0,1 %s\"", rec, g.Token, meta)
			}
			granted, _ := strconv.ParseInt(f[3], 10, 64)
			if now := b.nowMicros(t) / 1000; granted < before/1000 || granted > now {
				t.Errorf("granted ms in the record: got %d, want in [%d, %d]", granted, before/1000, now)
			}
			score, err := b.c.ZScore(ctx, keys[0], Member(id)).Result()
			if err != nil || int64(score) != granted+10_000 {
				t.Errorf("lease expiry: got (%v, %v), want granted+10000 = %d", score, err, granted+10_000)
			}
			if capacity, err := b.c.HGet(ctx, keys[1], "#cap").Result(); err != nil || capacity != "3" {
				t.Errorf("#cap: got (%q, %v), want \"3\"", capacity, err)
			}
			// rebase's (lib.lua): the grant's clock reading and the longest lease asked.
			if clk, err := b.c.HGet(ctx, keys[1], "#clock").Result(); err != nil || clk != f[3] {
				t.Errorf("#clock: got (%q, %v), want the grant's ms %q", clk, err, f[3])
			}
			if longest, err := b.c.HGet(ctx, keys[1], "#ttl").Result(); err != nil || longest != "10000" {
				t.Errorf("#ttl: got (%q, %v), want \"10000\"", longest, err)
			}
			if tok, err := b.c.Get(ctx, keys[2]).Result(); err != nil || tok != strconv.FormatInt(g.Token, 10) {
				t.Errorf("token key: got (%q, %v), want %q (an integer, not a float rendering)", tok, err, strconv.FormatInt(g.Token, 10))
			}

			// A waiter of weight 2 beside the holder of weight 2, under n=3.
			const wmeta = `{"host":"w","pid":2,"command":"wait"}`
			wg := runCall(t, b.c, key, "WAITER0SHAPES", call{n: 3, ttl: 20 * time.Second, meta: wmeta, weight: 2, wait: 5 * time.Second})
			if wg.Granted || wg.Held != 2 || wg.Position != 1 || wg.Waiting != 1 || wg.Lapse <= 0 {
				t.Fatalf("waiter of weight 2 beside a holder of weight 2, n=3: got %+v, want not granted, 2 held, position 1 of 1", wg)
			}
			wrec, err := b.c.HGet(ctx, keys[4], Member("WAITER0SHAPES")).Result()
			if err != nil {
				t.Fatalf("HGET waiters: got error %v, want the record", err)
			}
			wf := waiterRecord.FindStringSubmatch(wrec)
			if wf == nil || wf[2] != "3" || wf[3] != "2" || wf[5] != "20000" || wf[6] != wmeta {
				t.Fatalf("waiter record: got %q, want \"<ms> 3 2 <ms> 20000 %s\"", wrec, wmeta)
			}
			expiry, _ := strconv.ParseInt(wf[1], 10, 64)
			since, _ := strconv.ParseInt(wf[4], 10, 64)
			if expiry != since+5_000 {
				t.Errorf("waiter record %q: got lease expiry %d, want since+5000 = %d", wrec, expiry, since+5_000)
			}
			if seq, err := b.c.HGet(ctx, keys[4], "#seq").Result(); err != nil || seq != "1" {
				t.Errorf("#seq: got (%q, %v), want \"1\"", seq, err)
			}
			// Its place: its arrival less its priority (0) times NOAGE, times
			// 1024, plus its ticket, 1 (place in lib.lua).
			if score, err := b.c.ZScore(ctx, keys[3], Member("WAITER0SHAPES")).Result(); err != nil || score != float64(since*1024+1) {
				t.Errorf("waiter's place: got (%v, %v), want %d", score, err, since*1024+1)
			}

			st := runStatus(t, b.c, key)
			if st.Held != 2 || st.Capacity != 3 || len(st.Holders) != 1 || st.Holders[0].Token != g.Token || st.Holders[0].Command != "a b  c" || st.Holders[0].Weight != 2 || st.Holders[0].Permits != 3 {
				t.Errorf("status: got %+v, want 1 holder with token %d, weight 2, permits 3, capacity 3, 2 held", st, g.Token)
			}
			wantW := semaphore.Waiter{HolderInfo: semaphore.HolderInfo{Host: "w", PID: 2, Command: "wait"}, Permits: 3, Weight: 2, Position: 1}
			if len(st.Waiters) != 1 {
				t.Fatalf("status waiters: got %+v, want [%+v]", st.Waiters, wantW)
			}
			if w := st.Waiters[0]; w.Waited < 0 || w.Waited > time.Second {
				t.Errorf("status waiter waited: got %v, want in [0, 1s]", w.Waited)
			}
			if w := st.Waiters[0]; !reflect.DeepEqual(semaphore.Waiter{HolderInfo: w.HolderInfo, Permits: w.Permits, Weight: w.Weight, Position: w.Position}, wantW) {
				t.Errorf("status waiter: got %+v, want %+v", w, wantW)
			}

			if n := runRenew(t, b.c, key, id, 10*time.Second); n != 1 {
				t.Errorf("renew: got %d, want 1", n)
			}
			if n := runRenew(t, b.c, key, "PERMIT0NEVER", 10*time.Second); n != 0 {
				t.Errorf("renew of an id never granted: got %d, want 0", n)
			}
			if n := runRenew(t, b.c, key, "WAITER0SHAPES", 10*time.Second); n != 0 {
				t.Errorf("renew of a waiter: got %d, want 0 (only a holder renews)", n)
			}
			if n, err := b.c.ZCard(ctx, keys[0]).Result(); err != nil || n != 1 {
				t.Errorf("ZCARD after renewing ids never granted: got %d, want 1 (nothing created)", n)
			}
			for i, want := range []int64{1, 0} {
				if n := runRelease(t, b.c, key, id); n != want {
					t.Errorf("release #%d: got %d, want %d", i+1, n, want)
				}
			}
			// The waiter's turn came: the release handed it its permit, with
			// the n, weight, lease and meta of its record.
			tr := expectHandedOver(t, wl, "after the holder released", "WAITER0SHAPES")["WAITER0SHAPES"]
			if fields, err := b.c.HKeys(ctx, keys[1]).Result(); err != nil || !slices.Equal(sorted(fields), sorted([]string{"#cap", "#claim " + Member("WAITER0SHAPES"), "#clock", "#ttl", "#used", Member("WAITER0SHAPES"), "#slot 0", "#slot 1", "#slotlow"})) {
				t.Errorf("info fields after release: got (%q, %v), want only #cap, #clock, #ttl, #used and the waiter handed its permit, with its claim and its slots 0 and 1", fields, err)
			}
			hrec, err := b.c.HGet(ctx, keys[1], Member("WAITER0SHAPES")).Result()
			hf := holderRecord.FindStringSubmatch(hrec)
			if err != nil || hf == nil || hf[1] != "3" || hf[2] != strconv.FormatInt(tr.Token, 10) || hf[4] != "2" || hf[5] != "0,1" || hf[6] != wmeta {
				t.Fatalf("holder record of the waiter handed its permit: got (%q, %v), want \"3 %d <ms> 2 s0,1 %s\"", hrec, err, tr.Token, wmeta)
			}
			if !slices.Equal(tr.Slots.Numbers, []int{0, 1}) {
				t.Errorf("turn of the waiter handed its permit: got slots %v, want [0 1], the holder's freed", tr.Slots.Numbers)
			}
			// The second release (the last script run) read the clock last,
			// no earlier than the handover; the waiter's 20s lease is now the
			// longest asked.
			handedAt, _ := strconv.ParseInt(hf[3], 10, 64)
			if clk, err := b.c.HGet(ctx, keys[1], "#clock").Int64(); err != nil || clk < handedAt || clk > b.nowMicros(t)/1000 {
				t.Errorf("#clock after the handover: got (%d, %v), want in [the handover's ms %d, now]", clk, err, handedAt)
			}
			if longest, err := b.c.HGet(ctx, keys[1], "#ttl").Result(); err != nil || longest != "20000" {
				t.Errorf("#ttl after the handover: got (%q, %v), want \"20000\" (the waiter's lease, the longest asked)", longest, err)
			}
			if tr.Expiry != handedAt+20_000 {
				t.Errorf("lease expiry handed over: got %d, want granted ms %d + its own 20000 ms lease", tr.Expiry, handedAt)
			}
			if tr.Token <= g.Token {
				t.Errorf("token handed over: got %d, want more than the releasing holder's %d", tr.Token, g.Token)
			}
			if st := runStatus(t, b.c, key); st.Held != 2 || len(st.Holders) != 1 || st.Holders[0].Weight != 2 || st.Holders[0].Permits != 3 || st.Holders[0].Command != "wait" || len(st.Waiters) != 0 {
				t.Errorf("status after the handover: got %+v, want 2 held by the waiter (weight 2, permits 3), nobody waiting", st)
			}
			if n, err := b.c.Exists(ctx, keys[3]).Result(); err != nil || n != 0 {
				t.Errorf("queue key once nobody waits: got (%d, %v), want it gone", n, err)
			}
			if fields, err := b.c.HKeys(ctx, keys[4]).Result(); err != nil || len(fields) != 1 || fields[0] != "#seq" {
				t.Errorf("waiters fields once nobody waits: got (%q, %v), want only #seq", fields, err)
			}
			// Asking again, as a waiter that missed its list would, changes nothing.
			if g := expectSamePermit(t, wl, "WAITER0SHAPES", call{n: 3, ttl: 20 * time.Second, meta: wmeta, weight: 2, wait: 5 * time.Second}, tr); g.Held != 2 || g.Waiting != 0 {
				t.Errorf("the waiter asking after the handover: got %+v, want 2 held, nobody waiting", g)
			}
		})
	}
}

// TestScriptsServeTheLineInOrder: waiters are served in the order they
// came, and the scripts hand their permits to exactly the waiters whose
// turn it is, telling each on its wake list.
func TestScriptsServeTheLineInOrder(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "line"
			sub := listen(t, b.c, key)
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			h := runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			if !h.Granted {
				t.Fatalf("holder: got %+v, want granted", h)
			}
			for i, id := range []string{"W1", "W2", "W3"} {
				g := runCall(t, b.c, key, id, wait)
				if g.Granted || g.Held != 1 || g.Position != int64(i+1) || g.Waiting != int64(i+1) || g.Lapse <= 0 || g.Left != 0 {
					t.Fatalf("waiter %s: got %+v, want not granted, 1 held, position %d of %d, nothing left", id, g, i+1, i+1)
				}
			}
			if g := runCall(t, b.c, key, "W2", wait); g.Granted || g.Position != 2 || g.Waiting != 3 {
				t.Errorf("W2 asking again: got %+v, want not granted, position 2 of 3", g)
			}
			// A caller that will not wait does not join the line, even
			// where its larger n would fit it.
			if g := runAcquire(t, b.c, key, "X", 3, 10*time.Second, ""); g.Granted || g.Position != 0 || g.Waiting != 3 {
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
			expectHandedOver(t, sub, "before any release")

			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release of the holder: got %d, want 1", n)
			}
			w1 := expectHandedOver(t, sub, "after the holder released", "W1")["W1"]
			if w1.Token <= h.Token {
				t.Errorf("token handed to W1: got %d, want more than the releasing holder's %d", w1.Token, h.Token)
			}
			if st := runStatus(t, b.c, key); st.Held != 1 || len(st.Waiters) != 2 || st.Waiters[0].Position != 1 {
				t.Errorf("status after the handover to W1: got %+v, want 1 held, 2 waiting", st)
			}
			if g := runCall(t, b.c, key, "W2", wait); g.Granted || g.Held != 1 || g.Position != 1 || g.Waiting != 2 {
				t.Errorf("W2 while W1 holds the permit it was handed: got %+v, want not granted, 1 held, position 1 of 2", g)
			}
			if g := expectSamePermit(t, sub, "W1", wait, w1); g.Held != 1 || g.Waiting != 2 {
				t.Errorf("W1 asking after the handover: got %+v, want 1 held, 2 waiting", g)
			}
			// W2 leaves the line: W3 moves up, but the permit is still taken.
			if n := runRelease(t, b.c, key, "W2"); n != 1 {
				t.Errorf("release of a waiter: got %d, want 1", n)
			}
			expectHandedOver(t, sub, "after a waiter behind a holder left")
			if st := runStatus(t, b.c, key); len(st.Waiters) != 1 || st.Waiters[0].Position != 1 {
				t.Errorf("status after W2 left: got waiters %+v, want one at position 1", st.Waiters)
			}
			if n := runRelease(t, b.c, key, "W1"); n != 1 {
				t.Errorf("release of W1: got %d, want 1", n)
			}
			w3 := expectHandedOver(t, sub, "after W1 released", "W3")["W3"]
			if w3.Token <= w1.Token {
				t.Errorf("token handed to W3: got %d, want more than W1's %d", w3.Token, w1.Token)
			}
			// W3 gives back the permit it was handed, never having read it.
			if n := runRelease(t, b.c, key, "W3"); n != 1 {
				t.Errorf("release of W3, handed its permit: got %d, want 1", n)
			}
			if n := runRelease(t, b.c, key, "W3"); n != 0 {
				t.Errorf("release of W3 again: got %d, want 0", n)
			}
			expectHandedOver(t, sub, "after the last waiter left")
			if g := runAcquire(t, b.c, key, "X", 1, 10*time.Second, ""); !g.Granted || g.Waiting != 0 || g.Held != 1 {
				t.Errorf("no-wait caller once the line is empty: got %+v, want granted, 1 held", g)
			}
		})
	}
}

// TestScriptsWeights: a waiter takes its weight's permits, a light waiter
// does not pass a heavy one, and one release can hand permits to several
// waiters.
func TestScriptsWeights(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "weights"
			sub := listen(t, b.c, key)
			if g := runCall(t, b.c, key, "H", call{n: 3, ttl: 10 * time.Second, weight: 2}); !g.Granted || g.Held != 2 {
				t.Fatalf("holder of weight 2: got %+v, want granted, 2 held", g)
			}
			if g := runCall(t, b.c, key, "X", call{n: 3, ttl: 10 * time.Second, weight: 2}); g.Granted || g.Held != 2 {
				t.Errorf("no-wait weight 2 beside a holder of weight 2, n=3: got %+v, want not granted", g)
			}
			heavy := call{n: 3, ttl: 10 * time.Second, weight: 3, wait: 10 * time.Second}
			light := call{n: 3, ttl: 10 * time.Second, weight: 1, wait: 10 * time.Second}
			if g := runCall(t, b.c, key, "HEAVY", heavy); g.Granted || g.Position != 1 {
				t.Fatalf("heavy waiter: got %+v, want not granted, position 1", g)
			}
			// One permit is free, but the heavy waiter came first.
			if g := runCall(t, b.c, key, "LIGHT", light); g.Granted || g.Position != 2 {
				t.Errorf("light waiter behind a heavy one, a permit free: got %+v, want not granted, position 2", g)
			}
			if g := runCall(t, b.c, key, "Y", call{n: 3, ttl: 10 * time.Second}); g.Granted {
				t.Errorf("no-wait weight 1 with a permit free and a line: got %+v, want not granted", g)
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			hv := expectHandedOver(t, sub, "after the holder released", "HEAVY")["HEAVY"]
			if st := runStatus(t, b.c, key); st.Held != 3 || len(st.Holders) != 1 || st.Holders[0].Weight != 3 {
				t.Errorf("status with the heavy waiter handed its permit: got %+v, want held 3 by one holder of weight 3", st)
			}
			if g := runCall(t, b.c, key, "LIGHT", light); g.Granted || g.Held != 3 || g.Position != 1 {
				t.Errorf("light waiter while the heavy one holds every permit: got %+v, want not granted, 3 held, position 1", g)
			}
			if g := expectSamePermit(t, sub, "HEAVY", heavy, hv); g.Held != 3 || g.Waiting != 1 {
				t.Fatalf("heavy waiter asking after the handover: got %+v, want 3 held, 1 waiting", g)
			}
			for _, id := range []string{"L2", "L3"} {
				if g := runCall(t, b.c, key, id, light); g.Granted {
					t.Fatalf("light waiter %s behind the heavy holder: got %+v, want not granted", id, g)
				}
			}
			if n := runRelease(t, b.c, key, "HEAVY"); n != 1 {
				t.Fatalf("release of the heavy holder: got %d, want 1", n)
			}
			// Three light waiters fit at once: one release hands all three
			// their permits, in the order of the line.
			lights := expectHandedOver(t, sub, "after the heavy holder released", "LIGHT", "L2", "L3")
			last := hv.Token
			for _, id := range []string{"LIGHT", "L2", "L3"} {
				if tr := lights[id]; tr.Token <= last {
					t.Errorf("token handed to %s: got %d, want more than %d, the one before it", id, tr.Token, last)
				}
				last = lights[id].Token
			}
			if st := runStatus(t, b.c, key); st.Held != 3 || len(st.Holders) != 3 || len(st.Waiters) != 0 {
				t.Errorf("status after the light waiters were handed their permits: got %+v, want 3 held by 3 holders, nobody waiting", st)
			}
			for _, id := range []string{"L3", "LIGHT", "L2"} {
				if g := expectSamePermit(t, sub, id, light, lights[id]); g.Held != 3 || g.Waiting != 0 {
					t.Errorf("light waiter %s asking after the handover: got %+v, want 3 held, nobody waiting", id, g)
				}
			}
			expectHandedOver(t, sub, "after the light waiters asked again")
		})
	}
}

// TestScriptsSweepGivesTurns: waiters and holders whose lease lapsed leave
// when anyone next asks, and the waiters whose turn that made are handed
// their permits by that caller's script.
func TestScriptsSweepGivesTurns(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "sweep"
			sub := listen(t, b.c, key)
			h := runAcquire(t, b.c, key, "H", 1, time.Second, "")
			if !h.Granted {
				t.Fatalf("holder: got %+v, want granted", h)
			}
			expiry := h.Now + h.Left
			if g := runCall(t, b.c, key, "GONE", call{n: 1, ttl: 10 * time.Second, wait: 200 * time.Millisecond}); g.Position != 1 {
				t.Fatalf("waiter with a 200ms waiter lease: got %+v, want position 1", g)
			}
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			if g := runCall(t, b.c, key, "W", wait); g.Position != 2 {
				t.Fatalf("waiter behind it: got %+v, want position 2", g)
			}
			b.advance(200 * time.Millisecond)
			// GONE never asked again: it leaves the line; the holder remains.
			if g := runAcquire(t, b.c, key, "X", 1, time.Second, ""); g.Granted || g.Waiting != 1 {
				t.Errorf("no-wait caller after the first waiter's lease lapsed: got %+v, want not granted, 1 waiting", g)
			}
			expectHandedOver(t, sub, "after a waiter left with a holder still in")
			if st := runStatus(t, b.c, key); len(st.Waiters) != 1 || st.Waiters[0].Position != 1 || st.Held != 1 {
				t.Errorf("status after the first waiter's lease lapsed: got %+v, want 1 held, one waiter at position 1", st)
			}
			// W asks again (renews its place) every 200ms while the holder's
			// lease runs, as a waiter of a busy key does: a key nobody
			// touched for more than half its longest lease (H's 1s) would
			// have H's lease pushed back (rebase in lib.lua). Timed by the
			// server's clock, so that on a redis-server, whose clock runs
			// on its own, no ask comes after the lapse, and the last one
			// comes less than 500ms before the next caller; on miniredis
			// W asks at 400, 600 and 800ms, and X at 1000ms, the expiry.
			for b.nowMicros(t)/1000+400 <= expiry {
				b.advance(200 * time.Millisecond)
				if g := runCall(t, b.c, key, "W", wait); g.Granted || g.Position != 1 || g.Held != 1 || g.Moved != 0 {
					t.Fatalf("W renewing its place while the holder's lease runs: got %+v, want not granted, position 1, 1 held, nothing moved", g)
				}
			}
			b.advance(time.Duration(max(expiry-b.nowMicros(t)/1000, 0)) * time.Millisecond)
			// The holder's lease lapsed: the caller that swept it hands W
			// the permit, and counts it as taken.
			if g := runAcquire(t, b.c, key, "X", 1, time.Second, ""); g.Granted || g.Held != 1 || g.Waiting != 0 {
				t.Errorf("no-wait caller after the holder's lease lapsed: got %+v, want not granted (W handed the permit), 1 held, nobody waiting", g)
			}
			tr := expectHandedOver(t, sub, "after the holder's lease lapsed", "W")["W"]
			expectSamePermit(t, sub, "W", wait, tr)
		})
	}
}

// TestScriptsDropTheirOwnWakeList: a waiter's wake list goes when it asks
// after it was handed its permit, or gives the permit back, even before
// reading it.
func TestScriptsDropTheirOwnWakeList(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "ownlist"
			w := listen(t, b.c, key)
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			if g := runAcquire(t, b.c, key, "H", 1, 10*time.Second, ""); !g.Granted {
				t.Fatalf("holder: got %+v, want granted", g)
			}
			for _, id := range []string{"W1", "W2", "W3"} {
				if g := runCall(t, b.c, key, id, wait); g.Granted {
					t.Fatalf("waiter %s: got %+v, want not granted", id, g)
				}
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release of the holder: got %d, want 1", n)
			}
			if got := woken(t, w); len(got) != 1 || got[wakeKey(w.wake, "W1")] != 1 {
				t.Fatalf("wake lists after the holder released: got %v, want W1's only, of 1 element", got)
			}
			elem, err := b.c.LIndex(ctx, wakeKey(w.wake, "W1"), 0).Result()
			tr := ReadTurn(elem)
			if err != nil || !tr.Handed {
				t.Fatalf("W1's wake list: got (%q, %v), want \"g <token> <expiry ms>\"", elem, err)
			}
			// W1 asks before reading its list: it gets the permit it was
			// handed, and the list goes.
			expectSamePermit(t, w, "W1", wait, tr)
			expectHandedOver(t, w, "after W1 asked again")
			if n := runRelease(t, b.c, key, "W1"); n != 1 {
				t.Fatalf("release of W1: got %d, want 1", n)
			}
			if got := woken(t, w); len(got) != 1 || got[wakeKey(w.wake, "W2")] != 1 {
				t.Fatalf("wake lists after W1 released: got %v, want W2's only, of 1 element", got)
			}
			// W2 gives its permit back before reading its list: the list
			// goes, and W3, whose turn it is now, is handed the permit.
			if n := runRelease(t, b.c, key, "W2"); n != 1 {
				t.Fatalf("release of W2, handed its permit: got %d, want 1", n)
			}
			expectHandedOver(t, w, "after W2 gave back its permit unread", "W3")
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
			if n := runRenew(t, b.c, key, "H", 2*time.Second); n != 1 {
				t.Fatalf("renew: got %d, want 1", n)
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
	if want := scriptClock.UnixMicro(); g.Token != want {
		t.Errorf("first token on an empty store: got %d, want the server clock %d µs", g.Token, want)
	}
}

func TestKeysEscapeBraces(t *testing.T) {
	seen := map[string]string{}
	for _, key := range []string{"a", "a}", "{a}", "}x", "%7B", "%7D", "{", "}", "%", "%25", "a:b}:holders"} {
		ks := NewKeys("p:", key).List()
		if len(ks) != 6 {
			t.Fatalf("keys(%q): got %d keys, want 6", key, len(ks))
		}
		if p := NewKeys("p:", key).Policy; !strings.HasPrefix(p, ks[0][:strings.IndexByte(ks[0], '}')+1]) || !strings.HasSuffix(p, "}:policy") {
			t.Errorf("keys(%q): policy %q, want the key's tag and :policy", key, p)
		}
		lo, hi := strings.IndexByte(ks[0], '{'), strings.IndexByte(ks[0], '}')
		if lo != len("p:") || hi < lo {
			t.Fatalf("keys(%q)[0] = %q: got tag at [%d, %d], want it right after the prefix", key, ks[0], lo, hi)
		}
		tag := ks[0][:hi+1]
		names := map[string]bool{}
		for i, k := range append(ks, NewKeys("p:", key).Wake) {
			if !strings.HasPrefix(k, tag) || strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Errorf("keys(%q) and channel: got %q, want one {tag} %q shared by all and no other brace", key, k, tag)
			}
			suffix := []string{"holders", "info", "token", "queue", "waiters", "leases", "wake"}[i]
			if k != tag+":"+suffix {
				t.Errorf("keys(%q) #%d: got %q, want %q", key, i, k, tag+":"+suffix)
			}
			names[k] = true
		}
		if len(names) != 7 {
			t.Errorf("keys(%q) and channel: got %v, want 7 different names", key, names)
		}
		if prev, dup := seen[tag]; dup {
			t.Errorf("keys(%q) and keys(%q): got the same tag %q, want different keys", prev, key, tag)
		}
		seen[tag] = key
	}
}

// TestReadHolder: a holder record is read whole, or not at all.
func TestReadHolder(t *testing.T) {
	h, err := readHolder(`3 1700000000000000 1700000000000 2 {"host":"h","pid":1,"command":"a b"}`, 1700000001000)
	want := semaphore.Holder{HolderInfo: semaphore.HolderInfo{Host: "h", PID: 1, Command: "a b"}, Permits: 3, Token: 1700000000000000, Age: time.Second, Weight: 2}
	if err != nil || !reflect.DeepEqual(h, want) {
		t.Errorf("readHolder: got (%+v, %v), want %+v", h, err, want)
	}
	for _, rec := range []string{
		``,
		`2 1700000000000000 1700000000000 {"host":"h"}`, // no weight
		`2 1700000000000000 1700000000000 3`,
		`2 -1 1700000000000 3 `,
		`2 99999999999999999999 1700000000000 3 `,
		`2 1700000000000000 1700000000000 3 {`,
	} {
		if h, err := readHolder(rec, 1700000001000); err == nil {
			t.Errorf("readHolder(%q): got %+v, want an error", rec, h)
		}
	}
}

// sorted returns s sorted, for comparing sets.
func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// TestScriptsSkipRecordsThatAreNot: a waiter record that is not one
// (written by someone else, or cut short) is swept out of the line, not
// fatal for the key: the waiters behind it are served, and status shows
// the others.
func TestScriptsSkipRecordsThatAreNot(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "notrecords"
			keys, _ := scriptKeys(key)
			sub := listen(t, b.c, key)
			runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			if g := runCall(t, b.c, key, "BAD", wait); g.Position != 1 {
				t.Fatalf("first waiter: got %+v, want first in line", g)
			}
			if g := runCall(t, b.c, key, "NEXT", wait); g.Position != 2 {
				t.Fatalf("second waiter: got %+v, want second in line", g)
			}
			if err := b.c.HSet(ctx, keys[4], Member("BAD"), "not a record").Err(); err != nil {
				t.Fatalf("HSET waiters BAD: got error %v, want nil", err)
			}
			if st := runStatus(t, b.c, key); st.Held != 1 || len(st.Waiters) != 1 || st.Waiters[0].Position != 1 {
				t.Errorf("status with a waiter record that is not one: got %+v, want the holder, and NEXT alone in line", st)
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			expectHandedOver(t, sub, "after the holder released", "NEXT")
			if err := b.c.ZScore(ctx, keys[3], Member("BAD")).Err(); err != redis.Nil {
				t.Errorf("ZSCORE queue BAD: got %v, want redis.Nil (swept)", err)
			}
		})
	}
}

// TestScriptsHandedTokensIncrease: every permit handed over gets a fencing
// token of its own, above every token before it, the releasing holder's
// among them.
func TestScriptsHandedTokensIncrease(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "handedtokens"
			sub := listen(t, b.c, key)
			keys, _ := scriptKeys(key)
			tokens := map[string]int64{}
			var last int64
			for _, id := range []string{"H1", "H2"} {
				g := runAcquire(t, b.c, key, id, 2, 10*time.Second, "")
				if !g.Granted || g.Token <= last {
					t.Fatalf("holder %s: got %+v, want granted, token > %d", id, g, last)
				}
				tokens[id], last = g.Token, g.Token
			}
			wait := call{n: 2, ttl: 10 * time.Second, wait: 10 * time.Second}
			for _, id := range []string{"W1", "W2", "W3", "W4"} {
				if g := runCall(t, b.c, key, id, wait); g.Granted {
					t.Fatalf("waiter %s: got %+v, want not granted", id, g)
				}
			}
			for _, step := range []struct{ release, handed string }{
				{"H1", "W1"}, {"H2", "W2"}, {"W1", "W3"}, {"W2", "W4"},
			} {
				if n := runRelease(t, b.c, key, step.release); n != 1 {
					t.Fatalf("release of %s: got %d, want 1", step.release, n)
				}
				tr, ok := expectHandedOver(t, sub, "after "+step.release+" released", step.handed)[step.handed]
				if !ok {
					t.Fatalf("after %s released: got no permit handed to %s, want one", step.release, step.handed)
				}
				if tr.Token <= last || tr.Token == tokens[step.release] {
					t.Errorf("token handed to %s when %s released: got %d, want more than %d, the last before it, and not %s's %d",
						step.handed, step.release, tr.Token, last, step.release, tokens[step.release])
				}
				if tok, err := b.c.Get(context.Background(), keys[2]).Int64(); err != nil || tok != tr.Token {
					t.Errorf("token key after %s released: got (%d, %v), want %d, the token handed over", step.release, tok, err, tr.Token)
				}
				tokens[step.handed], last = tr.Token, tr.Token
			}
		})
	}
}

// TestScriptsHandoverKeepsKeysAlive: a release that hands a permit over
// makes every key live at least as long as that lease, which runs from the
// release: longer than the waiter's own ask kept them.
func TestScriptsHandoverKeepsKeysAlive(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "handoveralive"
			sub := listen(t, b.c, key)
			keys, _ := scriptKeys(key)
			runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			// W's ask keeps the keys for the 30s permit it asks for, from now.
			runCall(t, b.c, key, "W", call{n: 1, ttl: 30 * time.Second, wait: 5 * time.Second})
			b.advance(2 * time.Second)
			for _, k := range keys {
				if got, err := b.c.PTTL(ctx, k).Result(); err != nil || got >= 30*time.Second {
					t.Fatalf("PTTL %s 2s after W asked: got (%v, %v), want less than 30s", k, got, err)
				}
			}
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			tr := expectHandedOver(t, sub, "after the holder released", "W")["W"]
			left := time.Duration(tr.Expiry-b.nowMicros(t)/1000) * time.Millisecond
			// The queue went with its last waiter; the other keys remain.
			if n, err := b.c.Exists(ctx, keys[3]).Result(); err != nil || n != 0 {
				t.Errorf("queue key once nobody waits: got (%d, %v), want it gone", n, err)
			}
			for _, k := range []string{keys[0], keys[1], keys[2], keys[4]} {
				if got, err := b.c.PTTL(ctx, k).Result(); err != nil || got < left || got > 31*time.Second {
					t.Errorf("PTTL %s after a 30s lease was handed over: got (%v, %v), want in [%v, 31s], the lease's remaining and at most a second more", k, got, err, left)
				}
			}
		})
	}
}

// TestScriptsLateWaiterAsksAgain: a waiter that reads its turn only after
// the lease it was handed lapsed (it was stopped, say) has lost that
// permit: its renewal fails, and when it asks again it is not granted but
// back in line, behind whoever the lapse gave the permit to.
func TestScriptsLateWaiterAsksAgain(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "late"
			sub := listen(t, b.c, key)
			keys, _ := scriptKeys(key)
			runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			late := call{n: 1, ttl: time.Second, wait: 10 * time.Second}
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			runCall(t, b.c, key, "LATE", late)
			runCall(t, b.c, key, "NEXT", wait)
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			handed := expectHandedOver(t, sub, "after the holder released", "LATE")["LATE"]

			b.advance(time.Second) // LATE's 1s lease lapses unused
			// LATE reads its turn (expectHandedOver popped it) and, its
			// lease about to lapse, renews first: too late.
			if n := runRenew(t, b.c, key, "LATE", late.ttl); n != 0 {
				t.Errorf("renew of the lapsed permit handed over: got %d, want 0 (lost)", n)
			}
			g := runCall(t, b.c, key, "LATE", late)
			if g.Granted || g.Token != 0 || g.Held != 1 || g.Position != 1 || g.Waiting != 1 || g.Left != 0 {
				t.Errorf("LATE asking again after its lease lapsed: got %+v, want not granted, 1 held, back in line at position 1 of 1", g)
			}
			// Its call swept the lapsed permit and handed it to NEXT.
			next := expectHandedOver(t, sub, "after LATE asked again", "NEXT")["NEXT"]
			if next.Token <= handed.Token {
				t.Errorf("token handed to NEXT: got %d, want more than LATE's lapsed %d", next.Token, handed.Token)
			}
			if err := b.c.ZScore(ctx, keys[0], Member("LATE")).Err(); err != redis.Nil {
				t.Errorf("ZSCORE holders LATE: got %v, want redis.Nil (its permit gone)", err)
			}
			st := runStatus(t, b.c, key)
			if st.Held != 1 || len(st.Holders) != 1 || st.Holders[0].Token != next.Token || len(st.Waiters) != 1 {
				t.Errorf("status after LATE asked again: got %+v, want NEXT the only holder (token %d), LATE waiting", st, next.Token)
			}
			// Once NEXT gives the permit back, LATE is handed a new permit.
			if n := runRelease(t, b.c, key, "NEXT"); n != 1 {
				t.Fatalf("release of NEXT: got %d, want 1", n)
			}
			again := expectHandedOver(t, sub, "after NEXT released", "LATE")["LATE"]
			if again.Token <= next.Token {
				t.Errorf("token handed to LATE the second time: got %d, want more than NEXT's %d", again.Token, next.Token)
			}
		})
	}
}

// TestScriptsStaleTurnGoesWithTheLapsedPermit: a waiter whose handed
// permit lapsed before it read its list, and which asks again, finds that
// stale turn gone once back in line: it would take it for a new one, with
// the lapsed token, when it next waits.
func TestScriptsStaleTurnGoesWithTheLapsedPermit(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "staleturn"
			w := listen(t, b.c, key)
			runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			late := call{n: 1, ttl: time.Second, wait: 10 * time.Second}
			runCall(t, b.c, key, "LATE", late)
			runCall(t, b.c, key, "NEXT", call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second})
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			b.advance(time.Second) // LATE's lease lapses, its list unread
			if g := runCall(t, b.c, key, "LATE", late); g.Granted || g.Position != 1 {
				t.Fatalf("LATE asking again after its lease lapsed: got %+v, want not granted, back in line", g)
			}
			if elems, err := b.c.LRange(ctx, wakeKey(w.wake, "LATE"), 0, -1).Result(); err != nil || len(elems) != 0 {
				t.Errorf("LATE's wake list once it is back in line: got (%q, %v), want empty (the lapsed permit's turn gone)", elems, err)
			}
			// Its call handed the permit to NEXT, whose list alone remains.
			expectHandedOver(t, w, "after LATE asked again", "NEXT")
		})
	}
}

// TestScriptsVanishedWaiterStallsForItsLeases: a waiter that vanished
// (killed while in line) and whose turn comes while its place is still
// leased is handed the permit, which frees when that permit's lease lapses:
// it stalls the ones behind it for at most its waiter lease and its TTL,
// the bound the README gives.
func TestScriptsVanishedWaiterStallsForItsLeases(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "vanished"
			runAcquire(t, b.c, key, "H", 1, 10*time.Second, "")
			// GONE asks for a 2s permit with a 1s waiter lease, then is killed.
			gone := call{n: 1, ttl: 2 * time.Second, wait: time.Second}
			runCall(t, b.c, key, "GONE", gone)
			wait := call{n: 1, ttl: 10 * time.Second, wait: 10 * time.Second}
			runCall(t, b.c, key, "NEXT", wait)
			if n := runRelease(t, b.c, key, "H"); n != 1 {
				t.Fatalf("release: got %d, want 1", n)
			}
			b.advance(gone.ttl) // GONE never asked again, nor read its turn
			if g := runCall(t, b.c, key, "NEXT", wait); !g.Granted {
				t.Errorf("the waiter behind one that vanished, asking once the permit handed to it lapsed (%v after its last ask): got %+v, want granted", gone.ttl, g)
			}
		})
	}
}

// TestScriptsDeadWaitersTurnLapsesAfterAnIdleMinute: a turn handed to a
// waiter that died stays a claim, even when nobody touches the key for
// longer than a wake list lives without a turn in it: its list outlives
// the lease it carries, so a missing list still means the turn was taken.
// On miniredis only: its clock is the test's.
func TestScriptsDeadWaitersTurnLapsesAfterAnIdleMinute(t *testing.T) {
	t.Parallel()
	b := backends(t)[0]
	const key, ttl = "idle", 10 * time.Minute
	runAcquire(t, b.c, key, "H", 1, ttl, "")
	wait := call{n: 1, ttl: ttl, wait: ttl}
	runCall(t, b.c, key, "DEAD", wait)
	runCall(t, b.c, key, "NEXT", wait)
	if n := runRelease(t, b.c, key, "H"); n != 1 {
		t.Fatalf("release: got %d, want 1", n)
	}
	b.advance(WakeListLife + Claim) // DEAD never read its turn; nobody called
	if g := runCall(t, b.c, key, "NEXT", wait); !g.Granted {
		t.Errorf("the waiter behind a dead one, asking %v after the hand-over: got %+v, want granted (the dead one's claim lapsed)", WakeListLife+Claim, g)
	}
}

// TestParseTurn: only "g <token> <expiry ms>[ <slots>[ <names>]]" is a permit handed over;
// anything else tells the waiter to ask again.
func TestParseTurn(t *testing.T) {
	for _, tc := range []struct {
		elem string
		want Turn
	}{
		{"g 123 456", Turn{Handed: true, Token: 123, Expiry: 456}},
		{"g 1930367167891235 1930367177891", Turn{Handed: true, Token: 1930367167891235, Expiry: 1930367177891}},
		{"1", Turn{}},
		{"", Turn{}},
		{"g x y", Turn{}},
		{"g 123", Turn{}},
		{"g 123 456 0,3", Turn{Handed: true, Token: 123, Expiry: 456, Slots: semaphore.Slots{Numbers: []int{0, 3}}}},
		{"g 123 456 1 GPU one", Turn{Handed: true, Token: 123, Expiry: 456, Slots: semaphore.Slots{Numbers: []int{1}, Names: []string{"GPU one"}}}},
		{"g 123 456 1,2 a", Turn{Handed: true, Token: 123, Expiry: 456, Slots: semaphore.Slots{Numbers: []int{1, 2}}}}, // names that are not names
		{"g 123 456 3,1", Turn{Handed: true, Token: 123, Expiry: 456}},                                                 // slots that are not slots
		{"g 123 456 1024", Turn{Handed: true, Token: 123, Expiry: 456}},
	} {
		// Only handed counts when the waiter is to ask again.
		if got := ReadTurn(tc.elem); got.Handed != tc.want.Handed || got.Handed && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ReadTurn(%q): got %+v, want %+v", tc.elem, got, tc.want)
		}
	}
}

// TestReadWaiter: a waiter record is read whole, or not at all.
func TestReadWaiter(t *testing.T) {
	info := semaphore.HolderInfo{Host: "h", PID: 1, Command: "a b"}
	for _, tc := range []struct {
		rec      string
		wantInfo semaphore.HolderInfo
	}{
		{`1700000010000 3 2 1700000000000 30000 {"host":"h","pid":1,"command":"a b"}`, info},
		{`1700000010000 3 2 1700000000000 30000 `, semaphore.HolderInfo{}},
	} {
		w, err := readWaiter(tc.rec, 1700000001000)
		if err != nil {
			t.Fatalf("readWaiter(%q): got error %v, want nil", tc.rec, err)
		}
		if want := (semaphore.Waiter{HolderInfo: tc.wantInfo, Permits: 3, Weight: 2, Waited: time.Second}); !reflect.DeepEqual(w, want) {
			t.Errorf("readWaiter(%q): got %+v, want %+v", tc.rec, w, want)
		}
	}
	for _, rec := range []string{
		``,
		`1700000010000 2 3`,
		`1700000010000 2 x 1700000000000 30000 `,
		`1700000010000 2 3 1700000000000 30000 {`,
		`1700000010000 2 3 1700000000000 {"host":"h"}`, // no ttl
		`1700000010000 2 3 1700000000000 30000 `,       // heavier than its N
		`1700000010000 0 0 1700000000000 30000 `,       // no N
	} {
		if w, err := readWaiter(rec, 1700000001000); err == nil {
			t.Errorf("readWaiter(%q): got %+v, want an error", rec, w)
		}
	}
}

// lineOf is the line of src, from 1, that holds text.
func lineOf(t *testing.T, src, text string) int {
	t.Helper()
	for i, line := range strings.Split(src, "\n") {
		if strings.Contains(line, text) {
			return i + 1
		}
	}
	t.Fatalf("no line holds %q", text)
	return 0
}

// TestScriptErrorsNameTheirFileAndLine: an error raised inside a script
// names the file and the line it was raised at, though Redis counts the
// lines of lib.lua and of the script's own file as one.
func TestScriptErrorsNameTheirFileAndLine(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			k := NewKeys(testPrefix, "errors")
			// A line that is not a sorted set: acquire.lua's own call fails.
			if err := b.c.Set(ctx, k.Queue, "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := Run(ctx, b.c, k, AcquireArgs{ID: "X", Permits: 1, TTL: time.Second, Weight: 1})
			want := fmt.Sprintf("acquire.lua:%d", lineOf(t, acquireLua, "local inline = redis.call('ZSCORE', queueKey, id)"))
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "user_script") {
				t.Errorf("acquire.lua on a line of another type: got %v, want an error at %s", err, want)
			}
			// An info key that is not a hash: lib.lua's rebase fails.
			if err := b.c.Set(ctx, k.Info, "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			_, err = Run(ctx, b.c, k, ReleaseArgs{ID: "X"})
			want = fmt.Sprintf("lib.lua:%d", lineOf(t, libLua, "local rec = redis.call('HMGET', infoKey, '#clock', '#ttl')"))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("release.lua on info of another type: got %v, want an error at %s", err, want)
			}
			var rerr redis.Error
			if !errors.As(err, &rerr) {
				t.Errorf("release.lua's error: got %T, want one that wraps Redis's own (redis.Error)", err)
			}
		})
	}
}

// testPrefix prefixes every key these tests write.
const testPrefix = "test:"

// runScript runs a on c, as the store does.
func runScript(t testing.TB, c redis.Scripter, k Keys, a Args) any {
	t.Helper()
	res, err := Run(context.Background(), c, k, a)
	if err != nil {
		t.Fatalf("%s: got error %v, want a reply", a.script().Name(), err)
	}
	return res
}

// runAcquireArgs runs acquire.lua with a on c and returns its reply.
func runAcquireArgs(t testing.TB, c redis.Scripter, k Keys, a AcquireArgs) AcquireReply {
	t.Helper()
	a.Weight = max(a.Weight, 1)
	r, err := DecodeAcquire(runScript(t, c, k, a))
	if err != nil {
		t.Fatalf("acquire.lua for %q: got %v, want its reply", a.ID, err)
	}
	return r
}
