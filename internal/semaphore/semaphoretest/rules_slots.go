package semaphoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// slotRules are the rules of which permit a grant holds (semaphore.Slots),
// which every store runs: a slot is a permit, held by one holder at a
// time, the lowest free taken first.
var slotRules = []rule{
	{"SlotsLowestFreeFirst", ruleSlotsLowestFreeFirst},
	{"SlotsOfAWeight", ruleSlotsOfAWeight},
	{"SlotsNeverShared", ruleSlotsNeverShared},
	{"SlotOfAVanishedHolderHandedOn", ruleSlotOfAVanishedHolderHandedOn},
	{"SlotKeptWhileCooling", ruleSlotKeptWhileCooling},
	{"SlotsBelowALoweredCapacity", ruleSlotsBelowALoweredCapacity},
	{"SlotsNamed", ruleSlotsNamed},
	{"SlotNamesRefused", ruleSlotNamesRefused},
	{"SlotsOfAHold", ruleSlotsOfAHold},
	{"SlotsInEvents", ruleSlotsInEvents},
	{"SlotsOfSeveralKeys", ruleSlotsOfSeveralKeys},
	{"NoSlotsPastMaxSlots", ruleNoSlotsPastMaxSlots},
}

// slotsAre fails t unless got are the slots numbers want, named names
// (nil: unnamed).
func slotsAre(t *testing.T, what string, got semaphore.Slots, want []int, names []string) {
	t.Helper()
	if !slices.Equal(got.Numbers, want) || !slices.Equal(got.Names, names) || (names == nil) != (got.Names == nil) {
		t.Fatalf("%s: got slots %v named %q, want %v named %q", what, got.Numbers, got.Names, want, names)
	}
}

// leaseSlots fails t unless the lease l holds the slots want, named names.
func leaseSlots(t *testing.T, what string, l semaphore.Lease, want []int, names []string) {
	t.Helper()
	slotsAre(t, what, l.Slots(), want, names)
}

// holderOf is key's holder whose token is token, as Status shows it;
// t fails when there is none.
func holderOf(t *testing.T, st semaphore.Store, key string, token int64) semaphore.Holder {
	t.Helper()
	s := StatusOf(t, st, key)
	for _, h := range s.Holders {
		if h.Token == token {
			return h
		}
	}
	t.Fatalf("Status of %s: got holders %+v, want one of token %d", key, s.Holders, token)
	return semaphore.Holder{}
}

// ruleSlotsLowestFreeFirst: each grant holds the lowest slot free, and a
// slot given back is the next one taken.
func ruleSlotsLowestFreeFirst(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second}
	a := Hold(t, st, req)
	leaseSlots(t, "the first grant", a, []int{0}, nil)
	b := Hold(t, st, req)
	leaseSlots(t, "the second grant", b, []int{1}, nil)
	Release(t, a)
	c := Hold(t, st, req)
	leaseSlots(t, "a grant once slot 0 was given back", c, []int{0}, nil)
	d := Hold(t, st, req)
	leaseSlots(t, "a grant with slots 0 and 1 held", d, []int{2}, nil)
	if got := holderOf(t, st, key, b.Token()).Slots; !slices.Equal(got.Numbers, []int{1}) {
		t.Errorf("Status of the second holder: got slots %v, want [1]", got.Numbers)
	}
	if got := b.Slots(); !slices.Equal(got.Numbers, []int{1}) {
		t.Errorf("the second grant's slots after others came and went: got %v, want [1]", got.Numbers)
	}
}

// ruleSlotsOfAWeight: a grant of weight K holds K slots, the lowest free,
// in increasing order.
func ruleSlotsOfAWeight(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 4, Weight: 2, TTL: 10 * time.Second}
	a := Hold(t, st, req)
	leaseSlots(t, "the first grant of weight 2 of 4", a, []int{0, 1}, nil)
	b := Hold(t, st, req)
	leaseSlots(t, "the second grant of weight 2 of 4", b, []int{2, 3}, nil)
	for _, l := range []semaphore.Lease{a, b} {
		if got, want := holderOf(t, st, key, l.Token()).Slots.Numbers, l.Slots().Numbers; !slices.Equal(got, want) {
			t.Errorf("Status of a holder of weight 2: got slots %v, want its grant's %v", got, want)
		}
	}
	Release(t, a)
	one := Hold(t, st, semaphore.Request{Key: key, Permits: 4, TTL: 10 * time.Second})
	leaseSlots(t, "a grant of weight 1 once slots 0 and 1 were given back", one, []int{0}, nil)
}

