//go:build unix

package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

// These tests play a second and a third user of a shared host, by ids with
// no account (only the ids matter to the kernel), against root's semrun
// and each other's.
const (
	otherUID  = 54321
	thirdUID  = 54322
	sharedGID = 54321 // the group the two share
)

// runLock makes a directory like /run/lock: root's, sticky, writable by
// everyone. It is removed when t ends.
func runLock(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "semrun-users-")
	if err != nil {
		t.Fatalf("mkdtemp: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	return dir
}

// as runs a command as uid, in the shared group, and returns its error
// and output.
func as(t *testing.T, uid int, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = asMember(uid)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// asMember runs a process as uid, in the shared group.
func asMember(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: sharedGID, Groups: []uint32{sharedGID}}}
}

// mustAs runs a command as uid and fails t if it fails.
func mustAs(t *testing.T, uid int, name string, args ...string) {
	t.Helper()
	if out, err := as(t, uid, name, args...); err != nil {
		t.Fatalf("%s %q as uid %d: %v (%s)", name, args, uid, err, out)
	}
}

// helperIn copies this test binary where every user may run it.
func helperIn(t *testing.T, dir string) string {
	t.Helper()
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatalf("open the test binary: %v", err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "helper.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	if err := dst.Close(); err != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	// A process another test forked while dst was open for writing keeps
	// a copy of it until it execs, and exec refuses the file meanwhile
	// (ETXTBSY): wait, bounded, until it runs.
	for try := 0; ; try++ {
		err := exec.Command(bin, "-test.run=^$").Run()
		if !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		if try == 100 {
			t.Fatalf("run the copy of the test binary: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return bin
}

// holdAs has a helper process running as uid take key's only permit in dir,
// and returns what it said: "holding TOKEN" (it then holds the permit until
// t ends) or "error ...".
func holdAs(t *testing.T, bin string, uid int, dir, key string) string {
	t.Helper()
	return holdAsOf(t, bin, uid, dir, key, 1)
}

// holdAsOf is holdAs, taking a permit of key with N permits.
func holdAsOf(t *testing.T, bin string, uid int, dir, key string, permits int) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperKeyEnv+"="+key, helperPermitsEnv+"="+strconv.Itoa(permits))
	cmd.SysProcAttr = asMember(uid)
	line, _ := startHelper(t, cmd)
	return line
}

func TestLocalRootRefusesLockDirsOthersMade(t *testing.T) {
	needRoot(t)
	t.Parallel()
	for _, mode := range []string{"2770", "3770", "0755", "0777", "1777"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			run := runLock(t)
			dir := filepath.Join(run, "semrun")
			mustAs(t, otherUID, "mkdir", "-m", mode, dir)
			s, err := localstore.New(localstore.Options{Dir: dir})
			if err == nil {
				s.Close()
				t.Fatalf("root's New(%s) with the directory made by uid %d, mode %s: got a store, want an error", dir, otherUID, mode)
			}
			want := fmt.Sprintf("lock directory %s: owned by %s, who could replace its lock files (remove it, or choose another with lock directory)", dir, nameOf(otherUID))
			if err.Error() != want {
				t.Errorf("root's New(%s), made by uid %d, mode %s:\ngot  %q\nwant %q", dir, otherUID, mode, err, want)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("entries root's refused New left in %s: got %q, want none", dir, names)
			}
		})
	}

	// A user's own default beside it, squatted by another user: refused
	// by the user's semrun too, by name.
	t.Run("another user's squatted", func(t *testing.T) {
		t.Parallel()
		run := runLock(t)
		bin := helperIn(t, run)
		dir := filepath.Join(run, "semrun-"+strconv.Itoa(thirdUID))
		mustAs(t, otherUID, "mkdir", "-m", "0777", dir)
		got := holdAs(t, bin, thirdUID, dir, "k")
		if want := fmt.Sprintf("error lock directory %s: owned by %s, who could replace", dir, nameOf(otherUID)); !strings.HasPrefix(got, want) {
			t.Errorf("uid %d's semrun in its directory made by uid %d: got %q, want %q...", thirdUID, otherUID, got, want)
		}
	})
}

