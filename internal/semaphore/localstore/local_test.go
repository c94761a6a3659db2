//go:build unix

package localstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// These tests cover what only the host-local store does: its lock directory,
// its files, and permits held by other processes. The rules every store
// obeys are semaphoretest's, which TestContract runs.

func TestLocalRefusesUnsafeLockDir(t *testing.T) {
	t.Parallel()
	root := needRoot
	mkdir := func(t *testing.T, mode os.FileMode) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "locks")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatalf("mkdir %s: %v", dir, err)
		}
		if err := os.Chmod(dir, mode); err != nil { // past the umask
			t.Fatalf("chmod %s: %v", dir, err)
		}
		return dir
	}
	giveAway := func(t *testing.T, dir string) {
		t.Helper()
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatalf("chown %s to 65534: %v", dir, err)
		}
	}

	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
		want string // in the message, besides the directory; "" for no error
	}{
		{"symlink to a directory", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(mkdir(t, 0o700), link); err != nil {
				t.Fatalf("symlink: %v", err)
			}
			return link
		}, "symbolic link"},
		{"dangling symlink", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(filepath.Join(t.TempDir(), "missing"), link); err != nil {
				t.Fatalf("symlink: %v", err)
			}
			return link
		}, "symbolic link"},
		{"another user's, writable by others, sticky", func(t *testing.T) string {
			root(t)
			dir := mkdir(t, 0o777|os.ModeSticky)
			giveAway(t, dir)
			return dir
		}, "owned by " + nobody + ", who could replace its lock files (remove it, or choose another with lock directory)"},
		{"another user's, writable by others", func(t *testing.T) string {
			root(t)
			dir := mkdir(t, 0o777)
			giveAway(t, dir)
			return dir
		}, "owned by " + nobody},
		{"ours, group-shared without the sticky bit", func(t *testing.T) string {
			return mkdir(t, 0o770|os.ModeSetgid)
		}, "without the sticky bit"},
		{"parent another user's", func(t *testing.T) string {
			root(t)
			parent := mkdir(t, 0o755)
			giveAway(t, parent)
			return filepath.Join(parent, "locks")
		}, "locks on its path is owned by " + nobody + ", who could replace what is in it"},
		{"parent writable by others without the sticky bit", func(t *testing.T) string {
			return filepath.Join(mkdir(t, 0o777), "locks")
		}, "locks on its path is writable by others without the sticky bit"},
		{"parent a symbolic link of another user's", func(t *testing.T) string {
			root(t)
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(mkdir(t, 0o700), link); err != nil {
				t.Fatalf("symlink: %v", err)
			}
			if err := os.Lchown(link, 65534, 65534); err != nil {
				t.Fatalf("lchown %s: %v", link, err)
			}
			return filepath.Join(link, "locks")
		}, "link on its path is a symbolic link of " + nobody + ", who could point it elsewhere"},
		{"ours, writable by others without the sticky bit", func(t *testing.T) string {
			return mkdir(t, 0o777)
		}, "without the sticky bit"},
		{"ours, writable by others without the sticky bit, setgid", func(t *testing.T) string {
			return mkdir(t, 0o777|os.ModeSetgid)
		}, "writable by"},
		{"regular file", func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(f, []byte("not a directory"), 0o600); err != nil {
				t.Fatalf("write %s: %v", f, err)
			}
			return f
		}, "not a directory"},
		{"missing parent", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "missing", "locks")
		}, "no such file"},

		{"ours, private", func(t *testing.T) string { return mkdir(t, 0o700) }, ""},
		{"ours, writable by others, sticky", func(t *testing.T) string { return mkdir(t, 0o777|os.ModeSticky) }, ""},
		{"missing, parent exists", func(t *testing.T) string { return filepath.Join(t.TempDir(), "new") }, ""},
		{"path with a trailing slash", func(t *testing.T) string { return mkdir(t, 0o700) + "/" }, ""},
		{"another user's, not writable by others", func(t *testing.T) string {
			root(t) // root may write any directory, but its owner could swap its files
			dir := mkdir(t, 0o755)
			giveAway(t, dir)
			return dir
		}, "who could replace its lock files"},
		{"another user's, group-shared", func(t *testing.T) string {
			root(t)
			dir := mkdir(t, 0o770|os.ModeSetgid|os.ModeSticky)
			giveAway(t, dir)
			return dir
		}, "owned by " + nobody},
		{"ours, group-shared, sticky", func(t *testing.T) string { return mkdir(t, 0o770|os.ModeSetgid|os.ModeSticky) }, ""},
		{"parent a symbolic link of ours", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(mkdir(t, 0o700), link); err != nil {
				t.Fatalf("symlink: %v", err)
			}
			return filepath.Join(link, "locks")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := tc.dir(t)
			s, err := localstore.New(localstore.Options{Dir: dir})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("NewLocal(%q): got error %v, want nil", dir, err)
				}
				defer s.Close()
				l := acquire(t, s, semaphore.Request{Key: "k", Permits: 1, TTL: time.Second})
				release(t, l)
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("NewLocal(%q): got a store, want an error containing %q", dir, tc.want)
			}
			if msg := err.Error(); !strings.Contains(msg, filepath.Clean(dir)) || !strings.Contains(msg, tc.want) {
				t.Errorf("NewLocal(%q): got error %q, want one naming the directory and containing %q", dir, msg, tc.want)
			}
		})
	}

	t.Run("no directory", func(t *testing.T) {
		t.Parallel()
		if s, err := localstore.New(localstore.Options{}); err == nil {
			s.Close()
			t.Errorf("NewLocal with no Dir: got a store, want an error")
		}
	})
}

