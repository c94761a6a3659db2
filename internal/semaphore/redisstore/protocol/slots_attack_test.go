package protocol

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// Attacks on slots: stale, garbled or hostile data in the keys, and
// interleavings of the scripts, against the rule that two holders never
// hold one slot of a key, that a grant's slots are below the capacity it
// was admitted against, and that a grant of a numbered key gets its slots.

// TestSlotsAttackOwnStaleName: a holder whose record is not one asks
// again, and is granted anew (acquire.lua drops the record): the '#slot'
// name its old grant left names it still, and must not cost the new grant
// its slot.
func TestSlotsAttackOwnStaleName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkownstale"
			keys, _ := scriptKeys(key)
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 2, ttl: time.Minute}), "A")
			slotsOf(t, runCall(t, b.c, key, "B", call{n: 2, ttl: time.Minute}), "B")
			if err := b.c.HSet(ctx, keys[1], Member("A"), "not a record").Err(); err != nil {
				t.Fatal(err)
			}
			r := runCall(t, b.c, key, "A", call{n: 2, ttl: time.Minute})
			if got := slotsOf(t, r, "A again"); !slices.Equal(got, []int{0}) {
				t.Errorf("A granted anew beside B's slot 1: got slots %v, want [0]", got)
			}
		})
	}
}

// slotBelief is what a holder's process believes it holds: its slots,
// until expiry (server ms), by which its command has stopped.
type slotBelief struct {
	slots  []int
	expiry int64
	token  int64
}

// slotFuzz drives the scripts at random, as many processes and an
// operator would, and checks after every step that no two processes
// believe they hold one slot at once, and that the keys agree with
// themselves: each holder's record lists slots that '#slot' gives it,
// and each '#slot' name is a holder's that lists it.
type slotFuzz struct {
	t       *testing.T
	b       backend
	r       *rand.Rand
	keys    []string
	stored  map[string]int                   // key -> stored capacity, 0: none
	beliefs map[string]map[string]slotBelief // key -> id -> belief
	waiting map[string]map[string]int        // key -> waiter id -> the capacity it asked
	turns   map[string]map[string][]int      // key -> id -> the slots of a turn handed to it, not taken yet
	// turnTokens are the tokens of those turns, by key and id.
	turnTokens map[string]int64
	ops        []string       // what was done, for the failure's message
	counts     map[string]int // how often each thing happened
}

func (f *slotFuzz) now() int64 { return f.b.nowMicros(f.t) / 1000 }

func (f *slotFuzz) failf(format string, args ...any) {
	f.t.Helper()
	last := f.ops[max(len(f.ops)-12, 0):]
	if os.Getenv("SLOTFUZZ_ALL") != "" {
		last = f.ops
	}
	var state []string
	for _, key := range f.keys {
		keys, _ := scriptKeys(key)
		held, _ := f.b.c.ZRangeWithScores(context.Background(), keys[0], 0, -1).Result()
		info, _ := f.b.c.HGetAll(context.Background(), keys[1]).Result()
		state = append(state, fmt.Sprintf("%s: holders %v info %v", key, held, info))
	}
	f.t.Fatalf("%s\nlast steps:\n  %s\nkeys now:\n  %s", fmt.Sprintf(format, args...), strings.Join(last, "\n  "), strings.Join(state, "\n  "))
}

// admitted is the capacity a caller asking n of key is admitted against.
func (f *slotFuzz) admitted(key string, n int) int {
	if c := f.stored[key]; c > 0 {
		return c
	}
	return n
}

// checkNew checks a grant's slots, fresh at capacity c, of weight.
func (f *slotFuzz) checkFresh(what string, slots []int, weight, c int) {
	f.t.Helper()
	if c <= semaphore.MaxSlots && len(slots) != weight {
		f.failf("%s: got slots %v, want %d of them (capacity %d)", what, slots, weight, c)
	}
	for _, s := range slots {
		if s >= c {
			f.failf("%s: got slots %v, want each below the capacity %d it was admitted against", what, slots, c)
		}
	}
}

