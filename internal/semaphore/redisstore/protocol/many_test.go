package protocol

import (
	"context"
	"testing"
	"time"
)

// runMany runs many.lua for id on keys, each of n permits, waiting in line
// unless wait is 0, and returns its replies and which keys fit.
func runMany(t *testing.T, b backend, id string, wait time.Duration, n int, keys ...string) ([]AcquireReply, []bool) {
	t.Helper()
	a := ManyArgs{}
	for _, key := range keys {
		a.Keys = append(a.Keys, NewKeys(testPrefix, key))
		a.Each = append(a.Each, AcquireArgs{ID: id, Permits: n, TTL: 10 * time.Second, Meta: []byte("m"), Weight: 1, Wait: wait})
	}
	res, err := RunMany(context.Background(), b.c, a)
	if err != nil {
		t.Fatalf("%s: many.lua for %q: got error %v, want a reply", b.name, id, err)
	}
	r, fits, err := DecodeMany(res, len(keys))
	if err != nil {
		t.Fatalf("%s: many.lua for %q: got %v, want its reply", b.name, id, err)
	}
	return r, fits
}

// held is how many permits of key are taken, as status reads them.
func held(t *testing.T, b backend, key string) int {
	t.Helper()
	return runStatus(t, b.c, key).Held
}

// A caller of several keys is granted all of them or none; waiting, it
// holds nothing, keeps a place in every line, and nobody passes it: a
// caller of one of its keys that comes later waits behind it. When the key
// it waited for frees, the hand-over asks it to look, and its next call
// takes every key.
func TestManyAllOrNothingInLine(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			a, c := "many-a-"+b.name, "many-b-"+b.name
			if r, _ := runMany(t, b, "both1", time.Second, 1, a, c); !r[0].Granted || !r[1].Granted || r[0].Token <= 0 || r[1].Token <= 0 {
				t.Fatalf("two free keys: got %+v, want both granted", r)
			}
			runRelease(t, b.c, a, "both1")
			runRelease(t, b.c, c, "both1")

			// c is held: the caller of both holds nothing, and waits in both lines.
			if r := runAcquire(t, b.c, c, "holder", 1, 10*time.Second, "h"); !r.Granted {
				t.Fatalf("holder of %s: got %+v, want granted", c, r)
			}
			r, fits := runMany(t, b, "both2", 5*time.Second, 1, a, c)
			if r[0].Granted || r[1].Granted || r[0].Position != 1 || r[1].Position != 1 || !fits[0] || fits[1] {
				t.Fatalf("one key held: got %+v, fits %v; want neither granted, first in both lines, fitting a only", r, fits)
			}
			if got := held(t, b, a); got != 0 {
				t.Fatalf("a while the caller of both waits: got %d held, want 0", got)
			}
			// A caller of a alone, later, does not pass it.
			if r := runCall(t, b.c, a, "single", call{n: 1, ttl: 10 * time.Second, wait: 5 * time.Second}); r.Granted || r.Position != 2 {
				t.Fatalf("a later caller of a: got %+v, want in line 2nd", r)
			}
			// c freed: its hand-over stops at the caller of both and asks it to look.
			runRelease(t, b.c, c, "holder")
			wl := wakeKey(NewKeys(testPrefix, c).Wake, "both2")
			if elems, _ := b.c.LRange(context.Background(), wl, 0, -1).Result(); len(elems) != 1 || ReadTurn(elems[0]).Look == 0 {
				t.Fatalf("wake list of the caller of both after c freed: got %q, want one look", elems)
			}
			if got := held(t, b, c); got != 0 {
				t.Fatalf("c after its holder left: got %d held, want 0 (nobody handed it)", got)
			}
			r, _ = runMany(t, b, "both2", 5*time.Second, 1, a, c)
			if !r[0].Granted || !r[1].Granted {
				t.Fatalf("its next call: got %+v, want both granted", r)
			}
			if got := runStatus(t, b.c, a); got.Held != 1 || len(got.Waiters) != 1 {
				t.Fatalf("a: got %d held, %d waiting; want the caller of both, and the single caller waiting", got.Held, len(got.Waiters))
			}
			// Its release hands a on to the single caller.
			runRelease(t, b.c, a, "both2")
			runRelease(t, b.c, c, "both2")
			if got := runStatus(t, b.c, a); got.Held != 1 || len(got.Waiters) != 0 {
				t.Fatalf("a once the caller of both left: got %d held, %d waiting; want the single caller holding", got.Held, len(got.Waiters))
			}
		})
	}
}

// Two callers of the same keys, listed in either order, both waiting:
// each line orders them alike, so that the first to come is first in both
// and is granted first; neither holds anything while it waits.
func TestManyLinesOrderCallersAlike(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			a, c := "order-a-"+b.name, "order-b-"+b.name
			// Lines of different lengths first, so that the tickets differ.
			runAcquire(t, b.c, a, "ha", 1, 10*time.Second, "h")
			runAcquire(t, b.c, c, "hc", 1, 10*time.Second, "h")
			for i := range 3 {
				runCall(t, b.c, a, "wa"+string(rune('0'+i)), call{n: 1, ttl: 10 * time.Second, wait: 5 * time.Second})
			}
			x, _ := runMany(t, b, "x", 5*time.Second, 1, a, c)
			y, _ := runMany(t, b, "y", 5*time.Second, 1, c, a)
			if x[0].Granted || y[0].Granted {
				t.Fatalf("both held keys: got x %+v, y %+v; want neither granted", x, y)
			}
			// x is before y in both lines.
			if !(x[0].Position < y[1].Position && x[1].Position < y[0].Position) {
				t.Fatalf("places: x in a %d, in c %d; y in a %d, in c %d: want x first in both", x[0].Position, x[1].Position, y[1].Position, y[0].Position)
			}
			for i := range 3 {
				runRelease(t, b.c, a, "wa"+string(rune('0'+i)))
			}
			runRelease(t, b.c, a, "ha")
			runRelease(t, b.c, c, "hc")
			if r, _ := runMany(t, b, "y", 5*time.Second, 1, c, a); r[0].Granted {
				t.Fatalf("y before x: got %+v, want not granted", r)
			}
			if r, _ := runMany(t, b, "x", 5*time.Second, 1, a, c); !r[0].Granted || !r[1].Granted {
				t.Fatalf("x: got %+v, want both granted", r)
			}
		})
	}
}