// fileState is what a test remembers of a file to tell it was not touched.
type fileState struct {
	exists  bool
	mode    fs.FileMode
	content string
	entries []string
}

func (s fileState) String() string {
	if !s.exists {
		return "missing"
	}
	return fmt.Sprintf("%v content %q entries %q", s.mode, s.content, s.entries)
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileState{}
	}
	if err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	st := fileState{exists: true, mode: fi.Mode()}
	if fi.IsDir() {
		st.entries = dirNames(t, path)
		return st
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	st.content = string(b)
	return st
}

func TestLocalNeverFollowsPlantedSymlinks(t *testing.T) {
	t.Parallel()
	// Targets a symlink may point at: a precious file, a directory, nothing.
	targets := map[string]func(t *testing.T) string{
		"file": func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "precious")
			if err := os.WriteFile(f, []byte("precious\n"), 0o644); err != nil {
				t.Fatalf("write %s: %v", f, err)
			}
			return f
		},
		"directory": func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatalf("mkdir %s: %v", d, err)
			}
			if err := os.WriteFile(filepath.Join(d, "marker"), []byte("x"), 0o644); err != nil {
				t.Fatalf("write marker: %v", err)
			}
			return d
		},
		"nothing": func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") },
	}
	// The key's own directory, then each file in it ("" for the directory).
	// Acquire must fail where the file is needed to take a permit.
	for _, planted := range []struct {
		name        string
		acquireFail bool
	}{
		{"", true}, {localstore.FirstPermit, true}, {"grant", true}, {"queue", true}, {"token", true}, {"capacity", false},
	} {
		for targetName, target := range targets {
			what := planted.name
			if what == "" {
				what = "key directory"
			}
			t.Run(what+" to "+targetName, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				st := newLocal(t, dir, nil)
				const key = "planted-key" // its directory has the key's name
				req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
				link := filepath.Join(dir, key)
				if planted.name != "" {
					// Make the key's files, then replace one with the symlink.
					release(t, acquire(t, st, req))
					link = filepath.Join(dir, key, planted.name)
					if err := os.Remove(link); err != nil {
						t.Fatalf("remove %s: %v", link, err)
					}
				}
				to := target(t)
				if err := os.Symlink(to, link); err != nil {
					t.Fatalf("symlink %s -> %s: %v", link, to, err)
				}
				before := stateOf(t, to)

				l, err := acquireFor(t, st, 5*time.Second, req)
				if l != nil {
					defer release(t, l)
				}
				if planted.acquireFail {
					if err == nil || errors.Is(err, semaphore.ErrBusy) {
						t.Errorf("Acquire with %s a symlink: got (%v, %v), want an error", what, l, err)
					} else if !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), link) {
						t.Errorf("Acquire with %s a symlink: got error %q, want it to name %s as a symbolic link", what, err, link)
					}
				}
				// Status and a waiting Acquire must not follow it either.
				_, _ = st.Status(ctxTimeout(t, 5*time.Second), nil)
				_, _ = st.Status(ctxTimeout(t, 5*time.Second), []string{key})
				wait := req
				wait.NoWait = false
				if l2, err := acquireFor(t, st, 50*time.Millisecond, wait); err == nil {
					release(t, l2)
				}

				if after := stateOf(t, to); !after.equal(before) {
					t.Errorf("symlink target %s: got %v, want it untouched: %v", to, after, before)
				}
				if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
					t.Errorf("planted symlink %s: got (%v, %v), want it left as it was", link, fi, err)
				}
			})
		}
	}
}