func TestLocalRootRefusesKeyDirsOthersMade(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t) // root's, sticky: root may keep locks in it
	st := newLocal(t, run, nil)
	for _, mode := range []string{"0700", "0777", "3770"} {
		key := "made-" + mode
		mustAs(t, otherUID, "mkdir", "-m", mode, filepath.Join(run, key))
		_, err := acquireFor(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true})
		want := fmt.Sprintf("key directory %s: owned by %s, not by you", filepath.Join(run, key), nameOf(otherUID))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("root's Acquire of key %q, its directory made by uid %d with mode %s: got %v, want %q...", key, otherUID, mode, err, want)
		}
	}
}

func TestLocalHardLinkedLockFilesAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	const key = "linked"
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req))
	victim := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatalf("write %s: %v", victim, err)
	}
	before := stateOf(t, victim)
	for _, name := range []string{"capacity", "token", "grant", "queue", localstore.FirstPermit} {
		path := filepath.Join(dir, key, name)
		saved := path + ".saved"
		if err := os.Rename(path, saved); err != nil {
			t.Fatalf("rename %s: %v", path, err)
		}
		if err := os.Link(victim, path); err != nil {
			t.Fatalf("link %s to %s: %v", path, victim, err)
		}
		l, err := acquireFor(t, st, 5*time.Second, req)
		if l != nil {
			release(t, l)
		}
		if name != "capacity" && (err == nil || !strings.Contains(err.Error(), "lock file "+path+": has 2 links")) {
			t.Errorf("Acquire with %s a hard link: got (%v, %v), want an error naming it as having 2 links", name, l, err)
		}
		_, _ = st.Status(ctxTimeout(t, 5*time.Second), nil)
		_, _ = st.Status(ctxTimeout(t, 5*time.Second), []string{key})
		if after := stateOf(t, victim); !after.equal(before) {
			t.Fatalf("file hard-linked as %s: got %v, want it untouched: %v", name, after, before)
		}
		if err := os.Rename(saved, path); err != nil {
			t.Fatalf("rename %s back: %v", path, err)
		}
	}
}

func TestLocalGroupMembersCannotMoveKeysAside(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	st := newLocal(t, dir, nil)
	busy := func(who, key string) {
		t.Helper()
		if l, err := acquireFor(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
			if l != nil {
				release(t, l)
			}
			t.Errorf("root's no-wait Acquire of key %q while %s holds it: got (%v, %v), want ErrBusy", key, who, l, err)
		}
	}
	moves := func(key string, uid int) {
		t.Helper()
		for _, mv := range [][]string{
			{"mv", filepath.Join(dir, key), filepath.Join(dir, key+".aside")},
			{"mv", filepath.Join(dir, key, localstore.FirstPermit), filepath.Join(dir, key, "aside")},
			{"rm", "-f", filepath.Join(dir, key, localstore.FirstPermit)},
			{"rm", "-f", filepath.Join(dir, key, "grant")},
		} {
			if out, err := as(t, uid, mv[0], mv[1:]...); err == nil {
				t.Errorf("%q as uid %d: succeeded, want it refused (sticky)", mv, uid)
			} else if !strings.Contains(out, "not permitted") {
				t.Errorf("%q as uid %d: got %q, want \"Operation not permitted\"", mv, uid, out)
			}
		}
	}

	// root's key: no member moves it, or its files, aside.
	hold(t, st, semaphore.Request{Key: "roots", Permits: 1, TTL: time.Second})
	moves("roots", otherUID)
	busy("root", "roots")
	// A member may hold it too, and wait for it.
	if got := holdAs(t, bin, otherUID, dir, "roots"); !strings.Contains(got, "no permit available") {
		t.Errorf("uid %d's no-wait Acquire of root's held key: got %q, want it busy", otherUID, got)
	}

	// A member's key: shared with the other members, who cannot move it.
	if got := holdAs(t, bin, otherUID, dir, "members"); !strings.HasPrefix(got, "holding ") {
		t.Fatalf("uid %d's Acquire of a new key in the shared directory: got %q, want it holding", otherUID, got)
	}
	moves("members", thirdUID)
	if got := holdAs(t, bin, thirdUID, dir, "members"); !strings.Contains(got, "no permit available") {
		t.Errorf("uid %d's no-wait Acquire of uid %d's held key: got %q, want it busy", thirdUID, otherUID, got)
	}
	// root uses only what root owns.
	_, err := acquireFor(t, st, 5*time.Second, semaphore.Request{Key: "members", Permits: 1, TTL: time.Second, NoWait: true})
	if want := "key directory " + filepath.Join(dir, "members") + ": owned by " + nameOf(otherUID); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("root's Acquire of a key a member made: got %v, want %q...", err, want)
	}

	// Without the sticky bit, any member could: refused by all.
	if err := os.Chmod(dir, 0o770|os.ModeSetgid); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	if _, err := localstore.New(localstore.Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "without the sticky bit") {
		t.Errorf("root's New on a group-shared directory without the sticky bit: got %v, want it refused", err)
	}
	if got := holdAs(t, bin, thirdUID, dir, "other"); !strings.Contains(got, "without the sticky bit, so any member could move another's keys aside (fix, as root: chmod +t "+dir+")") {
		t.Errorf("uid %d's New on a group-shared directory without the sticky bit: got %q, want it refused with the fix", thirdUID, got)
	}
}

func TestLocalTokenNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	const key = "limit"
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req))
	token := filepath.Join(dir, key, "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(token, []byte(s), 0o600); err != nil {
			t.Fatalf("write %s: %v", token, err)
		}
	}

	write(strconv.FormatInt(math.MaxInt64-1, 10) + "\n")
	l := acquire(t, st, req)
	if l.Token() != math.MaxInt64 {
		t.Errorf("token after %d: got %d, want %d", int64(math.MaxInt64-1), l.Token(), int64(math.MaxInt64))
	}
	release(t, l)
	for _, bad := range []string{"", "9223372036854775808\n", "abc\n", "-5\n"} {
		if bad != "" {
			write(bad)
		}
		l, err := acquireFor(t, st, 5*time.Second, req)
		if l != nil {
			t.Errorf("Acquire with the token file saying %q: got token %d, want no grant", bad, l.Token())
			release(t, l)
			continue
		}
		want := "its fencing token is at its limit (9223372036854775807); no grant until it is mended: when no one holds the key, remove " + filepath.Join(dir, key)
		if bad != "" {
			want = fmt.Sprintf("its token file %s holds %q, not a fencing token; no grant until it is mended", token, strings.TrimSpace(bad))
		}
		if err == nil || errors.Is(err, semaphore.ErrBusy) || !strings.Contains(err.Error(), `key "limit": `+want) {
			t.Errorf("Acquire with the token file saying %q: got %v, want an error containing %q", bad, err, want)
		}
	}
}

func TestLocalStatusSkipsWhatIsNotAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warned semaphoretest.Warnings
	st := newLocal(t, dir, warned.Warnf)
	mkfifo := func(path string) {
		t.Helper()
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("remove %s: %v", path, err)
		}
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatalf("mkfifo %s: %v", path, err)
		}
	}
	// A hashed key keeps its key in a file, which status reads.
	hold(t, st, semaphore.Request{Key: longKey, Permits: 1, TTL: time.Second})
	hashed := dirNames(t, dir)[0]
	mkfifo(filepath.Join(dir, hashed, "key"))
	// A waiter's file and a holder's, which status reads while someone has
	// them locked.
	hold(t, st, semaphore.Request{Key: "k", Permits: 2, TTL: time.Second})
	wait := filepath.Join(dir, "k", "wait.AAAAAAAAAAAAAAAA")
	held := filepath.Join(dir, "k", "held.AAAAAAAAAAAAAAAA")
	mkfifo(wait)
	mkfifo(held)
	for _, fifo := range []string{wait, held} {
		f, err := os.OpenFile(fifo, os.O_RDWR, 0) // O_RDWR: no wait for a writer
		if err != nil {
			t.Fatalf("open %s: %v", fifo, err)
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatalf("flock %s: %v", fifo, err)
		}
	}

	done := make(chan []semaphore.KeyStatus, 1)
	go func() {
		status, err := st.Status(context.Background(), nil)
		if err != nil {
			t.Errorf("Status with FIFOs planted: %v", err)
		}
		done <- status
	}()
	select {
	case status := <-done:
		var keys []string
		for _, s := range status {
			keys = append(keys, s.Key)
		}
		if !slices.Equal(keys, []string{"k"}) || status[0].Held != 1 || len(status[0].Waiters) != 0 {
			t.Errorf("Status with FIFOs planted: got %+v, want key \"k\", 1 held, no waiter (the hashed key's name unreadable)", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Status with FIFOs planted: still running after 10s, want it to return")
	}
	lines := warned.Take()
	for _, fifo := range []string{wait, held} {
		want := "skipped lock file " + fifo + ": is a FIFO, not a regular file"
		if !slices.Contains(lines, want) {
			t.Errorf("lines from Status with a FIFO as %s: got %q, want %q", filepath.Base(fifo), lines, want)
		}
	}
}

// age sets the times of a key's directory and of every file in it d back.
func age(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	then := time.Now().Add(-d)
	paths := []string{dir}
	entries, _ := os.ReadDir(dir) // a directory being removed has fewer
	for _, e := range entries {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	for _, p := range paths {
		if err := os.Chtimes(p, then, then); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("chtimes %s: %v", p, err)
		}
	}
}

func TestLocalStatusForgetsKeysLongUnused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	for _, key := range []string{"old", "fresh", "held", "waited", longKey} {
		release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
	}
	hold(t, st, semaphore.Request{Key: "held", Permits: 1, TTL: time.Second})
	hold(t, st, semaphore.Request{Key: "waited", Permits: 1, TTL: time.Second})
	startAcquire(t, st, semaphore.Request{Key: "waited", Permits: 1, TTL: time.Second}, 30*time.Second)
	waitFor(t, 10*time.Second, "a waiter for key \"waited\"", func() bool { return len(statusOf(t, st, "waited").Waiters) == 1 })
	for _, name := range dirNames(t, dir) {
		if name != "fresh" {
			age(t, filepath.Join(dir, name), semaphore.EventLife+time.Minute)
		}
	}
	// Left behind by a semrun that died making or removing a key's directory.
	for _, name := range []string{".gone-x", ".new-x"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatalf("mkdir %s: %v", name, err)
		}
		age(t, filepath.Join(dir, name), time.Hour)
	}

	status, err := st.Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var keys []string
	for _, s := range status {
		keys = append(keys, s.Key)
	}
	if want := []string{"fresh", "held", "waited"}; !slices.Equal(keys, want) {
		t.Errorf("keys Status lists: got %q, want %q: held, waited for, or used in the last %v", keys, want, localstore.StaleAfter)
	}
	if got, want := dirNames(t, dir), []string{"fresh", "held", "waited"}; !slices.Equal(got, want) {
		t.Errorf("entries of the lock directory after Status: got %q, want %q", got, want)
	}
	// Asked by name, a key forgotten is free.
	if s := statusOf(t, st, "old"); s.Held != 0 || len(s.Holders) != 0 {
		t.Errorf("Status of a key whose directory was removed: got %+v, want it free", s)
	}
	release(t, acquire(t, st, semaphore.Request{Key: "old", Permits: 1, TTL: time.Second, NoWait: true}))
}

func TestLocalRemovingUnusedKeysNeverLetsTwoHold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holders, remover := newLocal(t, dir, nil), newLocal(t, dir, nil)
	const key = "churn"
	release(t, acquire(t, holders, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
	var inside, most, granted atomic.Int64
	var failed atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: i%2 == 0}
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				l, err := holders.Acquire(ctx, req)
				cancel()
				if err != nil {
					// A directory removed under a caller makes it start
					// again, never fail.
					if !errors.Is(err, semaphore.ErrBusy) && !errors.Is(err, context.DeadlineExceeded) {
						failed.Store(err)
					}
					continue
				}
				granted.Add(1)
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				_ = l.Release(context.Background())
				time.Sleep(time.Millisecond) // moments when nobody holds the key
			}
		}()
	}
	removed := 0
	var last uint64
	// At least 2s and 3 removals, at most 30s: on a loaded machine a grant
	// lands between the ageing and the look more often.
	start := time.Now()
	for since := time.Duration(0); since < 30*time.Second && (since < 2*time.Second || removed < 3); since = time.Since(start) {
		if fi, err := os.Stat(filepath.Join(dir, key)); err == nil {
			if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != last {
				if last != 0 {
					removed++
				}
				last = ino
			}
			age(t, filepath.Join(dir, key), semaphore.EventLife+time.Minute)
		}
		_, _ = remover.Status(context.Background(), nil)
	}
	close(stop)
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("most holders at once while Status removed the key's directory: got %d, want 1", m)
	}
	if err := failed.Load(); err != nil {
		t.Errorf("Acquire while Status removed the key's directory: got %v, want a permit, ErrBusy or the deadline", err)
	}
	if removed == 0 || granted.Load() == 0 {
		t.Errorf("key directories removed: %d, grants: %d; want both, for the test to mean something", removed, granted.Load())
	}
	t.Logf("%d grants, %d directories removed", granted.Load(), removed)
}
