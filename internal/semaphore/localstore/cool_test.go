//go:build unix

package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// plantCooling writes a cooling's file in the key's directory kd, as a
// member of the group could, whatever it says.
func plantCooling(t *testing.T, kd, name, body string) string {
	t.Helper()
	path := filepath.Join(kd, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	return path
}

// coolingBody is a cooling's file that says it ends at ends.
func coolingBody(ends time.Time, weight int) string {
	return fmt.Sprintf(`{"host":"elsewhere","pid":1,"command":"planted","permits":%d,"weight":%d,"token":1,"since_ms":1,"ends_ms":%d,"exit_status":9}`+"\n",
		weight, weight, ends.UnixMilli())
}

// Cooling files are anyone's in the group to write: those that are no
// cooling's, or end further off than the longest min hold, are skipped
// with a warning, never fatal; those that ended are removed by whoever
// finds them, as are, by status, drafts a releaser that died left.
func TestLocalCoolingFilesAreUntrusted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warned semaphoretest.Warnings
	st := newLocal(t, dir, warned.Warnf)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req))
	kd := filepath.Join(dir, key)

	now := time.Now()
	skipped := []string{
		plantCooling(t, kd, "cool.garbage", "not json at all"),
		plantCooling(t, kd, "cool.absurd", coolingBody(now.Add(semaphore.MaxMinHold+time.Hour), 1)),
		plantCooling(t, kd, "cool.noweight", coolingBody(now.Add(time.Hour), 0)),
		plantCooling(t, kd, "cool.huge", strings.Repeat(" ", 1<<20)),
	}
	fifo := filepath.Join(kd, "cool.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo %s: %v", fifo, err)
	}
	skipped = append(skipped, fifo)
	ended := plantCooling(t, kd, "cool.ended", coolingBody(now.Add(-time.Second), 1))
	draft := plantCooling(t, kd, "cool-draft.left", "{")
	then := now.Add(-time.Hour)
	if err := os.Chtimes(draft, then, then); err != nil {
		t.Fatalf("chtimes %s: %v", draft, err)
	}

	s := statusOf(t, st, key)
	if s.Held != 0 || len(s.Cooling) != 0 {
		t.Errorf("Status with only bad and ended coolings: got %+v, want nothing held, no cooling", s)
	}
	lines := warned.Take()
	for _, path := range skipped {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "skipped ") && strings.Contains(l, path) }) {
			t.Errorf("warnings from Status: got %q, want one that skips %s", lines, path)
		}
	}
	for _, path := range []string{ended, draft} {
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Status: got %v, want it removed", filepath.Base(path), err)
		}
	}

	plantCooling(t, kd, "cool.ended2", coolingBody(time.Now().Add(-time.Second), 1))
	l := acquire(t, st, req)
	if _, err := os.Lstat(filepath.Join(kd, "cool.ended2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cooling that ended, after a grant: got %v, want it removed", err)
	}
	release(t, l)
	for _, path := range skipped {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s, which is no cooling's: got %v, want it left alone", path, err)
		}
	}

	// One that is a cooling's counts, whoever wrote it.
	live := plantCooling(t, kd, "cool.live", coolingBody(time.Now().Add(time.Hour), 1))
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire with a cooling planted: got (%v, %v), want ErrBusy", l, err)
	}
	s = statusOf(t, st, key)
	if s.Held != 1 || len(s.Cooling) != 1 || s.Cooling[0].Command != "planted" || s.Cooling[0].ExitStatus != 9 {
		t.Errorf("Status with a cooling planted: got %+v, want it held by that cooling, exit status 9", s)
	}
	if err := os.Remove(live); err != nil {
		t.Fatal(err)
	}
	release(t, acquire(t, st, req))
}

