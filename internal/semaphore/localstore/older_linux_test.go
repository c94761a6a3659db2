package localstore_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
	"golang.org/x/sys/unix"
)

// These tests play a semrun from before permits were bytes of one file: it
// takes permit i as flock(LOCK_EX) on "seat.i" of the key's directory,
// opened read-write and made when missing (O_CREAT, never following a
// symbolic link), and writes who holds in it. That is all it does to a
// permit, so a file locked here the same way is its holder.

// oldHolder takes seat.0 of the key directory kdir as an older semrun
// does, and keeps it until t ends or the returned func is called.
func oldHolder(t *testing.T, kdir string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(kdir, "seat.0"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		t.Fatalf("older semrun: open seat.0: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("older semrun: flock seat.0: %v", err)
	}
	if _, err := f.WriteString(`{"host":"old","pid":1,"command":"older semrun","permits":1,"weight":1,"token":7,"since_ms":1}` + "\n"); err != nil {
		t.Fatalf("older semrun: write seat.0: %v", err)
	}
	var once sync.Once
	done := func() { once.Do(func() { f.Close() }) }
	t.Cleanup(done)
	return done
}

// oldKeyDir makes key's directory in dir as an older semrun did: its
// files, and seat.0 to seat.N-1.
func oldKeyDir(t *testing.T, dir, key string, n int) string {
	t.Helper()
	kdir := filepath.Join(dir, key)
	if err := os.Mkdir(kdir, 0o700); err != nil {
		t.Fatalf("mkdir %s: %v", kdir, err)
	}
	files := []string{"grant", "queue", "token", "capacity"}
	for i := range n {
		files = append(files, fmt.Sprintf("seat.%d", i))
	}
	for _, name := range files {
		if err := os.WriteFile(filepath.Join(kdir, name), nil, 0o600); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	return kdir
}

// While an older semrun holds a permit of a key, a new one counts it and
// takes no permit the older one cannot see, status shows it and keeps the
// directory; once it is gone, the next grant puts the fence up.
func TestLocalOlderSemrunsPermitsCount(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"older", "newer without fence"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			st := newLocal(t, dir, nil)
			const key = "mixed"
			kdir := filepath.Join(dir, key)
			if layout == "older" {
				oldKeyDir(t, dir, key, 1)
			} else {
				// As a semrun made it before the fence: the seats file, no
				// seat.0, which an older semrun then makes.
				release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
				if err := os.Remove(filepath.Join(kdir, "seat.0")); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("remove the fence: %v", err)
				}
			}
			gone := oldHolder(t, kdir)

			req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
			if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
				if l != nil {
					_ = l.Release(ctxTimeout(t, 5*time.Second))
				}
				t.Fatalf("no-wait Acquire, an older semrun holding the key's only permit: got (%v, %v), want ErrBusy", l, err)
			}
			if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Host != "old" {
				t.Errorf("Status, an older semrun holding the key's only permit: got %+v, want it held by the older one", s)
			}

			age(t, kdir, semaphore.EventLife+time.Minute)
			if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
				t.Fatalf("Status: %v", err)
			}
			if _, err := os.Stat(kdir); err != nil {
				t.Fatalf("key directory after Status, an older semrun holding its seat.0: got %v, want it kept", err)
			}

			// A waiter is granted once the older holder is gone.
			onWait, waiting := signal()
			wait := req
			wait.NoWait = false
			wait.OnWait = func(semaphore.WaitState) { onWait() }
			got, _ := startAcquire(t, st, wait, 30*time.Second)
			select {
			case <-waiting:
			case r := <-got:
				t.Fatalf("waiting Acquire, an older semrun holding the key's only permit: got (%v, %v), want it to wait", r.L, r.Err)
			case <-time.After(10 * time.Second):
				t.Fatalf("waiting Acquire: OnWait not called after 10s, want it called")
			}
			gone()
			r := receive(t, got, 10*time.Second, "waiting Acquire after the older holder left")
			if r.Err != nil {
				t.Fatalf("waiting Acquire after the older holder left: got %v, want a permit", r.Err)
			}
			defer func() { _ = r.L.Release(ctxTimeout(t, 5*time.Second)) }()
			fi, err := os.Lstat(filepath.Join(kdir, "seat.0"))
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("seat.0 after a grant with no older holder: got (%v, %v), want the fence, a symbolic link", fi, err)
			}
			// What an older semrun does to take permit 0 now fails.
			if f, err := os.OpenFile(filepath.Join(kdir, "seat.0"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err == nil {
				f.Close()
				t.Errorf("an older semrun's open of seat.0 past the fence: succeeded, want it refused")
			}
		})
	}
}