// believe records that id's process on key holds slots until expiry,
// and checks that no other process alive believes it holds any of them.
func (f *slotFuzz) believe(what, key, id string, slots []int, expiry, token int64) {
	f.t.Helper()
	now := f.now()
	if expiry <= now {
		// Lapsed already (a turn read late): its process starts nothing.
		return
	}
	for other, b := range f.beliefs[key] {
		if other == id || b.expiry <= now {
			continue
		}
		for _, s := range slots {
			if slices.Contains(b.slots, s) {
				f.failf("%s: %s got slot %d, which %s holds until %d (now %d)", what, id, s, other, b.expiry, now)
			}
		}
	}
	f.beliefs[key][id] = slotBelief{slots: slots, expiry: expiry, token: token}
	f.counts["belief"]++
	if len(slots) > 0 && slots[len(slots)-1] >= 3 {
		f.counts["high slot"]++
	}
}

// checkGrant checks the slots of r, a grant to id of key asking n of
// weight, and records them as what id's process holds: the same slots as
// before when it is a grant id knew of (its token), or else slots fresh
// at the capacity it was admitted against.
func (f *slotFuzz) checkGrant(what, key, id string, r AcquireReply, weight, n int) {
	f.t.Helper()
	got := r.Slots.Numbers
	before, known := f.beliefs[key][id]
	turn, handed := f.turns[key][id]
	switch {
	case known && before.token == r.Token:
		// The same grant: a repeat, or a lease the store kept longer than
		// its holder counted on (rebase).
		if !slices.Equal(got, before.slots) {
			f.failf("%s: a repeat: got slots %v, want %v as before", what, got, before.slots)
		}
	case handed && f.turnTokens[key+" "+id] == r.Token:
		if !slices.Equal(got, turn) {
			f.failf("%s: the turn handed: got slots %v, want %v as its turn said", what, got, turn)
		}
	default:
		f.checkFresh(what, got, weight, f.admitted(key, n))
	}
	f.believe(what, key, id, got, r.Now+r.Left, r.Token)
}

// lookAtTurns checks the turns handed to waiters since the last step:
// slots below the capacity the waiter was admitted against now.
func (f *slotFuzz) lookAtTurns(key string) {
	f.t.Helper()
	ctx := context.Background()
	k := NewKeys(testPrefix, key)
	for id, n := range f.waiting[key] {
		elems, err := f.b.c.LRange(ctx, k.WakeList(id), 0, -1).Result()
		if err != nil {
			f.failf("LRANGE wake list of %s: %v", id, err)
		}
		for _, e := range elems {
			tr := ReadTurn(e)
			if !tr.Handed {
				continue
			}
			if f.turnTokens[key+" "+id] != tr.Token {
				f.checkFresh(fmt.Sprintf("turn %q handed to %s", e, id), tr.Slots.Numbers, 1, f.admitted(key, n))
				f.turns[key][id] = tr.Slots.Numbers
				f.turnTokens[key+" "+id] = tr.Token
				f.counts["turn"]++
			}
		}
	}
}

// checkKeys checks that the key's records and '#slot' names agree.
func (f *slotFuzz) checkKeys(key string) {
	f.t.Helper()
	ctx := context.Background()
	keys, _ := scriptKeys(key)
	members, err := f.b.c.ZRange(ctx, keys[0], 0, -1).Result()
	if err != nil {
		f.failf("ZRANGE holders: %v", err)
	}
	info, err := f.b.c.HGetAll(ctx, keys[1]).Result()
	if err != nil {
		f.failf("HGETALL info: %v", err)
	}
	listed := map[int]string{}
	for _, m := range members {
		h, err := readHolder(info[m], 0)
		if err != nil {
			f.failf("holder %s: record %q: %v", m[:8], info[m], err)
		}
		for _, s := range h.Slots.Numbers {
			if o, ok := listed[s]; ok {
				f.failf("slot %d listed by the records of both %s and %s", s, o[:8], m[:8])
			}
			listed[s] = m
			if info["#slot "+strconv.Itoa(s)] != m {
				f.failf("slot %d listed by %s's record, but '#slot %d' names %q", s, m[:8], s, info["#slot "+strconv.Itoa(s)])
			}
		}
	}
	for field, owner := range info {
		rest, ok := strings.CutPrefix(field, "#slot ")
		if !ok {
			continue
		}
		s, _ := strconv.Atoi(rest)
		if listed[s] != owner {
			// A name its holder left when it lapsed with the holders' set
			// (the info hash may outlive it), which the second look of
			// takeSlots frees: that no grant lacks its slots is checked
			// grant by grant.
			f.counts["stale name"]++
		}
	}
}