func (s fileState) equal(o fileState) bool {
	return s.exists == o.exists && s.mode == o.mode && s.content == o.content && slices.Equal(s.entries, o.entries)
}

// umask sets the process's umask until t ends. Tests that call it must not
// run in parallel: the umask is the whole process's.
func umask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// modesUnder lists the mode of the key directories of dir and of every
// file in them, by path relative to dir.
func modesUnder(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	modes := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a waiter's file, gone with its waiter
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil // the fence against an older semrun: a link's mode is no one's choice
		}
		rel, _ := filepath.Rel(dir, path)
		modes[rel] = fi.Mode()
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return modes
}

// longKey is a key of MaxKeyLen bytes of multibyte runes: too long to name
// a directory once escaped.
var longKey = strings.Repeat("€", semaphore.MaxKeyLen/3) + strings.Repeat("é", semaphore.MaxKeyLen%3/2)

// makeEveryFile has st make every kind of file it keeps for key, and calls
// check while a waiter's file exists.
func makeEveryFile(t *testing.T, st semaphore.Store, key string, check func()) {
	t.Helper()
	hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	_, stop := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{PID: 4242}}, 30*time.Second)
	defer stop()
	waitFor(t, 10*time.Second, "waiter shown by Status", func() bool {
		s := statusOf(t, st, key)
		return len(s.Waiters) == 1 && s.Waiters[0].PID == 4242
	})
	check()
}

func TestLocalModesIgnoreUmask(t *testing.T) {
	// Not parallel: it changes the process's umask.
	for _, mask := range []int{0, 0o022, 0o777} {
		t.Run(fmt.Sprintf("umask %04o", mask), func(t *testing.T) {
			dir := t.TempDir()
			umask(t, mask)
			st := newLocal(t, dir, nil)
			for _, key := range []string{"modes", longKey} {
				makeEveryFile(t, st, key, func() {
					modes := modesUnder(t, dir)
					kinds := map[string]bool{}
					for path, mode := range modes {
						want := fs.FileMode(0o600)
						if !strings.Contains(path, "/") {
							want = fs.ModeDir | 0o700
						}
						if mode != want {
							t.Errorf("mode of %s: got %v, want %v", path, mode, want)
						}
						kinds[strings.TrimRight(filepath.Base(path), "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")] = true
					}
					for _, kind := range []string{strings.TrimRight(localstore.FirstPermit, "0"), "held.", "wait.", "grant", "queue", "token", "capacity"} {
						if !kinds[kind] {
							t.Errorf("files in %s: got %v, want a %q file among them", dir, modes, kind)
						}
					}
				})
			}
		})
	}
}

func TestLocalGroupSharedLockDir(t *testing.T) {
	// Not parallel: it changes the process's umask.
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("mkdir %s: %v", dir, err)
	}
	gid := os.Getegid()
	if os.Geteuid() == 0 {
		gid = 65534 // a group of its own, which new entries must inherit
		if err := os.Chown(dir, -1, gid); err != nil {
			t.Fatalf("chgrp %s: %v", dir, err)
		}
	}
	if err := os.Chmod(dir, 0o770|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	umask(t, 0o077) // would take the group's bits away
	st := newLocal(t, dir, nil)
	makeEveryFile(t, st, "shared", func() {
		modes := modesUnder(t, dir)
		if len(modes) < 7 {
			t.Errorf("entries under %s: got %v, want a key directory and its files", dir, modes)
		}
		for path, mode := range modes {
			want := fs.FileMode(0o660)
			if !strings.Contains(path, "/") {
				want = fs.ModeDir | fs.ModeSetgid | fs.ModeSticky | 0o770
			}
			if mode != want {
				t.Errorf("mode of %s in a group-shared lock directory: got %v, want %v", path, mode, want)
			}
			fi, err := os.Lstat(filepath.Join(dir, path))
			if err != nil {
				t.Fatalf("lstat %s: %v", path, err)
			}
			if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != gid {
				t.Errorf("group of %s: got %d, want the lock directory's %d", path, got, gid)
			}
		}
	})
}