// A key's directory is kept while a permit cools, however long unused.
func TestLocalCoolingKeepsKeyDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, MinHold: time.Hour})
	if err := l.Finish(ctxTimeout(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	age(t, filepath.Join(dir, key), semaphore.EventLife+time.Minute)
	status, err := st.Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if len(status) != 1 || status[0].Key != key || len(status[0].Cooling) != 1 {
		t.Errorf("Status of every key with one cooling, unused for long: got %+v, want that key, cooling", status)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{key}) {
		t.Errorf("entries of the lock directory: got %q, want the cooling key's", got)
	}
}

// Many callers, in three stores (as processes would be), take the one
// permit of a key and give it back, most with a min hold, in a rush:
// none is ever granted while another holds it or it cools. The grants
// are told apart in order by their tokens.
func TestLocalCoolingNeverLetsTwoHold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stores := []semaphore.Store{newLocal(t, dir, nil), newLocal(t, dir, nil), newLocal(t, dir, nil)}
	key := uniqueKey(t)
	type grant struct {
		token, since int64 // since: the grant, in wall-clock ms
		// got: once Acquire returned; finish: before Finish was called.
		got, finish time.Time
		minHold     time.Duration
	}
	var (
		mu     sync.Mutex
		grants []grant
		failed []error
		wg     sync.WaitGroup
	)
	// Two seconds at least, and on a loaded host until there are grants
	// enough to mean something, within a bound.
	enough, deadline := time.Now().Add(2*time.Second), time.Now().Add(30*time.Second)
	var counted, cooling atomic.Int64
	more := func() bool {
		now := time.Now()
		return now.Before(deadline) && (now.Before(enough) || counted.Load() < 40 || cooling.Load() < 4)
	}
	for w := range 8 {
		wg.Go(func() {
			st := stores[w%len(stores)]
			for more() {
				minHold := []time.Duration{0, 3 * time.Millisecond, 10 * time.Millisecond}[rand.IntN(3)]
				req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, MinHold: minHold, NoWait: w%4 != 0}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				l, err := st.Acquire(ctx, req)
				got := time.Now()
				cancel()
				if err != nil {
					if !errors.Is(err, semaphore.ErrBusy) && !errors.Is(err, context.DeadlineExceeded) {
						mu.Lock()
						failed = append(failed, err)
						mu.Unlock()
					}
					continue
				}
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				finish := time.Now()
				if err := l.Finish(context.Background(), 0); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
				mu.Lock()
				grants = append(grants, grant{l.Token(), localstore.GrantedMS(l), got, finish, minHold})
				mu.Unlock()
				counted.Add(1)
				if finish.UnixMilli() < localstore.GrantedMS(l)+minHold.Milliseconds() {
					cooling.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("Acquire or Finish: got %v, want a permit, ErrBusy or the deadline", failed)
	}
	slices.SortFunc(grants, func(a, b grant) int { return int(a.token - b.token) })
	cooled := 0
	for i, a := range grants {
		// The permit was taken from a's grant until a.finish at least,
		// and until its min hold after its grant, in whole milliseconds
		// as the store counts, at least; a later grant is no later than
		// it says.
		until := a.since + a.minHold.Milliseconds()
		if a.finish.UnixMilli() < until {
			cooled++
		}
		for _, b := range grants[i+1:] {
			if b.got.Before(a.finish) || b.since < until {
				t.Errorf("grant %d came %dms after grant %d, which was finished %v after, with a min hold of %v: want no grant while it held or cooled",
					b.token, b.since-a.since, a.token, a.finish.Sub(time.UnixMilli(a.since)), a.minHold)
			}
		}
	}
	if len(grants) < 20 || cooled == 0 {
		t.Errorf("grants: %d, of which cooled: %d; want at least 20, some cooled, for the test to mean something", len(grants), cooled)
	}
	t.Logf("%d grants, %d cooled", len(grants), cooled)
	waitFor(t, 10*time.Second, "the last cooling ended", func() bool {
		s := statusOf(t, stores[0], key)
		return s.Held == 0 && len(s.Cooling) == 0
	})
}

// A holder with a min hold that is killed while it holds, before it could
// give its permit back, leaves it cooling until its min hold after its
// grant, its command's status unknown: the once-a-night job does not run
// twice. While it held, its cooling did not count besides its permit.
func TestLocalKilledHolderCools(t *testing.T) {
	t.Parallel()
	const minHold = 4 * time.Second
	dir := t.TempDir()
	key := uniqueKey(t)
	start := time.Now() // no later than the grant
	child := startHolder(t, dir, key, helperMinHoldEnv+"="+minHold.String())
	st := newLocal(t, dir, nil)

	if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || len(s.Cooling) != 0 {
		t.Errorf("Status while the holder with a min hold holds: got %+v, want 1 held, by it, no cooling", s)
	}
	child.kill(t)
	busy := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	if l, err := acquireFor(t, st, 5*time.Second, busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire right after the holder was killed: got (%v, %v), want ErrBusy: its permit cools", l, err)
	}
	s := statusOf(t, st, key)
	if s.Held != 1 || len(s.Holders) != 0 || len(s.Cooling) != 1 {
		t.Fatalf("Status once the holder was killed: got %+v, want 1 held, no holder, one cooling", s)
	}
	if c := s.Cooling[0]; c.ExitStatus != -1 || c.EndsIn > minHold || c.EndsIn <= 0 || c.PID != child.cmd.Process.Pid {
		t.Errorf("cooling of the killed holder: got %+v, want its pid %d, exit status -1, ending within %v", c, child.cmd.Process.Pid, minHold)
	}

	var got semaphore.Lease
	waitFor(t, minHold+10*time.Second, "a no-wait Acquire granted once the cooling ended", func() bool {
		l, err := acquireFor(t, st, 5*time.Second, busy)
		if err != nil && !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("no-wait Acquire while the killed holder's permit cools: got %v, want a permit or ErrBusy", err)
		}
		got = l
		return l != nil
	})
	if since := time.Since(start); since < minHold-50*time.Millisecond {
		t.Errorf("granted %v after the killed holder's grant, want no sooner than its min hold, %v", since, minHold)
	}
	release(t, got)
}

// A cooling whose holder is gone keeps the very permits it held: taken
// by another, they would make it look held by its holder still, and the
// next caller would be granted past N. Its holder gone as a process that
// exits, its files closed, between two others.
func TestLocalCoolingKeepsItsPermits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 3, TTL: time.Second, NoWait: true}
	cooled := req
	cooled.MinHold = time.Hour
	a := acquire(t, st, cooled)
	b := acquire(t, st, req)
	abandon(a)
	// A process another parallel test forked keeps a copy of a's files
	// until it execs, and with it a's lock: a cools once the last copy
	// is closed.
	for deadline := time.Now().Add(10 * time.Second); len(statusOf(t, st, key).Cooling) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("a's permit not cooling 10s after its files were closed")
		}
		time.Sleep(time.Millisecond)
	}
	c := acquire(t, st, req)
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire with 2 of 3 permits held and 1 cooling: got (%v, %v), want ErrBusy", l, err)
	}
	if s := statusOf(t, st, key); s.Held != 3 || len(s.Holders) != 2 || len(s.Cooling) != 1 || s.Cooling[0].ExitStatus != -1 {
		t.Errorf("Status with 2 holders and the permit of a gone one cooling: got %+v, want 3 held, 2 holders, 1 cooling, status unknown", s)
	}
	release(t, b)
	release(t, c)
	if s := statusOf(t, st, key); s.Held != 1 || len(s.Cooling) != 1 {
		t.Errorf("Status with only the cooling left: got %+v, want it alone", s)
	}
}