func (f *slotFuzz) run(steps int, lease func() time.Duration, advance func() time.Duration) {
	ctx := context.Background()
	// Ten processes, each asking under a permit id of its own that it
	// changes once done with a permit, as semrun does: a new run, a new id.
	gen := make([]int, 10)
	for _, key := range f.keys {
		f.beliefs[key], f.waiting[key], f.turns[key] = map[string]slotBelief{}, map[string]int{}, map[string][]int{}
	}
	for step := 0; step < steps; step++ {
		key := f.keys[0]
		if f.r.IntN(4) == 0 {
			key = f.keys[1]
		}
		k := NewKeys(testPrefix, key)
		proc := f.r.IntN(len(gen))
		id := fmt.Sprintf("p%d.%d", proc, gen[proc])
		if b, ok := f.beliefs[key][id]; ok && b.expiry <= f.now() && f.r.IntN(2) == 0 {
			// Its lease over, the process goes on as another.
			gen[proc]++
			id = fmt.Sprintf("p%d.%d", proc, gen[proc])
		}
		switch op := f.r.IntN(20); {
		case op < 7: // acquire, or its repeat
			n := []int{1, 2, 3, 4, 6}[f.r.IntN(5)]
			weight := 1 + f.r.IntN(min(n, 2))
			a := AcquireArgs{ID: id, Permits: n, TTL: lease(), Weight: weight, Meta: []byte("{}")}
			if f.r.IntN(2) == 0 {
				a.Wait = 10 * time.Second
				a.Weight = 1 // a waiter's turn is checked as of weight 1
			}
			if f.r.IntN(4) == 0 {
				a.Cool = lease() / 2
			}
			if n0, ok := f.waiting[key][id]; ok {
				// A waiter asks again as it first asked.
				a.Permits, a.Weight, a.Wait = n0, 1, 10*time.Second
				n = n0
			}
			f.ops = append(f.ops, fmt.Sprintf("%s: acquire %s %+v", key, id, a))
			r := runAcquireArgs(f.t, f.b.c, k, a)
			if r.Granted {
				f.checkGrant(fmt.Sprintf("%s: acquire %s granted %+v", key, id, r), key, id, r, a.Weight, n)
				delete(f.waiting[key], id)
				delete(f.turns[key], id)
				f.counts["grant"]++
			} else if r.Position > 0 {
				f.waiting[key][id] = n
			}
		case op < 10: // release
			cool := time.Duration(0)
			if f.r.IntN(3) == 0 {
				cool = lease()
			}
			f.ops = append(f.ops, fmt.Sprintf("%s: release %s cool %v", key, id, cool))
			runScript(f.t, f.b.c, k, ReleaseArgs{ID: id, Cool: cool, Exit: 0})
			delete(f.beliefs[key], id)
			delete(f.waiting[key], id)
			delete(f.turns[key], id)
			gen[proc]++
		case op < 13: // renew
			b, ok := f.beliefs[key][id]
			if _, inLine := f.waiting[key][id]; !ok || inLine || b.expiry <= f.now() {
				// Only a holder whose lease lasts renews it.
				continue
			}
			sent := f.now()
			f.ops = append(f.ops, fmt.Sprintf("%s: renew %s", key, id))
			r, err := DecodeRenew(runScript(f.t, f.b.c, k, RenewArgs{ID: id, TTL: lease()}))
			if err != nil {
				f.failf("renew %s: %v", id, err)
			}
			f.ops[len(f.ops)-1] += fmt.Sprintf(": %+v (sent %d)", r, sent)
			if r.Renewed {
				// A renewal sets the lease anew, shorter too.
				b.expiry = sent + r.Left
				f.beliefs[key][id] = b
			}
		case op < 15: // waiters take their turns
			for _, wid := range slices.Sorted(maps.Keys(f.waiting[key])) { // in an order a seed repeats
				v, err := f.b.c.LPop(ctx, k.WakeList(wid)).Result()
				if err != nil {
					continue
				}
				tr := ReadTurn(v)
				if !tr.Handed {
					continue
				}
				f.ops = append(f.ops, fmt.Sprintf("%s: %s takes its turn %q", key, wid, v))
				delete(f.waiting[key], wid)
				delete(f.turns[key], wid)
				f.believe("turn taken", key, wid, tr.Slots.Numbers, tr.Expiry, tr.Token)
			}
		case op < 16: // the clock
			d := advance()
			f.ops = append(f.ops, fmt.Sprintf("advance %v", d))
			f.b.advance(d)
		case op < 18: // an operator
			a := KeyArgs{}
			switch f.r.IntN(5) {
			case 0:
				a = KeyArgs{Op: "set", Cap: 1 + f.r.IntN(6)}
				f.stored[key] = a.Cap
			case 1:
				a = KeyArgs{Op: "unset"}
				f.stored[key] = 0
			case 2:
				names := []string{"a", "b", "c", "d", "e", "f"}[:1+f.r.IntN(6)]
				a = KeyArgs{Op: "slots", Names: names}
				f.stored[key] = len(names)
			case 3, 4:
				force := f.r.IntN(2) == 0
				a = KeyArgs{Op: "revoke", Holder: shortHash(Member(id))[:10], Force: force}
				if force {
					// One alive may run beside the next: forced, it is no holder.
					delete(f.beliefs[key], id)
					gen[proc]++
				}
			}
			f.ops = append(f.ops, fmt.Sprintf("%s: key %+v (%s)", key, a, id))
			keyOp(f.t, f.b.c, key, a)
		case op < 19: // several keys at once
			if _, ok := f.beliefs[f.keys[0]][id]; ok {
				continue
			}
			if _, ok := f.beliefs[f.keys[1]][id]; ok {
				continue
			}
			n := []int{1, 2, 4}[f.r.IntN(3)]
			f.ops = append(f.ops, fmt.Sprintf("many %s n %d", id, n))
			ma := ManyArgs{}
			for _, key := range f.keys {
				ma.Keys = append(ma.Keys, NewKeys(testPrefix, key))
				ma.Each = append(ma.Each, AcquireArgs{ID: id, Permits: n, TTL: lease(), Meta: []byte("{}"), Weight: 1})
			}
			res, err := RunMany(ctx, f.b.c, ma)
			if err != nil {
				f.failf("many.lua: %v", err)
			}
			rs, _, err := DecodeMany(res, len(f.keys))
			if err != nil {
				f.failf("many.lua: %v", err)
			}
			for i, r := range rs {
				if !r.Granted {
					continue
				}
				f.checkGrant(fmt.Sprintf("%s: many %s granted %+v", f.keys[i], id, r), f.keys[i], id, r, 1, n)
				delete(f.waiting[f.keys[i]], id)
				delete(f.turns[f.keys[i]], id)
				f.counts["many"]++
			}
		default: // a hold begun on a permit held
			b, ok := f.beliefs[key][id]
			if !ok || b.expiry <= f.now() {
				continue
			}
			f.ops = append(f.ops, fmt.Sprintf("%s: hold begin %s", key, id))
			r, err := DecodeHold(runScript(f.t, f.b.c, k, HoldArgs{Op: "begin", ID: id, TTL: lease(), Meta: []byte("{}")}))
			if err != nil {
				f.failf("hold begin %s: %v", id, err)
			}
			if r.State == "held" {
				f.counts["hold"]++
				if !slices.Equal(r.Slots.Numbers, b.slots) {
					f.failf("hold begin %s: got slots %v, want %v, its permit's", id, r.Slots.Numbers, b.slots)
				}
			}
		}
		for _, key := range f.keys {
			f.lookAtTurns(key)
			f.checkKeys(key)
		}
	}
}