func TestLocalKeysThatLookLikePaths(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "locks")
	st := newLocal(t, dir, nil)
	keys := []string{
		"../x", "a/b", ".hidden", "%41", "A", longKey,
		".", "..", "/abs/path", "a/../../b", "./x", "x/", "with space", "ü", "#hash", "key", "grant", "%2E.%2Fx",
		strings.Repeat(".", semaphore.MaxKeyLen), strings.Repeat("/", 81),
	}
	// One permit each: were two keys to share a directory, the second
	// would find its permit taken.
	for _, key := range keys {
		hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{Command: key}})
	}

	if got := dirNames(t, parent); !slices.Equal(got, []string{"locks"}) {
		t.Errorf("entries beside the lock directory: got %q, want only [locks]", got)
	}
	names := dirNames(t, dir)
	if len(names) != len(keys) {
		t.Errorf("entries in the lock directory: got %d %q, want %d, one per key", len(names), names, len(keys))
	}
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !fi.IsDir() || name == "." || name == ".." || strings.HasPrefix(name, ".") {
			t.Errorf("entry %q in the lock directory: got (%v, %v), want a directory that is not hidden", name, fi, err)
		}
	}

	want := slices.Clone(keys)
	slices.Sort(want)
	for _, ask := range [][]string{nil, {}} {
		status, err := st.Status(ctxTimeout(t, 5*time.Second), ask)
		if err != nil {
			t.Fatalf("Status(%#v): got error %v, want nil", ask, err)
		}
		var got []string
		for _, s := range status {
			got = append(got, s.Key)
			if s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Command != s.Key {
				t.Errorf("Status of key %q: got %+v, want its one holder", s.Key, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("keys listed by Status(%#v):\ngot  %q\nwant %q", ask, got, want)
		}
	}
	// Another store on the lock directory sees the same.
	status, err := newLocal(t, dir, nil).Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil || len(status) != len(keys) {
		t.Errorf("Status of every key from another store: got (%d keys, %v), want %d keys", len(status), err, len(keys))
	}
}

func TestLocalTokensRiseAfterTokenFileDeleted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	const key = "tokens"
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}

	var last int64
	grant := func(when string) {
		t.Helper()
		before := time.Now().UnixMicro()
		l := acquire(t, st, req)
		if l.Token() <= last {
			t.Errorf("token %s: got %d, want more than the previous %d", when, l.Token(), last)
		}
		if l.Token() < before {
			t.Errorf("token %s: got %d, want at least the clock %d µs (seeded from the clock)", when, l.Token(), before)
		}
		last = l.Token()
		release(t, l)
	}
	for range 3 {
		grant("in a row")
	}
	if err := os.Remove(filepath.Join(dir, key, "token")); err != nil {
		t.Fatalf("remove the token file: %v", err)
	}
	grant("after the token file was deleted")
	grant("after that")
	// The lock directory emptied, as /run is at boot.
	if err := os.RemoveAll(filepath.Join(dir, key)); err != nil {
		t.Fatalf("remove the key's directory: %v", err)
	}
	grant("after the key's directory was deleted")
}

