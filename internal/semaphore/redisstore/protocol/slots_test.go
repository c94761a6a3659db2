package protocol

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// slotsOf are the slot numbers a grant holds, failing the test when it
// was not granted.
func slotsOf(t *testing.T, r AcquireReply, who string) []int {
	t.Helper()
	if !r.Granted {
		t.Fatalf("%s: got %+v, want granted", who, r)
	}
	return r.Slots.Numbers
}

// TestScriptsSlots: a grant takes the lowest free slots below the
// capacity it is admitted against, as many as its weight, and a permit
// frees, keeps or hands on its slots exactly as itself.
func TestScriptsSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "slots"
			ttl := 10 * time.Second
			get := func(id string, n, weight int) []int {
				t.Helper()
				return slotsOf(t, runCall(t, b.c, key, id, call{n: n, ttl: ttl, weight: weight}), id)
			}
			if got := get("A", 4, 1); !slices.Equal(got, []int{0}) {
				t.Fatalf("first grant: got slots %v, want [0]", got)
			}
			if got := get("B", 4, 2); !slices.Equal(got, []int{1, 2}) {
				t.Fatalf("weight 2 next: got slots %v, want [1 2]", got)
			}
			runRelease(t, b.c, key, "A")
			if got := get("C", 4, 1); !slices.Equal(got, []int{0}) {
				t.Fatalf("after slot 0's release: got slots %v, want [0], the lowest free", got)
			}
			// A repeat of the call (a reply lost) answers the same slots.
			if got := get("C", 4, 1); !slices.Equal(got, []int{0}) {
				t.Fatalf("the call repeated: got slots %v, want [0] again", got)
			}
			if got := get("D", 4, 1); !slices.Equal(got, []int{3}) {
				t.Fatalf("last free: got slots %v, want [3]", got)
			}
			// The status shows each holder's.
			st := runStatus(t, b.c, key)
			var shown [][]int
			for _, h := range st.Holders {
				shown = append(shown, h.Slots.Numbers)
			}
			slices.SortFunc(shown, func(x, y []int) int { return x[0] - y[0] })
			if fmt.Sprint(shown) != "[[0] [1 2] [3]]" {
				t.Errorf("status: got holders' slots %v, want [[0] [1 2] [3]]", shown)
			}

			// A capacity lowered below a held slot leaves its holder alone;
			// new grants take only slots below it.
			runRelease(t, b.c, key, "C")
			runRelease(t, b.c, key, "B")
			if got := get("E", 2, 1); !slices.Equal(got, []int{0}) {
				t.Fatalf("capacity 2 with slot 3 held: got slots %v, want [0]", got)
			}
			if r := runCall(t, b.c, key, "F", call{n: 2, ttl: ttl}); r.Granted {
				t.Fatalf("capacity 2, two held (slots 0 and 3): got %+v, want busy", r)
			}
			runRelease(t, b.c, key, "E")
			if got := get("F", 2, 1); !slices.Equal(got, []int{0}) {
				t.Fatalf("capacity 2 again: got slots %v, want [0]", got)
			}
			runRelease(t, b.c, key, "D")
			if got := get("G", 2, 1); !slices.Equal(got, []int{1}) {
				t.Fatalf("slot 3's holder gone: got slots %v, want [1]", got)
			}

			// A slot named for a holder that is gone (a release by a version
			// before slots, someone else's write) is free, once the names are
			// found too few.
			keys, _ := scriptKeys(key)
			runRelease(t, b.c, key, "F")
			runRelease(t, b.c, key, "G")
			if err := b.c.HSet(ctx, keys[1], "#slot 0", Member("GONE"), "#slot 1", "not a member").Err(); err != nil {
				t.Fatal(err)
			}
			if got := get("H", 2, 2); !slices.Equal(got, []int{0, 1}) {
				t.Fatalf("slots named for holders gone: got slots %v, want [0 1]", got)
			}
			runRelease(t, b.c, key, "H")
			// A holder record whose slots are not its own frees nobody
			// else's: only '#slot' names that are its own go with it.
			get("I", 2, 1)
			rec, err := b.c.HGet(ctx, keys[1], Member("I")).Result()
			if err != nil {
				t.Fatal(err)
			}
			get("J", 2, 1)
			// Its record says slot 1, J's.
			if err := b.c.HSet(ctx, keys[1], Member("I"), strings.Replace(rec, " s0 ", " s1 ", 1)).Err(); err != nil {
				t.Fatal(err)
			}
			runRelease(t, b.c, key, "I")
			if owner, err := b.c.HGet(ctx, keys[1], "#slot 1").Result(); err != nil || owner != Member("J") {
				t.Errorf("slot 1 after a release whose record named it: got (%q, %v), want still J's", owner, err)
			}
			if got := get("K", 2, 1); !slices.Equal(got, []int{0}) {
				t.Errorf("after I's release: got slots %v, want [0] (slot 1 is J's)", got)
			}
		})
	}
}