// ruleSlotsNeverShared: callers from stores of their own, of weights 1
// and 2, taking a key of 3 permits in turn: while each holds, no other
// holds any of its slots (as the callers themselves note them: a slot on
// the grant, cleared before the release), every slot is below 3, and a
// grant holds as many slots as its weight.
func ruleSlotsNeverShared(t *testing.T, b *Backend, _ semaphore.Store) {
	key := UniqueKey(t)
	const n, callers, rounds = 3, 9, 4
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	holder := map[int]int{} // slot -> caller holding it, as the callers note it
	granted := 0
	var wg sync.WaitGroup
	for c := range callers {
		st := b.Open(nil)
		weight := 1 + c%2
		wg.Go(func() {
			for range rounds {
				l, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: n, Weight: weight, TTL: 10 * time.Second})
				if err != nil {
					t.Errorf("caller %d: got %v, want a permit", c, err)
					return
				}
				slots := l.Slots().Numbers
				mu.Lock()
				granted++
				if len(slots) != weight {
					t.Errorf("caller %d of weight %d: got slots %v, want %d of them", c, weight, slots, weight)
				}
				for _, s := range slots {
					if s < 0 || s >= n {
						t.Errorf("caller %d: got slot %d, want one from 0 to %d", c, s, n-1)
					}
					if other, taken := holder[s]; taken {
						t.Errorf("caller %d: granted slot %d, which caller %d holds", c, s, other)
					}
					holder[s] = c
				}
				mu.Unlock()
				time.Sleep(3 * time.Millisecond)
				mu.Lock()
				for _, s := range slots {
					if holder[s] == c {
						delete(holder, s)
					}
				}
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Errorf("caller %d: release: %v", c, err)
				}
			}
		})
	}
	wg.Wait()
	if granted != callers*rounds {
		t.Errorf("granted %d times, want %d", granted, callers*rounds)
	}
}

// ruleSlotOfAVanishedHolderHandedOn: the slot of a holder that vanished
// (its process gone, its lease lapsed) is the next one granted, once its
// permit is free; the others' stay theirs.
func ruleSlotOfAVanishedHolderHandedOn(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	gone := Acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: crashTTL})
	leaseSlots(t, "the holder that will vanish", gone, []int{0}, nil)
	stays := Hold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second})
	leaseSlots(t, "the holder that stays", stays, []int{1}, nil)
	abandon(gone)
	next := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, NoWait: true}
	var got semaphore.Lease
	WaitFor(t, 4*pastCrash, "a no-wait Acquire granted once the holder vanished", func() bool {
		if err := stays.Renew(Context(t, 5*time.Second)); err != nil {
			t.Fatalf("the holder that stays: renew: %v", err)
		}
		l, err := AcquireWithin(t, st, 5*time.Second, next)
		if err != nil && !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("no-wait Acquire once the holder vanished: got %v, want a permit or ErrBusy", err)
		}
		got = l
		return l != nil
	})
	defer Release(t, got)
	leaseSlots(t, "the grant after the holder vanished", got, []int{0}, nil)
	leaseSlots(t, "the holder that stays, after", stays, []int{1}, nil)
}

// ruleSlotKeptWhileCooling: a cooling permit keeps its slot: no grant
// takes it until the cooling ends, and status shows it the cooling's.
func ruleSlotKeptWhileCooling(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const minHold = 3 * time.Second
	start := time.Now() // no later than the grant
	a := Acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, MinHold: minHold})
	leaseSlots(t, "the grant that will cool", a, []int{0}, nil)
	if err := a.Finish(Context(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	s := StatusOf(t, st, key)
	if len(s.Cooling) != 1 {
		t.Fatalf("Status once the permit cools: got %+v, want one cooling", s)
	}
	slotsAre(t, "the cooling in Status", s.Cooling[0].Slots, []int{0}, nil)
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}
	b := Hold(t, st, req)
	if time.Since(start) >= minHold-coolSlack {
		t.Skip("the cooling ended before the next grant (a loaded machine): the rule proved nothing")
	}
	leaseSlots(t, "a grant while slot 0 cools", b, []int{1}, nil)
	busyNow(t, st, req, "with one permit cooling and one held")
	if s := StatusOf(t, st, key); time.Since(start) < minHold-coolSlack && (len(s.Cooling) != 1 || len(s.Holders) != 1) {
		t.Fatalf("Status with slot 0 cooling, slot 1 held: got %+v, want one cooling, one holder", s)
	}
	Release(t, b)
	var got semaphore.Lease
	WaitFor(t, minHold+10*time.Second, "a no-wait Acquire of slot 0 once the cooling ended", func() bool {
		req.NoWait = true
		l, err := AcquireWithin(t, st, 5*time.Second, req)
		if err != nil {
			if !errors.Is(err, semaphore.ErrBusy) {
				t.Fatalf("no-wait Acquire while waiting for the cooling to end: got %v, want a permit or ErrBusy", err)
			}
			return false
		}
		if slices.Equal(l.Slots().Numbers, []int{0}) {
			got = l
			return true
		}
		if s := StatusOf(t, st, key); len(s.Cooling) == 1 && !slices.Equal(l.Slots().Numbers, []int{1}) {
			t.Fatalf("a grant while slot 0 cools: got slots %v, want [1]", l.Slots().Numbers)
		}
		Release(t, l)
		return false
	})
	Release(t, got)
}