func TestLocalStatusShowsWaiters(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	key := uniqueKey(t)
	a := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})

	infos := []semaphore.HolderInfo{
		{Host: "host-1", PID: 1111, Command: "first waiter"},
		{Host: "host-2", PID: 2222, Command: "second waiter"},
	}
	waiters := func() []semaphore.Waiter { return statusOf(t, st, key).Waiters }
	shown := func(want ...semaphore.HolderInfo) func() bool {
		return func() bool {
			w := waiters()
			if len(w) != len(want) {
				return false
			}
			for i := range w {
				if !reflect.DeepEqual(w[i].HolderInfo, want[i]) {
					return false
				}
			}
			return true
		}
	}
	first, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: infos[0]}, 30*time.Second)
	waitFor(t, 10*time.Second, "first waiter in Status", shown(infos[0]))
	time.Sleep(2 * time.Millisecond) // the second waits from a later millisecond
	second, stopSecond := startAcquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: time.Second, Holder: infos[1]}, 30*time.Second)
	waitFor(t, 10*time.Second, "both waiters in Status, longest waiting first", shown(infos[0], infos[1]))
	w := waiters()
	if len(w) != 2 || w[0].Permits != 1 || w[1].Permits != 2 || w[0].Waited < w[1].Waited || w[1].Waited < 0 {
		t.Errorf("waiters: got %+v, want permits 1 then 2, longest waiting first", w)
	}
	if s := statusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != a.Token() {
		t.Errorf("holders while two wait: got %+v, want only the first holder", s.Holders)
	}

	// A waiter that gives up leaves the list.
	stopSecond()
	if r := receive(t, second, 10*time.Second, "second waiter after its context was canceled"); !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("second waiter after its context was canceled: got (%v, %v), want context.Canceled", r.L, r.Err)
	}
	if got := waiters(); len(got) != 1 || !reflect.DeepEqual(got[0].HolderInfo, infos[0]) {
		t.Errorf("waiters after the second gave up: got %+v, want only the first", got)
	}

	// One that gets in leaves it too, and shows as a holder.
	release(t, a)
	r := receive(t, first, 10*time.Second, "first waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("first waiter after the holder released: got %v, want a permit", r.Err)
	}
	s := statusOf(t, st, key)
	if len(s.Waiters) != 0 || s.Held != 1 || !reflect.DeepEqual(s.Holders[0].HolderInfo, infos[0]) || s.Holders[0].Token != r.L.Token() {
		t.Errorf("Status after the first waiter got in: got %+v, want it as the only holder and no waiter", s)
	}
	if names := dirNames(t, filepath.Join(st.Dir(), key)); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "wait.") }) {
		t.Errorf("files of the key once nobody waits: got %q, want no wait.* file left", names)
	}
}

// The helper process of TestLocalKilledHolderFreesPermit takes a permit and
// keeps it until it is killed (or its stdin closes, should the test die).
const (
	helperDirEnv     = "SEMRUN_TEST_HOLDER_DIR"
	helperKeyEnv     = "SEMRUN_TEST_HOLDER_KEY"
	helperPermitsEnv = "SEMRUN_TEST_HOLDER_PERMITS" // 1 when unset
	// helperCoolEnv, when set, is a min hold: the helper finishes the
	// permit at once, with exit status 4, says "cooled TOKEN" and exits.
	helperCoolEnv = "SEMRUN_TEST_HOLDER_COOL"
	// helperMinHoldEnv, when set, is a min hold the helper holds its
	// permit with, until it is killed.
	helperMinHoldEnv = "SEMRUN_TEST_HOLDER_MIN_HOLD"
)

func TestHelperHolder(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		return // not the helper process
	}
	st, err := localstore.New(localstore.Options{Dir: dir})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	permits := 1
	if n := os.Getenv(helperPermitsEnv); n != "" {
		permits, _ = strconv.Atoi(n)
	}
	minHold, _ := time.ParseDuration(os.Getenv(helperCoolEnv))
	holdFor, _ := time.ParseDuration(os.Getenv(helperMinHoldEnv))
	l, err := st.Acquire(context.Background(), semaphore.Request{
		Key: os.Getenv(helperKeyEnv), Permits: permits, TTL: time.Second, NoWait: true, MinHold: max(minHold, holdFor),
		Holder: semaphore.HolderInfo{Host: "helper", PID: os.Getpid(), Command: "TestHelperHolder"},
	})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	if minHold > 0 {
		if err := l.Finish(context.Background(), 4); err != nil {
			fmt.Printf("error %v\n", err)
			return
		}
		fmt.Printf("cooled %d\n", l.Token())
		return
	}
	fmt.Printf("holding %d\n", l.Token())
	_, _ = io.Copy(io.Discard, os.Stdin)
	runtime.KeepAlive(l) // its file must not be closed by a finalizer
}

// holderProcess is a helper process holding a permit.
type holderProcess struct {
	cmd    *exec.Cmd
	token  int64
	exited chan struct{}
}

// startHolder starts a helper process that takes key's only permit in dir,
// with env besides. The process is killed, if still running, when t ends.
func startHolder(t *testing.T, dir, key string, env ...string) *holderProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperDirEnv+"="+dir, helperKeyEnv+"="+key), env...)
	l, p := startHelper(t, cmd)
	tok, ok := strings.CutPrefix(l, "holding ")
	var err error
	if p.token, err = strconv.ParseInt(tok, 10, 64); !ok || err != nil {
		t.Fatalf("helper process said %q, want \"holding TOKEN\"", l)
	}
	return p
}

