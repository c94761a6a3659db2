package localstore_test

import (
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/semaphore"
)

// A hold is one grant and, once it ends, one release, of its keeper,
// however many runs attach to it; a hold whose processes all went is one
// loss, however often it is found so.
func TestLocalHoldEvents(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 1, 1)
	attach(t, hk.st, hk.h)
	release(t, hk.l) // semrun acquire exits: the permit is the hold's
	id := statusOf(t, hk.st, hk.req.Key).Holders[0].ID
	time.Sleep(5 * time.Millisecond) // held counts whole milliseconds
	end, now, err := hk.st.EndHold(ctxTimeout(t, 5*time.Second), hk.h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || !now || end.State != semaphore.HoldReleased {
		t.Fatalf("EndHold: got (%+v, %v, %v), want it released now", end, now, err)
	}
	got := eventsOf(t, hk.st, semaphore.EventQuery{Keys: []string{hk.req.Key}})
	keeper := keeperInfo
	keeper.Hold = true
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease}) ||
		got[1].Holder != id || !reflect.DeepEqual(got[1].HolderInfo, keeper) || got[1].Token != hk.l.Token() || got[1].Held <= 0 {
		t.Errorf("events of a hold released: got %+v, want a grant, then a release by its keeper %+v, id %s, token %d, held a while", got, keeper, id, hk.l.Token())
	}

	lapsed := newHeldKey(t, 1, 1)
	abandonLast(t, lapsed.l) // its only process gone
	_, _, err = lapsed.st.Attach(ctxTimeout(t, 5*time.Second), lapsed.h, false)
	lostAs(t, "Attach to a hold whose processes are gone", err, "had gone")
	endLost(t, lapsed.st, lapsed.h, "of a hold whose processes are gone")
	got = eventsOf(t, lapsed.st, semaphore.EventQuery{Keys: []string{lapsed.req.Key}})
	if !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventLost}) || !reflect.DeepEqual(got[1].HolderInfo, keeper) ||
		!slices.Equal(got[1].Numbers, []int{0}) {
		t.Errorf("events of a hold lapsed: got %+v, want a grant, then a loss of its keeper, of slot 0", got)
	}
	if c := countsOf(t, lapsed.st, lapsed.req.Key); c.Losses != 1 || c.Held.Count() != 0 {
		t.Errorf("counts of a hold lapsed: got %+v, want 1 loss, no hold given back", c)
	}
}

func kindsOf(events []semaphore.Event) []semaphore.EventKind {
	var k []semaphore.EventKind
	for _, e := range events {
		k = append(k, e.Kind)
	}
	return k
}

// abandonLast abandons the last process of a lease, and returns once no
// process holds a lock on its files, flock or byte lock (F_OFD_GETLK asks
// for any byte): a process a parallel test forks keeps a copy of every
// descriptor until it execs, and with it the locks.
func abandonLast(t *testing.T, l semaphore.Lease) {
	t.Helper()
	var names []string
	for _, f := range l.Files() {
		names = append(names, f.Name())
	}
	abandon(l)
	for _, name := range names {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for locked(t, f) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still locked 10s after its last process closed it", name)
			}
			time.Sleep(time.Millisecond)
		}
		f.Close()
	}
}

// locked tells whether another open file holds a lock on f: a flock, or
// a byte lock on any byte.
func locked(t *testing.T, f *os.File) bool {
	t.Helper()
	fd := int(f.Fd())
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		t.Fatalf("F_OFD_GETLK %s: %v", f.Name(), err)
	}
	if lk.Type != unix.F_UNLCK {
		return true
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	_ = unix.Flock(fd, unix.LOCK_UN)
	return false
}