// ruleSlotsBelowALoweredCapacity: a capacity lowered below a held slot
// leaves its holder alone, its slot its own; new grants take only slots
// below the capacity.
func ruleSlotsBelowALoweredCapacity(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second}
	var ls []semaphore.Lease
	for i := range 3 {
		l := Hold(t, st, req)
		leaseSlots(t, fmt.Sprintf("grant %d of 3", i), l, []int{i}, nil)
		ls = append(ls, l)
	}
	operated(t, "SetCapacity(2) below a held slot", st.SetCapacity(Context(t, 5*time.Second), key, 2))
	if got := holderOf(t, st, key, ls[2].Token()).Slots.Numbers; !slices.Equal(got, []int{2}) {
		t.Fatalf("Status of the holder of slot 2 once the capacity is 2: got slots %v, want [2]", got)
	}
	Release(t, ls[0])
	Release(t, ls[1])
	d := Hold(t, st, req)
	leaseSlots(t, "a grant of capacity 2 beside the holder of slot 2", d, []int{0}, nil)
	busyNow(t, st, req, "of capacity 2, held by the holders of slots 0 and 2")
	if err := ls[2].Renew(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("the holder of slot 2 once the capacity is 2: renew: %v", err)
	}
	leaseSlots(t, "the holder of slot 2 once the capacity is 2", ls[2], []int{2}, nil)
	Release(t, ls[2])
	e := Hold(t, st, req)
	leaseSlots(t, "a grant of capacity 2 once slot 2 was given back", e, []int{1}, nil)
	busyNow(t, st, req, "of capacity 2, both held")
}

// ruleSlotsNamed: named slots (SetSlots) set the capacity, status shows
// their names, and every grant carries the names of its slots, as status
// shows its holder; SetCapacity, and unsetting it, drop the names.
func ruleSlotsNamed(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 20*time.Second)
	names := []string{"gpu-a", "gpu b", "GPU ü"}
	operated(t, "SetSlots of a key never used", st.SetSlots(ctx, key, names))
	if s := StatusOf(t, st, key); s.StoredCapacity != 3 || !slices.Equal(s.SlotNames, names) {
		t.Fatalf("Status once its slots are named: got stored capacity %d, slot names %q; want 3, %q", s.StoredCapacity, s.SlotNames, names)
	}
	a := Hold(t, st, semaphore.Request{Key: key, Permits: 8, TTL: 10 * time.Second})
	leaseSlots(t, "the first grant of named slots", a, []int{0}, names[:1])
	b := Hold(t, st, semaphore.Request{Key: key, Permits: 8, Weight: 2, TTL: 10 * time.Second})
	leaseSlots(t, "a grant of weight 2 of named slots", b, []int{1, 2}, names[1:])
	for _, l := range []semaphore.Lease{a, b} {
		got := holderOf(t, st, key, l.Token()).Slots
		slotsAre(t, "Status of a holder of named slots", got, l.Slots().Numbers, l.Slots().Names)
	}
	busyNow(t, st, semaphore.Request{Key: key, Permits: 8, TTL: 10 * time.Second}, "with its 3 named slots held")
	Release(t, a)
	Release(t, b)

	// As many as the names: what is dropped is the names, not those past
	// the capacity.
	operated(t, "SetCapacity(3) of a key with 3 named slots", st.SetCapacity(ctx, key, 3))
	if s := StatusOf(t, st, key); s.StoredCapacity != 3 || s.SlotNames != nil {
		t.Fatalf("Status once SetCapacity(3): got stored capacity %d, slot names %q; want 3, none", s.StoredCapacity, s.SlotNames)
	}
	c := Hold(t, st, semaphore.Request{Key: key, Permits: 8, TTL: 10 * time.Second})
	leaseSlots(t, "a grant once SetCapacity dropped the names", c, []int{0}, nil)
	Release(t, c)

	operated(t, "SetSlots again", st.SetSlots(ctx, key, names[:2]))
	if s := StatusOf(t, st, key); s.StoredCapacity != 2 || !slices.Equal(s.SlotNames, names[:2]) {
		t.Fatalf("Status once named again: got stored capacity %d, slot names %q; want 2, %q", s.StoredCapacity, s.SlotNames, names[:2])
	}
	operated(t, "SetCapacity(0), unset", st.SetCapacity(ctx, key, 0))
	if s := StatusOf(t, st, key); s.StoredCapacity != 0 || s.SlotNames != nil {
		t.Fatalf("Status once unset: got stored capacity %d, slot names %q; want none, none", s.StoredCapacity, s.SlotNames)
	}
	d := Hold(t, st, semaphore.Request{Key: key, Permits: 8, TTL: 10 * time.Second})
	leaseSlots(t, "a grant once the capacity was unset", d, []int{0}, nil)
}