// startHelper starts cmd, a helper process, and returns the first line it
// says. The process is killed, if still running, when t ends.
func startHelper(t *testing.T, cmd *exec.Cmd) (string, *holderProcess) {
	t.Helper()
	if _, err := cmd.StdinPipe(); err != nil { // closed when the process exits
		t.Fatalf("stdin pipe: %v", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatalf("pipe: %v", err)
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper process: %v", err)
	}
	pw.Close()
	p := &holderProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	line := make(chan string, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			line <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, pr) // until the process is gone
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		<-readerDone
		pr.Close()
	})

	select {
	case l := <-line:
		return l, p
	case <-readerDone:
		t.Fatalf("helper process said nothing before it exited, want a line (stderr %q)", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("helper process: no line after 20s, want one")
	}
	return "", nil
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *holderProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill helper process: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("helper process still running 20s after SIGKILL, want it gone")
	}
}

func TestLocalKilledHolderFreesPermit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := uniqueKey(t)
	child := startHolder(t, dir, key)
	st := newLocal(t, dir, nil)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}

	busy := req
	busy.NoWait = true
	if l, err := acquireFor(t, st, 5*time.Second, busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire with the permit held by another process: got (%v, %v), want ErrBusy", l, err)
	}
	s := statusOf(t, st, key)
	want := semaphore.HolderInfo{Host: "helper", PID: child.cmd.Process.Pid, Command: "TestHelperHolder"}
	if s.Held != 1 || !reflect.DeepEqual(s.Holders[0].HolderInfo, want) || s.Holders[0].Token != child.token {
		t.Errorf("Status with the permit held by another process: got %+v, want one holder %+v with token %d", s, want, child.token)
	}

	onWait, waiting := signal()
	wait := req
	wait.OnWait = func(semaphore.WaitState) { onWait() }
	got, _ := startAcquire(t, st, wait, 30*time.Second)
	select {
	case <-waiting:
	case r := <-got:
		t.Fatalf("waiting Acquire with the permit held by another process: got (%v, %v), want it to wait", r.L, r.Err)
	case <-time.After(10 * time.Second):
		t.Fatalf("waiting Acquire: OnWait not called after 10s, want it called")
	}

	child.kill(t)
	// No lease runs out here: the kernel dropped the dead holder's lock.
	r := receive(t, got, 5*time.Second, "waiting Acquire after the holder was killed")
	if r.Err != nil {
		t.Fatalf("waiting Acquire after the holder was killed: got %v, want a permit", r.Err)
	}
	if r.L.Token() <= child.token {
		t.Errorf("token after the killed holder: got %d, want more than its %d", r.L.Token(), child.token)
	}
	if s := statusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != r.L.Token() {
		t.Errorf("Status after the killed holder's permit was taken: got %+v, want only the new holder", s)
	}
}

func TestLocalPlantedFIFOHangsNothing(t *testing.T) {
	t.Parallel()
	// Each case plants a FIFO in place of one of a key's files, then runs
	// every call on the key. The cases run at once, under one bound.
	type outcome struct {
		name, first string // the file, what the first Acquire returned
	}
	names := []string{localstore.FirstPermit, "wait.AAAAAAAAAAAAAAAA", "grant", "queue", "token", "capacity"}
	steps := make([]atomic.Value, len(names))
	done := make(chan outcome, len(names))
	var fifos []string
	for i, name := range names {
		dir := t.TempDir()
		st, other := newLocal(t, dir, nil), newLocal(t, dir, nil)
		const key = "fifo-key"
		req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
		release(t, acquire(t, st, req)) // makes the key's files
		fifo := filepath.Join(dir, key, name)
		if err := os.Remove(fifo); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("remove %s: %v", fifo, err)
		}
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatalf("mkfifo %s: %v", fifo, err)
		}
		fifos = append(fifos, fifo)

		// While one store holds the permit, the other's waiting Acquire
		// registers as a waiter.
		step := &steps[i]
		go func() {
			step.Store("no-wait Acquire")
			l, err := st.Acquire(context.Background(), req)
			first := fmt.Sprint(err)
			if l != nil {
				step.Store("waiting Acquire")
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				if l2, err := other.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}); err == nil {
					_ = l2.Release(context.Background())
				}
				cancel()
				_ = l.Release(context.Background())
			}
			step.Store("Status of the key")
			_, _ = st.Status(context.Background(), []string{key})
			step.Store("Status of every key")
			_, _ = st.Status(context.Background(), nil)
			step.Store("")
			done <- outcome{name, first}
		}()
	}
	finished := 0
	t.Cleanup(func() {
		// Let a call stuck opening a FIFO go on, by opening it for
		// writing while it waits.
		for ; finished < len(names); finished++ {
			for waiting := true; waiting; {
				select {
				case <-done:
					waiting = false
				case <-time.After(10 * time.Millisecond):
					for _, fifo := range fifos {
						if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
							syscall.Close(fd)
						}
					}
				}
			}
		}
	})

	bound := time.After(2 * time.Second)
	for finished < len(names) {
		select {
		case o := <-done:
			finished++
			if o.name == localstore.FirstPermit && (!strings.Contains(o.first, "not a regular file") || !strings.Contains(o.first, o.name)) {
				t.Errorf("no-wait Acquire with a FIFO for a permit: got %q, want an error naming %s as not a regular file", o.first, o.name)
			}
		case <-bound:
			var stuck []string
			for i, name := range names {
				if step, _ := steps[i].Load().(string); step != "" {
					stuck = append(stuck, step+" with a FIFO as "+name)
				}
			}
			t.Fatalf("calls on a key with a FIFO planted among its files: got %q still running after 2s, want every one to return", stuck)
		}
	}
}