// TestSlotsAttackAtRandom: processes acquiring, renewing, releasing (some
// cooling), waiting and taking turns, of one key and of several, holds
// begun, the clock moving, and an operator storing, unsetting and naming
// capacities and revoking, at random: no two processes ever believe they
// hold one slot at once, each grant gets its weight's slots below the
// capacity it was admitted against, and the keys' records and '#slot'
// names agree after every step.
func TestSlotsAttackAtRandom(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			steps, seeds := 2500, 3
			lease := func(r *rand.Rand) time.Duration { return time.Duration(1+r.IntN(8)) * time.Second }
			advance := func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(3000)) * time.Millisecond }
			if b.name != "miniredis" {
				// A real clock: short leases, and short waits.
				steps, seeds = 800, 1
				lease = func(r *rand.Rand) time.Duration { return time.Duration(1000+r.IntN(1000)) * time.Millisecond }
				advance = func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(100)) * time.Millisecond }
			}
			for seed := range seeds {
				r := rand.New(rand.NewPCG(uint64(seed), 38))
				f := &slotFuzz{t: t, b: b, r: r, keys: []string{fmt.Sprintf("atkrand%d", seed), fmt.Sprintf("atkrand%db", seed)},
					stored: map[string]int{}, beliefs: map[string]map[string]slotBelief{}, waiting: map[string]map[string]int{},
					turns: map[string]map[string][]int{}, turnTokens: map[string]int64{}, counts: map[string]int{}}
				f.run(steps, func() time.Duration { return lease(r) }, func() time.Duration { return advance(r) })
				t.Logf("seed %d: %v", seed, f.counts)
			}
		})
	}
}