// ruleSlotNamesRefused: names no store keeps are refused with a
// *SettingError, by CheckSlotNames and by SetSlots, which then changes
// nothing.
func ruleSlotNamesRefused(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	ctx := Context(t, 20*time.Second)
	many := make([]string, semaphore.MaxSlots+1)
	for i := range many {
		many[i] = fmt.Sprint("s", i)
	}
	bad := map[string][]string{
		"none":             nil,
		"an empty name":    {"a", ""},
		"a comma":          {"a,b"},
		"a name twice":     {"a", "b", "a"},
		"a name too long":  {strings.Repeat("x", semaphore.MaxSlotName+1)},
		"a newline":        {"a\nb"},
		"a control":        {"a\x00"},
		"invalid UTF-8":    {"a\xff"},
		"too many names":   many,
		"a tab":            {"a\tb"},
		"a line separator": {"a\u2028b"},
	}
	for what, names := range bad {
		var se *semaphore.SettingError
		if err := semaphore.CheckSlotNames(names); !errors.As(err, &se) {
			t.Errorf("CheckSlotNames with %s: got %v, want a *SettingError", what, err)
		}
		if err := st.SetSlots(ctx, key, names); !errors.As(err, &se) {
			t.Errorf("SetSlots with %s: got %v, want a *SettingError", what, err)
		}
	}
	good := [][]string{{"a"}, {strings.Repeat("é", semaphore.MaxSlotName)}, many[:semaphore.MaxSlots]}
	for _, names := range good {
		if err := semaphore.CheckSlotNames(names); err != nil {
			t.Errorf("CheckSlotNames of %d names, the first %d characters long: got %v, want nil", len(names), len(names[0]), err)
		}
	}
	if s := StatusOf(t, st, key); s.StoredCapacity != 0 || s.SlotNames != nil {
		t.Errorf("Status once every SetSlots was refused: got stored capacity %d, slot names %q; want none", s.StoredCapacity, s.SlotNames)
	}
}

// ruleSlotsOfAHold: a hold holds its grant's slots, and every process
// attached to it is told them, named, as is status of its keeper.
func ruleSlotsOfAHold(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	names := []string{"one", "two", "three"}
	operated(t, "SetSlots", st.SetSlots(Context(t, 5*time.Second), key, names))
	first := Hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second})
	leaseSlots(t, "the grant before the hold", first, []int{0}, names[:1])
	l := Acquire(t, st, semaphore.Request{Key: key, Permits: 3, Weight: 2, TTL: 10 * time.Second})
	leaseSlots(t, "the grant made a hold", l, []int{1, 2}, names[1:])
	h, err := st.Hold(Context(t, 5*time.Second), l, keeper)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	k, info, err := st.Attach(Context(t, 5*time.Second), h, true)
	if err != nil {
		t.Fatalf("Attach as the keeper: %v", err)
	}
	t.Cleanup(func() { _ = k.Release(Context(t, 5*time.Second)) })
	abandon(l)
	slotsAre(t, "HoldInfo of the keeper", info.Slots, []int{1, 2}, names[1:])
	leaseSlots(t, "the keeper's lease", k, []int{1, 2}, names[1:])
	Release(t, first) // slot 0 free: no step of the hold moves
	for step := range 2 {
		run, info, err := st.Attach(Context(t, 5*time.Second), h, false)
		if err != nil {
			t.Fatalf("Attach step %d: %v", step, err)
		}
		slotsAre(t, fmt.Sprintf("HoldInfo of step %d", step), info.Slots, []int{1, 2}, names[1:])
		leaseSlots(t, fmt.Sprintf("the lease of step %d", step), run, []int{1, 2}, names[1:])
		Release(t, run)
	}
	got := holderOf(t, st, key, k.Token()).Slots
	slotsAre(t, "Status of the hold's keeper", got, []int{1, 2}, names[1:])
}