func TestLocalStatusOfEveryKeySkipsStrayEntries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	hold(t, st, semaphore.Request{Key: "real", Permits: 1, TTL: time.Second})
	// Names no key has: hidden, hashed without a key file, badly escaped.
	for _, name := range []string{".hidden", "#0123abcd", "%zz", "%2e"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatalf("mkdir %s: %v", name, err)
		}
	}
	status, err := st.Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil || len(status) != 1 || status[0].Key != "real" || status[0].Held != 1 {
		t.Fatalf("Status of every key beside entries no key has: got (%+v, %v), want only key \"real\", held 1", status, err)
	}

	// A file is not a key's directory: it is no key, and must not hide
	// the keys that are.
	if err := os.WriteFile(filepath.Join(dir, "stray-file"), nil, 0o600); err != nil {
		t.Fatalf("write stray-file: %v", err)
	}
	status, err = st.Status(ctxTimeout(t, 5*time.Second), nil)
	if err != nil || len(status) != 1 || status[0].Key != "real" {
		t.Fatalf("Status(ctx, nil) with a regular file in the lock directory: got (%+v, %v), want only key \"real\"", status, err)
	}
}

func TestLocalStatusShowsEveryWaiter(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	key := uniqueKey(t)
	hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	// Waiters that start together register together.
	const n = 48
	for i := range n {
		startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{PID: 1000 + i}}, 30*time.Second)
	}
	most := 0
	defer func() {
		if t.Failed() {
			t.Logf("Status showed at most %d of the %d waiters at once", most, n)
		}
	}()
	waitFor(t, 10*time.Second, fmt.Sprintf("Status of a key showing all its %d waiters", n), func() bool {
		pids := map[int]bool{}
		for _, w := range statusOf(t, st, key).Waiters {
			pids[w.PID] = true
		}
		most = max(most, len(pids))
		return len(pids) == n
	})
}

func TestLocalStatusDuringReleaseShowsNoBlankHolder(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	key := uniqueKey(t)
	info := semaphore.HolderInfo{Host: "h", PID: 7, Command: "c"}
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true, Holder: info}

	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l, err := st.Acquire(context.Background(), req); err == nil {
				_ = l.Release(context.Background())
			}
		}
	}()
	var blank []semaphore.Holder
	for range 1000 {
		for _, h := range statusOf(t, st, key).Holders {
			if !reflect.DeepEqual(h.HolderInfo, info) || h.Token == 0 {
				blank = append(blank, h)
			}
		}
		if len(blank) > 0 {
			break
		}
	}
	close(stop)
	<-churned
	if len(blank) > 0 {
		t.Fatalf("Status while a holder releases: got holder %+v, want %+v with its token", blank[0], info)
	}
}