// TestSlotsAttackForcedRevokeOfATurnNotTaken: a permit handed to a waiter
// that has not read its turn yet is revoked with --force, and its slot
// goes to the next: the turn must go too, or the waiter reads it and
// starts its command on the slot beside the next holder's.
func TestSlotsAttackForcedRevokeOfATurnNotTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkforceturn"
			k := NewKeys(testPrefix, key)
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 1, ttl: time.Minute}), "A")
			if r := runCall(t, b.c, key, "W", call{n: 1, ttl: time.Minute, wait: 10 * time.Second}); r.Position != 1 {
				t.Fatalf("W: got %+v, want first in line", r)
			}
			if r := runCall(t, b.c, key, "X", call{n: 1, ttl: time.Minute, wait: 10 * time.Second}); r.Position != 2 {
				t.Fatalf("X: got %+v, want second in line", r)
			}
			runRelease(t, b.c, key, "A")
			// W's turn waits in its list; the operator frees its permit.
			keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: shortHash(Member("W"))[:10], Force: true})
			x, err := b.c.LRange(ctx, k.WakeList("X"), 0, -1).Result()
			if err != nil || len(x) != 1 || !slices.Equal(ReadTurn(x[0]).Slots.Numbers, []int{0}) {
				t.Fatalf("X's wake list after W's permit was revoked: got (%q, %v), want its turn of slot 0", x, err)
			}
			if w, err := b.c.LRange(ctx, k.WakeList("W"), 0, -1).Result(); err != nil || len(w) != 0 {
				t.Errorf("W's wake list after its permit was revoked with --force: got (%q, %v), want none: "+
					"W would start on slot 0 beside X", w, err)
			}
		})
	}
}

// TestSlotsAttackKeysOutlived: the holders' set lapses before the info
// hash (it is made anew, with a shorter life, once emptied), taking a
// lapsed holder with it but leaving its '#slot' name: the next grant of
// the idle key still takes the lowest slot, 0.
func TestSlotsAttackKeysOutlived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkoutlived"
			keys, _ := scriptKeys(key)
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 4, ttl: 20 * time.Second}), "A")
			runRelease(t, b.c, key, "A")
			if got := slotsOf(t, runCall(t, b.c, key, "B", call{n: 4, ttl: time.Second}), "B"); !slices.Equal(got, []int{0}) {
				t.Fatalf("B: got slots %v, want [0]", got)
			}
			b.advance(2500 * time.Millisecond)
			if n, err := b.c.Exists(ctx, keys[0]).Result(); err != nil || n != 0 {
				t.Fatalf("holders after B's lease and a second: got (%d, %v), want gone", n, err)
			}
			if owner, err := b.c.HGet(ctx, keys[1], "#slot 0").Result(); err != nil || owner != Member("B") {
				t.Fatalf("'#slot 0' with the holders gone: got (%q, %v), want B's name left", owner, err)
			}
			if got := slotsOf(t, runCall(t, b.c, key, "C", call{n: 4, ttl: time.Minute}), "C"); !slices.Equal(got, []int{0}) {
				t.Errorf("C, first holder of the idle key: got slots %v, want [0], the lowest free", got)
			}
		})
	}
}