// ruleSlotsInEvents: the events of a holder say its slots: its grant,
// release and revoke.
func ruleSlotsInEvents(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 4, TTL: 10 * time.Second}
	first := Hold(t, st, req)
	two := req
	two.Weight = 2
	l := Acquire(t, st, two)
	leaseSlots(t, "the grant of weight 2", l, []int{1, 2}, nil)
	Release(t, l)
	r := Hold(t, st, req)
	leaseSlots(t, "the grant to be revoked", r, []int{1}, nil)
	id := holderOf(t, st, key, r.Token()).ID
	operated(t, "Revoke", st.Revoke(Context(t, 5*time.Second), key, id, "slots", false))
	want := []struct {
		kind  semaphore.EventKind
		token int64
		slots []int
	}{
		{semaphore.EventGrant, first.Token(), []int{0}},
		{semaphore.EventGrant, l.Token(), []int{1, 2}},
		{semaphore.EventRelease, l.Token(), []int{1, 2}},
		{semaphore.EventGrant, r.Token(), []int{1}},
		{semaphore.EventRevoke, 0, []int{1}},
	}
	var got []semaphore.Event
	WaitFor(t, 10*time.Second, "every event logged", func() bool {
		got = EventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
		return len(got) >= len(want)
	})
	if len(got) != len(want) {
		t.Fatalf("events: got %d (%v), want %d", len(got), kinds(got), len(want))
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.kind || (w.token != 0 && e.Token != w.token) || !slices.Equal(e.Numbers, w.slots) {
			t.Errorf("event %d: got %s of token %d, slots %v; want %s of token %d, slots %v", i, e.Kind, e.Token, e.Numbers, w.kind, w.token, w.slots)
		}
	}
}

// ruleSlotsOfSeveralKeys: a grant of several keys in one step holds
// slots of each key, each key's lease its own.
func ruleSlotsOfSeveralKeys(t *testing.T, _ *Backend, st semaphore.Store) {
	all, ok := st.(semaphore.AllAtOnce)
	if !ok {
		t.Skipf("%T grants no several keys in one step", st)
	}
	base := UniqueKey(t)
	a, c := base+"-a", base+"-b"
	Hold(t, st, semaphore.Request{Key: a, Permits: 3, TTL: 10 * time.Second})
	reqs := several(3, true, a, c)
	reqs[1].Weight = 2
	l, err := all.AcquireAll(Context(t, 10*time.Second), reqs)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	defer Release(t, l)
	sev, ok := l.(*semaphore.Several)
	if !ok {
		t.Fatalf("AcquireAll: got a %T, want a *semaphore.Several", l)
	}
	ls := sev.Leases()
	leaseSlots(t, "key "+a+"'s lease, slot 0 held by another", ls[0], []int{1}, nil)
	leaseSlots(t, "key "+c+"'s lease, of weight 2", ls[1], []int{0, 1}, nil)
	leaseSlots(t, "the grant of both", l, []int{1}, nil)
	if got := holderOf(t, st, c, ls[1].Token()).Slots.Numbers; !slices.Equal(got, []int{0, 1}) {
		t.Errorf("Status of %s's holder: got slots %v, want [0 1]", c, got)
	}
}

// ruleNoSlotsPastMaxSlots: a key of more than MaxSlots permits numbers
// none; one of MaxSlots does.
func ruleNoSlotsPastMaxSlots(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	l := Hold(t, st, semaphore.Request{Key: key, Permits: semaphore.MaxSlots + 1, Weight: 2, TTL: 10 * time.Second})
	if got := l.Slots(); len(got.Numbers) != 0 || len(got.Names) != 0 {
		t.Errorf("a grant of a key of %d permits: got slots %+v, want none", semaphore.MaxSlots+1, got)
	}
	if got := holderOf(t, st, key, l.Token()).Slots; len(got.Numbers) != 0 {
		t.Errorf("Status of a holder of a key of %d permits: got slots %+v, want none", semaphore.MaxSlots+1, got)
	}
	other := UniqueKey(t)
	m := Hold(t, st, semaphore.Request{Key: other, Permits: semaphore.MaxSlots, TTL: 10 * time.Second})
	leaseSlots(t, fmt.Sprintf("a grant of a key of %d permits", semaphore.MaxSlots), m, []int{0}, nil)
}
