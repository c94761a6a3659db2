//go:build unix

package localstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Names a policy file says are untrusted: names that are not one a slot,
// or that SetSlots would refuse, leave the slots unnamed, never
// misnamed, and the capacity stands.
func TestLocalSlotNamesReadBackChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	bad := map[string]string{
		"fewer than the capacity": `["a","b"]`,
		"more than the capacity":  `["a","b","c","d"]`,
		"a name twice":            `["a","b","a"]`,
		"a comma":                 `["a","b,c","d"]`,
		"a control character":     `["a","b\u0007","c"]`,
		"an empty name":           `["a","","c"]`,
		"a name too long":         `["a","b","` + strings.Repeat("x", semaphore.MaxSlotName+1) + `"]`,
	}
	for what, names := range bad {
		key := "k" + strings.ReplaceAll(what, " ", "-")
		operated(t, "SetSlots", st.SetSlots(ctxTimeout(t, 5*time.Second), key, []string{"x", "y", "z"}))
		policy := `{"v":1,"capacity":3,"slot_names":` + names + "}\n"
		if err := os.WriteFile(filepath.Join(dir, key, "policy"), []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 9, TTL: time.Second})
		if got := l.Slots(); !slices.Equal(got.Numbers, []int{0}) || got.Names != nil {
			t.Errorf("a grant of a key whose policy names %s: got %+v, want slot 0, unnamed", what, got)
		}
		s := statusOf(t, st, key)
		if s.StoredCapacity != 3 || s.SlotNames != nil || len(s.Holders) != 1 || s.Holders[0].Names != nil {
			t.Errorf("Status of a key whose policy names %s: got capacity %d, names %q, holders %+v; want 3, none, one unnamed", what, s.StoredCapacity, s.SlotNames, s.Holders)
		}
		release(t, l)
	}
	// Names without a stored capacity are no key's.
	key := "no-capacity"
	operated(t, "SetSlots", st.SetSlots(ctxTimeout(t, 5*time.Second), key, []string{"x"}))
	if err := os.WriteFile(filepath.Join(dir, key, "policy"), []byte(`{"v":1,"slot_names":["x"]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	if got := l.Slots(); !slices.Equal(got.Numbers, []int{0}) || got.Names != nil {
		t.Errorf("a grant of a key whose policy names slots without a capacity: got %+v, want slot 0, unnamed", got)
	}
	release(t, l)
}

// operated fails t when an operator's call failed.
func operated(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// The most and longest names a key may have, all held by one grant with
// a min hold: its cooling, whose record keeps them only up to a bound,
// stays readable and keeps every permit, and a hold of them can be made.
func TestLocalManyLongSlotNamesStillCool(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	key := uniqueKey(t)
	names := make([]string, semaphore.MaxSlots)
	for i := range names {
		names[i] = fmt.Sprintf("%04d", i) + strings.Repeat("é", semaphore.MaxSlotName-4)
	}
	operated(t, "SetSlots", st.SetSlots(ctxTimeout(t, 5*time.Second), key, names))
	if s := statusOf(t, st, key); !slices.Equal(s.SlotNames, names) {
		t.Fatalf("Status: got %d slot names, want the %d set", len(s.SlotNames), len(names))
	}
	req := semaphore.Request{Key: key, Permits: semaphore.MaxSlots, Weight: semaphore.MaxSlots, TTL: time.Second, MinHold: time.Minute} // a min hold no load outlasts
	l := acquire(t, st, req)
	if got := l.Slots(); len(got.Numbers) != semaphore.MaxSlots || !slices.Equal(got.Names, names) {
		t.Fatalf("the grant of every slot: got %d slots, %d names; want %d of each, the names set", len(got.Numbers), len(got.Names), semaphore.MaxSlots)
	}
	if err := l.Finish(ctxTimeout(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	s := statusOf(t, st, key)
	if len(s.Cooling) != 1 || s.Held != semaphore.MaxSlots || len(s.Cooling[0].Numbers) != semaphore.MaxSlots {
		t.Fatalf("Status once it cools: got %d held, coolings %d; want every permit cooling, its slots shown", s.Held, len(s.Cooling))
	}
	one := semaphore.Request{Key: key, Permits: semaphore.MaxSlots, TTL: time.Second, NoWait: true}
	if _, err := acquireFor(t, st, 5*time.Second, one); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire while every permit cools: got %v, want ErrBusy", err)
	}

	other := uniqueKey(t)
	operated(t, "SetSlots", st.SetSlots(ctxTimeout(t, 5*time.Second), other, names))
	req.Key, req.MinHold = other, 0
	h := acquire(t, st, req)
	handle, err := st.Hold(ctxTimeout(t, 5*time.Second), h, semaphore.HolderInfo{Host: "h"})
	if err != nil {
		t.Fatalf("Hold of every slot: %v", err)
	}
	k, info, err := st.Attach(ctxTimeout(t, 5*time.Second), handle, true)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer release(t, k)
	abandon(h)
	if len(info.Slots.Numbers) != semaphore.MaxSlots {
		t.Errorf("HoldInfo of a hold of every slot: got %d slots, want %d", len(info.Slots.Numbers), semaphore.MaxSlots)
	}
}