// TestSlotsAttackStaleNamesOfAHolder: the holders' set lapses with a
// holder in it, which asks again with the same permit id (its reply was
// lost, and it retries after a stall) and is granted other slots: the
// names its lapsed grant left name a holder again, but one whose record
// does not list them, and they must not stay taken.
func TestSlotsAttackStaleNamesOfAHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkstaleholder"
			keys, _ := scriptKeys(key)
			// A longer life for the info hash than for the holders' set.
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 4, ttl: 20 * time.Second}), "A")
			runRelease(t, b.c, key, "A")
			slotsOf(t, runCall(t, b.c, key, "X", call{n: 4, ttl: time.Second}), "X")
			slotsOf(t, runCall(t, b.c, key, "Y", call{n: 4, ttl: time.Second}), "Y")
			if got := slotsOf(t, runCall(t, b.c, key, "W", call{n: 4, ttl: time.Second, weight: 2}), "W"); !slices.Equal(got, []int{2, 3}) {
				t.Fatalf("W: got slots %v, want [2 3]", got)
			}
			b.advance(2500 * time.Millisecond)
			if n, err := b.c.Exists(ctx, keys[0]).Result(); err != nil || n != 0 {
				t.Fatalf("holders after every lease and a second: got (%d, %v), want gone", n, err)
			}
			if got := slotsOf(t, runCall(t, b.c, key, "W", call{n: 4, ttl: time.Minute, weight: 2}), "W again"); !slices.Equal(got, []int{0, 1}) {
				t.Fatalf("W again, first holder of the idle key: got slots %v, want [0 1]", got)
			}
			for i, id := range []string{"B", "C"} {
				if got := slotsOf(t, runCall(t, b.c, key, id, call{n: 4, ttl: time.Minute}), id); !slices.Equal(got, []int{2 + i}) {
					t.Errorf("%s beside W's slots 0 and 1: got slots %v, want [%d]", id, got, 2+i)
				}
			}
		})
	}
}