func TestLocalGivenUpWaiterLeavesQueueAlone(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	for i := range 40 {
		key := fmt.Sprintf("%s-%d", uniqueKey(t), i)
		req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}
		h := acquire(t, st, req)

		// First in line, then a second waiter behind it that gives up.
		onWait, waiting := signal()
		first := req
		first.OnWait = func(semaphore.WaitState) { onWait() }
		firstDone, stopFirst := startAcquire(t, st, first, 30*time.Second)
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatalf("first waiter: OnWait not called after 10s, want it waiting")
		}
		_, err := acquireFor(t, st, 5*time.Millisecond, req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second waiter with a 5ms deadline: got %v, want context.DeadlineExceeded", err)
		}
		stopFirst()
		if r := receive(t, firstDone, 10*time.Second, "first waiter after it was canceled"); !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("first waiter after it was canceled: got (%v, %v), want context.Canceled", r.L, r.Err)
		}

		// Nobody waits any more: once the holder is gone, the permit is free.
		release(t, h)
		busy := req
		busy.NoWait = true
		l, err := acquireFor(t, st, 5*time.Second, busy)
		if err != nil {
			// A wait given up inside a long-lived process takes the queue
			// lock for an instant once its turn comes; a caller that will
			// not wait must not take that for a line.
			t.Fatalf("no-wait Acquire of a free permit after a waiter behind another gave up (round %d): got %v, want a permit", i, err)
		}
		release(t, l)
	}
}

func TestLocalStoppedGrantHolderBlocksNoOneForever(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	release(t, l)

	// A process stopped while it holds the grant lock (for a fraction of a millisecond,
	// normally) must not make waits that end or signals unanswerable.
	grant, err := os.OpenFile(filepath.Join(dir, key, "grant"), os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open grant: %v", err)
	}
	defer grant.Close()
	if err := syscall.Flock(int(grant.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock grant: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	type outcome struct {
		what string
		err  error
	}
	done := make(chan outcome, 3)
	go func() {
		_, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
		done <- outcome{"waiting Acquire", err}
	}()
	go func() {
		// Without a deadline: a caller that will not wait must not.
		_, err := st.Acquire(context.Background(), semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true})
		done <- outcome{"no-wait Acquire", err}
	}()
	go func() {
		s, err := st.Status(context.Background(), []string{key})
		if err == nil && (len(s) != 1 || s[0].Held != 0 || s[0].Capacity != 1) {
			err = fmt.Errorf("got %+v, want the key free, capacity 1", s)
		}
		done <- outcome{"Status", err}
	}()
	for range 3 {
		select {
		case o := <-done:
			switch o.what {
			case "waiting Acquire":
				if !errors.Is(o.err, context.DeadlineExceeded) {
					t.Errorf("waiting Acquire while the grant lock is held: got %v, want context.DeadlineExceeded", o.err)
				}
			case "no-wait Acquire":
				if !errors.Is(o.err, semaphore.ErrBusy) || !strings.Contains(o.err.Error(), "grant lock") {
					t.Errorf("no-wait Acquire while the grant lock is held: got %v, want ErrBusy saying the grant lock is held", o.err)
				}
			case "Status":
				if o.err != nil {
					t.Errorf("Status while the grant lock is held: %v, want the key's status, read without the lock", o.err)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Acquire or Status while the grant lock is held: still running after 10s, want each to return")
		}
	}
}

func TestDefaultLockDirIgnoresEnvironment(t *testing.T) {
	want := localstore.DefaultDir()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	if got := localstore.DefaultDir(); got != want {
		t.Errorf("DefaultLockDir with another environment: got %q, want %q as without", got, want)
	}
	if os.Geteuid() == 0 && want != localstore.SystemDir {
		t.Errorf("DefaultLockDir as root: got %q, want %q", want, localstore.SystemDir)
	}
}

// A permit held is held, whether or not a record says by whom: status,
// which semrun key drain reads, counts it as a grant does, by a holder
// not listed, until it is given back.
func TestLocalPermitWithoutRecordIsUnlisted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 2, TTL: time.Second, NoWait: true}
	l := acquire(t, st, req)
	listed := acquire(t, st, req)
	for _, name := range dirNames(t, filepath.Join(dir, key)) {
		if strings.HasPrefix(name, "held.") {
			if err := os.Remove(filepath.Join(dir, key, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	release(t, listed)
	if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 0 || s.Unlisted != 1 {
		t.Errorf("Status with a permit held and no record of its holder: got %+v, want 1 held, by 1 holder not listed", s)
	}
	release(t, l)
	if s := statusOf(t, st, key); s.Held != 0 || s.Unlisted != 0 {
		t.Errorf("Status once it was given back: got %+v, want nothing held, no holder", s)
	}
}