// TestScriptsSlotsLapseCoolAndHandOn: a lapsed permit frees its slot, a
// cooling keeps it, and a permit handed to a waiter carries its slots, and
// their names, in its turn.
func TestScriptsSlotsLapseCoolAndHandOn(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "slotslapse"
			short := 2 * time.Second
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 2, ttl: short}), "A")
			slotsOf(t, runCall(t, b.c, key, "B", call{n: 2, ttl: time.Minute}), "B")
			b.advance(short + 100*time.Millisecond)
			if got := slotsOf(t, runCall(t, b.c, key, "C", call{n: 2, ttl: time.Minute}), "C"); !slices.Equal(got, []int{0}) {
				t.Fatalf("after A's lease lapsed: got slots %v, want [0], A's", got)
			}

			// Cooling: slot 0 stays taken until the min hold passed.
			const cooled = "slotscool"
			runAcquireArgs(t, b.c, NewKeys(testPrefix, cooled), AcquireArgs{ID: "A", Permits: 2, TTL: time.Minute, Wait: 0, Cool: 5 * time.Second})
			runScript(t, b.c, NewKeys(testPrefix, cooled), ReleaseArgs{ID: "A", Cool: 5 * time.Second, Exit: 0})
			if got := slotsOf(t, runCall(t, b.c, cooled, "B", call{n: 2, ttl: time.Minute}), "B"); !slices.Equal(got, []int{1}) {
				t.Fatalf("beside a cooling of slot 0: got slots %v, want [1]", got)
			}
			st := runStatus(t, b.c, cooled)
			if len(st.Cooling) != 1 || !slices.Equal(st.Cooling[0].Slots.Numbers, []int{0}) {
				t.Errorf("status: got cooling %+v, want one of slot 0", st.Cooling)
			}

			// Handed over: the turn says the slots, named.
			const handed = "slotshand"
			if r := keyOp(t, b.c, handed, KeyArgs{Op: "slots", Names: []string{"gpu a", "gpu b"}}); r.Stored != 2 {
				t.Fatalf("key slots: got stored %d, want 2", r.Stored)
			}
			wl := listen(t, b.c, handed)
			g := runCall(t, b.c, handed, "A", call{n: 9, ttl: time.Minute, weight: 2})
			if !g.Granted || !slices.Equal(g.Slots.Names, []string{"gpu a", "gpu b"}) {
				t.Fatalf("grant of named slots: got %+v, want granted with names [gpu a gpu b]", g)
			}
			if r := runCall(t, b.c, handed, "W", call{n: 9, ttl: 10 * time.Second, wait: 10 * time.Second}); r.Granted || r.Position != 1 {
				t.Fatalf("waiter: got %+v, want first in line", r)
			}
			runRelease(t, b.c, handed, "A")
			tr := expectHandedOver(t, wl, "after the holder released", "W")["W"]
			if !slices.Equal(tr.Slots.Numbers, []int{0}) || !slices.Equal(tr.Slots.Names, []string{"gpu a"}) {
				t.Errorf("turn: got slots %+v, want [0] named [gpu a]", tr.Slots)
			}
			if st := runStatus(t, b.c, handed); !slices.Equal(st.SlotNames, []string{"gpu a", "gpu b"}) ||
				len(st.Holders) != 1 || !slices.Equal(st.Holders[0].Slots.Names, []string{"gpu a"}) {
				t.Errorf("status: got names %q, holders %+v, want [gpu a gpu b] and W's slot 0 named", st.SlotNames, st.Holders)
			}
			// A capacity set drops the names.
			keyOp(t, b.c, handed, KeyArgs{Op: "set", Cap: 3})
			if st := runStatus(t, b.c, handed); st.SlotNames != nil || st.Holders[0].Slots.Names != nil {
				t.Errorf("after key set --permits: got names %q, %+v, want none", st.SlotNames, st.Holders[0].Slots)
			}
		})
	}
}

// TestScriptsSlotsOnlyOnSmallKeys: a key of more than MaxSlots permits
// numbers none.
func TestScriptsSlotsOnlyOnSmallKeys(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			r := runCall(t, b.c, "big", "A", call{n: semaphore.MaxSlots + 1, ttl: time.Minute, weight: 3})
			if !r.Granted || r.Slots.Numbers != nil {
				t.Errorf("a key of %d permits: got %+v, want granted without slots", semaphore.MaxSlots+1, r)
			}
			r = runCall(t, b.c, "edge", "A", call{n: semaphore.MaxSlots, ttl: time.Minute, weight: semaphore.MaxSlots})
			if !r.Granted || len(r.Slots.Numbers) != semaphore.MaxSlots || r.Slots.Numbers[semaphore.MaxSlots-1] != semaphore.MaxSlots-1 {
				t.Errorf("a key of %d permits, all taken at once: got %d slots, want all", semaphore.MaxSlots, len(r.Slots.Numbers))
			}
		})
	}
}