// TestSlotsAttackGarbage: '#slot' names, holder records, a policy and a
// count anyone may have written make no script fail, no decoder panic,
// and no grant take a slot a holder holds.
func TestSlotsAttackGarbage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	huge := strings.Repeat("9", 100_000)
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkgarbage"
			keys, _ := scriptKeys(key)
			policy := NewKeys(testPrefix, key).Policy
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 4, ttl: time.Minute}), "A")
			// Names beside A's: garbage, beyond any capacity, of a holder
			// that holds no such slot.
			if err := b.c.HSet(ctx, keys[1], "#slot 1", huge, "#slot 99999", Member("A"), "#slot -1", "x", "#slot 2", Member("A")).Err(); err != nil {
				t.Fatal(err)
			}
			// Holder records whose slots are not slots.
			for i, slots := range []string{"", "0,0", "-0", "00", "5000", huge, strings.Repeat("1,", 2000) + "1", "0,1,2,3,4"} {
				rec := fmt.Sprintf("4 %d 1 1 s%s {}", 10+i, slots)
				if err := b.c.ZAdd(ctx, keys[0], redis.Z{Score: float64(b.nowMicros(t)/1000 + 60_000), Member: fmt.Sprintf("g%d", i)}).Err(); err != nil {
					t.Fatal(err)
				}
				if err := b.c.HSet(ctx, keys[1], fmt.Sprintf("g%d", i), rec).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// The policy: names of absurd counts and values.
			if err := b.c.HSet(ctx, policy, "slots", huge, "name 0", huge).Err(); err != nil {
				t.Fatal(err)
			}
			st := runStatus(t, b.c, key)
			for _, h := range st.Holders {
				if len(h.Slots.Numbers) > 0 && !slices.Equal(h.Slots.Numbers, []int{0}) {
					t.Errorf("status: a holder with slots %v: want only A's [0], the others' records being garbage", h.Slots.Numbers)
				}
			}
			if err := b.c.HSet(ctx, keys[1], "#used", "0").Err(); err != nil {
				t.Fatal(err)
			}
			// Counted wrong: B is let in beside 9 holders of 4, and takes
			// no slot rather than one another holds.
			r := runCall(t, b.c, key, "B", call{n: 12, ttl: time.Minute})
			if !r.Granted || slices.Contains(r.Slots.Numbers, 0) {
				t.Errorf("B beside A's slot 0: got %+v, want granted, not slot 0", r)
			}
			// Each holder that is garbage goes without freeing A's.
			for i := range 8 {
				keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: shortHash(fmt.Sprintf("g%d", i))[:10], Force: true})
			}
			if owner, err := b.c.HGet(ctx, keys[1], "#slot 0").Result(); err != nil || owner != Member("A") {
				t.Errorf("'#slot 0' after the garbage went: got (%q, %v), want A's", owner, err)
			}
			// A policy that is no hash names nothing, and is replaced.
			if err := b.c.Del(ctx, policy).Err(); err != nil {
				t.Fatal(err)
			}
			if err := b.c.Set(ctx, policy, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if r := runCall(t, b.c, key, "C", call{n: 12, ttl: time.Minute}); !r.Granted || r.Slots.Names != nil {
				t.Errorf("C with a policy that is no hash: got %+v, want granted, unnamed", r)
			}
			runStatus(t, b.c, key)
			if r := keyOp(t, b.c, key, KeyArgs{Op: "slots", Names: []string{"a", "b"}}); r.Stored != 2 {
				t.Errorf("key slots over a policy that is no hash: got %+v, want stored 2", r)
			}
			// Names written by anyone: a comma, a control character, too
			// many bytes: unnamed rather than misnamed, in the reply and
			// in status.
			keyOp(t, b.c, key, KeyArgs{Op: "set", Cap: 20})
			for _, name := range []string{"a,b", "a\x1b[31m", strings.Repeat("é", 201), "ok"} {
				fields := []any{"slots", 20}
				for n := range 20 {
					fields = append(fields, fmt.Sprintf("name %d", n), name+strconv.Itoa(n))
				}
				if err := b.c.HSet(ctx, policy, fields...).Err(); err != nil {
					t.Fatal(err)
				}
				id := "N" + strconv.Itoa(len(name))
				r := runCall(t, b.c, key, id, call{n: 20, ttl: time.Minute})
				runRelease(t, b.c, key, id)
				want := []string(nil)
				if name == "ok" {
					want = []string{"ok" + strconv.Itoa(r.Slots.Numbers[0])}
				}
				if !r.Granted || !slices.Equal(r.Slots.Names, want) {
					t.Errorf("name %q: got %+v, want granted, names %q", name, r, want)
				}
				if st := runStatus(t, b.c, key); (name == "ok") != (st.SlotNames != nil) {
					t.Errorf("name %q: status names %q", name, st.SlotNames)
				}
			}
		})
	}
}

// TestSlotsAttackHoldRecord: a hold's record whose slots are not its
// weight's (anyone may have written it) gives a step under the handle no
// slots, as a holder record's would, rather than slots it never held.
func TestSlotsAttackHoldRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "atkhold"
			k := NewKeys(testPrefix, key)
			slotsOf(t, runCall(t, b.c, key, "A", call{n: 4, ttl: time.Minute}), "A")
			r, err := DecodeHold(runScript(t, b.c, k, HoldArgs{Op: "begin", ID: "A", TTL: time.Minute, Meta: []byte("{}")}))
			if err != nil || r.State != "held" || !slices.Equal(r.Slots.Numbers, []int{0}) {
				t.Fatalf("hold begin: got (%+v, %v), want held, slot 0", r, err)
			}
			for _, slots := range []string{"0,1,2", "1", "x"} {
				if err := b.c.HSet(ctx, k.HoldRecord("A"), "slots", slots).Err(); err != nil {
					t.Fatal(err)
				}
				r, err = DecodeHold(runScript(t, b.c, k, HoldArgs{Op: "renew", ID: "A", Share: "s"}))
				if err != nil || r.State != "held" {
					t.Fatalf("hold renew: got (%+v, %v), want held", r, err)
				}
				if want := []int{1}; slots == "1" && !slices.Equal(r.Slots.Numbers, want) || slots != "1" && r.Slots.Numbers != nil {
					t.Errorf("hold renew, the record's slots %q, weight 1: got slots %v, want those of weight 1 only", slots, r.Slots.Numbers)
				}
			}
		})
	}
}