// A release owes no cooling with CoolAfterSuccess after a failure, nor
// once the min hold passed, nor when no command ran: its pending cooling
// is gone with it, and nothing of it is left in the key's directory.
func TestLocalReleaseLeavesNoCoolingItOwesNot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, c := range []struct {
		name    string
		minHold time.Duration
		after   semaphore.CoolAfter
		back    func(semaphore.Lease) error
	}{
		{"Finish 1 with success", time.Hour, semaphore.CoolAfterSuccess, func(l semaphore.Lease) error { return l.Finish(ctx, 1) }},
		{"Finish 0 past the min hold", time.Millisecond, semaphore.CoolAfterAny, func(l semaphore.Lease) error {
			time.Sleep(5 * time.Millisecond)
			return l.Finish(ctx, 0)
		}},
		{"Release", time.Hour, semaphore.CoolAfterAny, func(l semaphore.Lease) error { return l.Release(ctx) }},
	} {
		l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, MinHold: c.minHold, MinHoldAfter: c.after})
		if names := coolNames(t, filepath.Join(dir, key)); len(names) != 1 {
			t.Fatalf("%s: cooling files while held: got %q, want the pending one", c.name, names)
		}
		if err := c.back(l); err != nil {
			t.Fatalf("%s: got %v, want nil", c.name, err)
		}
		if names := coolNames(t, filepath.Join(dir, key)); len(names) != 0 {
			t.Errorf("%s: cooling files once given back: got %q, want none", c.name, names)
		}
		release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}))
	}
}

// coolNames lists the cooling files in the key directory kd.
func coolNames(t *testing.T, kd string) []string {
	t.Helper()
	return slices.DeleteFunc(dirNames(t, kd), func(n string) bool { return !strings.HasPrefix(n, "cool") })
}