// A key's directory is made with the fence: an older semrun cannot take a
// permit of it, and its status, which removes a directory only when it can
// lock every seat.* file, keeps it.
func TestLocalNewKeysAreFencedFromOlderSemruns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	const key = "fenced"
	hold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: time.Second})
	fence := filepath.Join(dir, key, "seat.0")
	fi, err := os.Lstat(fence)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("seat.0 of a new key: got (%v, %v), want a symbolic link", fi, err)
	}
	if _, err := os.Stat(fence); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target of seat.0: got %v, want none (a dangling link)", err)
	}
	f, err := os.OpenFile(fence, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		f.Close()
		t.Fatalf("an older semrun's open of seat.0: succeeded, want it refused")
	}
	if !errors.Is(err, syscall.ELOOP) {
		t.Errorf("an older semrun's open of seat.0: got %v, want ELOOP", err)
	}
	// Status of every key removes the fence with the directory.
	release(t, acquire(t, st, semaphore.Request{Key: "unused", Permits: 1, TTL: time.Second}))
	age(t, filepath.Join(dir, "unused"), semaphore.EventLife+time.Minute)
	if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got := dirNames(t, dir); len(got) != 1 || got[0] != key {
		t.Errorf("lock directory after Status: got %q, want only %q", got, key)
	}
}

// A seats file removed from under its holders (by its owner, root, an age
// rule of tmpfiles) is not made anew beside them: the key is refused,
// and status says why and counts the holders by their files.
func TestLocalPermitsFileRemovedUnderHoldersRefusesKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warned semaphoretest.Warnings
	st := newLocal(t, dir, warned.Warnf)
	key := uniqueKey(t)
	startHolder(t, dir, key)
	if err := os.Remove(filepath.Join(dir, key, "seats")); err != nil {
		t.Fatalf("remove seats: %v", err)
	}
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	l, err := acquireFor(t, st, 5*time.Second, req)
	if err == nil {
		_ = l.Release(ctxTimeout(t, 5*time.Second))
		t.Fatalf("no-wait Acquire, the seats file removed under its holder: got a permit, want an error")
	}
	if errors.Is(err, semaphore.ErrBusy) || !strings.Contains(err.Error(), "seats file is gone") {
		t.Errorf("no-wait Acquire, the seats file removed under its holder: got %v, want an error saying the seats file is gone", err)
	}
	if _, err := os.Stat(filepath.Join(dir, key, "seats")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("seats after the refused Acquire: got %v, want it still missing", err)
	}
	s := statusOf(t, st, key)
	if s.Held != 1 || len(s.Holders) != 1 {
		t.Errorf("Status, the seats file removed under its holder: got %+v, want 1 held by its holder", s)
	}
	said := strings.Join(warned.Take(), "\n")
	if !strings.Contains(said, "seats file is gone") {
		t.Errorf("Status warnings: got %q, want one saying the seats file is gone", said)
	}
}

// A count that fails keeps the key's directory: a seats file that is not
// a regular file says nothing of who holds the key.
func TestLocalStatusKeepsKeysItCannotCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	const key = "uncounted"
	release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
	permitsFile := filepath.Join(dir, key, "seats")
	if err := os.Remove(permitsFile); err != nil {
		t.Fatalf("remove seats: %v", err)
	}
	if err := syscall.Mkfifo(permitsFile, 0o600); err != nil {
		t.Fatalf("mkfifo seats: %v", err)
	}
	age(t, filepath.Join(dir, key), semaphore.EventLife+time.Minute)
	if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, key)); err != nil {
		t.Errorf("key directory whose permits cannot be counted, after Status: got %v, want it kept", err)
	}
}

// A write lock on the seats file, which semrun never takes (a member may
// take one on a file it can read), counts as no more than the key's
// capacity, with a warning.
func TestLocalForeignWriteLockCountsAtMostCapacity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warned semaphoretest.Warnings
	st := newLocal(t, dir, warned.Warnf)
	const key = "written"
	hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: time.Second})
	f, err := os.Open(filepath.Join(dir, key, "seats"))
	if err != nil {
		t.Fatalf("open seats: %v", err)
	}
	defer f.Close()
	// A read-only descriptor cannot take a write lock: reopen for writing,
	// as the file's owner can.
	w, err := os.OpenFile(f.Name(), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open seats for writing: %v", err)
	}
	defer w.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 3, Len: 0}
	if err := unix.FcntlFlock(w.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("write lock on seats: %v", err)
	}
	if s := statusOf(t, st, key); s.Held != 3 {
		t.Errorf("Status, one permit held and a write lock over the rest of the file: got %d held, want 3 (the capacity)", s.Held)
	}
	said := strings.Join(warned.Take(), "\n")
	if !strings.Contains(said, "write lock") {
		t.Errorf("Status warnings: got %q, want one naming the write lock", said)
	}
}
