//go:build unix

package localstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

var eventsOf = semaphoretest.EventsOf

// ofKind are the events of kind among events.
func ofKind(events []semaphore.Event, kind semaphore.EventKind) []semaphore.Event {
	var out []semaphore.Event
	for _, e := range events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// countsOf are key's counters, failing t when it has none.
func countsOf(t *testing.T, st semaphore.Store, key string) semaphore.Counts {
	t.Helper()
	c := statusOf(t, st, key).Counts
	if c == nil {
		t.Fatalf("Status(%q): got no counts, want some", key)
	}
	return *c
}

// A holder that vanished without giving its permit back (its files
// closed unreleased, or its process killed) is a loss, which the sweep
// after a grant finds and counts once, however many sweeps follow.
func TestLocalVanishedHolderIsOneLoss(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	who := semaphore.HolderInfo{Host: "h", PID: 77, Command: "job", Label: "gone"}
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 2, TTL: time.Second, Holder: who})
	id := statusOf(t, st, key).Holders[0].ID
	abandon(l)
	next := semaphore.Request{Key: key, Permits: 2, TTL: time.Second}
	for range 3 {
		release(t, acquire(t, st, next))
	}
	lost := ofKind(eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}}), semaphore.EventLost)
	if len(lost) != 1 || lost[0].Holder != id || !reflect.DeepEqual(lost[0].HolderInfo, who) || lost[0].Token != l.Token() || lost[0].Weight != 1 ||
		!slices.Equal(lost[0].Numbers, []int{0}) {
		t.Errorf("lost events after a holder vanished and 3 grants: got %+v, want one, of holder %s (%+v), token %d, slot 0", lost, id, who, l.Token())
	}
	if c := countsOf(t, st, key); c.Losses != 1 || c.Grants != 4 || c.Held.Count() != 3 {
		t.Errorf("counts: got %+v, want 1 loss, 4 grants, 3 holds given back", c)
	}

	// A process killed while it holds.
	child := startHolder(t, dir, "killed")
	child.kill(t)
	release(t, acquire(t, st, semaphore.Request{Key: "killed", Permits: 1, TTL: time.Second}))
	release(t, acquire(t, st, semaphore.Request{Key: "killed", Permits: 1, TTL: time.Second}))
	lost = ofKind(eventsOf(t, st, semaphore.EventQuery{Keys: []string{"killed"}}), semaphore.EventLost)
	if len(lost) != 1 || lost[0].PID != child.cmd.Process.Pid || lost[0].Token != child.token {
		t.Errorf("lost events after a holder was killed: got %+v, want one, of pid %d, token %d", lost, child.cmd.Process.Pid, child.token)
	}
	if c := countsOf(t, st, "killed"); c.Losses != 1 {
		t.Errorf("losses after a holder was killed: got %d, want 1", c.Losses)
	}
}

// A store with NoEvents writes no line in a key's log, but counts.
func TestLocalNoEventsStillCounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := localstore.New(localstore.Options{Dir: dir, NoEvents: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const key = "quiet"
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{Label: "nightly"}}
	l := acquire(t, st, req)
	busyReq := req
	busyReq.NoWait = true
	if _, err := acquireFor(t, st, 5*time.Second, busyReq); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire with the permit held: got %v, want ErrBusy", err)
	}
	if err := l.Finish(ctxTimeout(t, 5*time.Second), 0); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}}); len(got) != 0 {
		t.Errorf("events of a store with NoEvents: got %+v, want none", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, key, "events")); err != nil || len(b) != 0 {
		t.Errorf("its log: got %q (%v), want it empty", b, err)
	}
	if c := countsOf(t, st, key); c.Grants != 1 || c.Busy != 1 || c.Held.Count() != 1 || c.Wait.Count() != 1 {
		t.Errorf("counts of a store with NoEvents: got %+v, want 1 grant, 1 busy answer, 1 hold given back", c)
	}
}

// A follower is told of every event once, in order, across the
// rewrites that keep a log to about MaxEvents lines: by its writers
// (another file renamed in place), by a member who may not replace it
// (in place), and one cut short (in place, the old lines after the new
// not cut off).
func TestLocalFollowerSeesEveryEventOnceAcrossRewrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	log := filepath.Join(dir, key, "events")
	f := semaphoretest.Follow(t, st, semaphore.EventQuery{Keys: []string{key}})
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}
	runs := 0
	// recorded is how many events the log took: a writer that waits more
	// than 100ms for its lock drops its event and its count together, and
	// a follower reading under that lock while a loaded machine holds it
	// up makes it wait that long.
	recorded := func() int {
		c := statusOf(t, st, key).Counts
		if c == nil {
			return 0
		}
		return int(c.Grants) + int(c.Held.Count())
	}
	run := func(n int) {
		t.Helper()
		for range n {
			release(t, acquire(t, st, req))
			// The follower may lag, by less than the log keeps.
			if runs++; runs%100 == 0 {
				waitFor(t, time.Minute, fmt.Sprintf("the follower told of %d runs", runs), f.AtLeast(recorded()))
			}
		}
		waitFor(t, time.Minute, fmt.Sprintf("the follower told of %d runs", runs), f.AtLeast(recorded()))
	}
	// Past two rewrites by its writers.
	run(3 * semaphore.MaxEvents / 2)
	inode := func() uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(log, &st); err != nil {
			t.Fatalf("stat %s: %v", log, err)
		}
		return st.Ino
	}
	before := inode()
	// Rewritten in place, as a member who may not replace the file does:
	// its last 10 lines, and so many lines in its stats.
	rewrite := func(cut bool) {
		t.Helper()
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("read %s: %v", log, err)
		}
		lines := bytes.SplitAfter(b, []byte("\n"))
		kept := bytes.Join(lines[len(lines)-11:], nil)
		stats := filepath.Join(dir, key, "stats")
		if b, err = os.ReadFile(stats); err != nil {
			t.Fatalf("read %s: %v", stats, err)
		}
		counts := strings.Fields(string(b)) // version, last, lines, ...
		if len(counts) < 3 {
			t.Fatalf("read %s: got %q, want its counts", stats, b)
		}
		counts[2] = "10"
		write(t, stats, strings.Join(counts, " ")+"\n")
		f, err := os.OpenFile(log, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open %s: %v", log, err)
		}
		defer f.Close()
		if _, err := f.WriteAt(kept, 0); err != nil {
			t.Fatalf("write %s: %v", log, err)
		}
		if !cut {
			return // as a writer that died before it cut the old lines off
		}
		if err := f.Truncate(int64(len(kept))); err != nil {
			t.Fatalf("truncate %s: %v", log, err)
		}
	}
	rewrite(true)
	run(50)
	rewrite(false)
	run(50)
	if after := inode(); after != before {
		t.Fatalf("inode of the log: got %d, want %d: the rewrites in place must have been in place", after, before)
	}
	if err := f.Stop(t); err != nil {
		t.Errorf("Events following, once its context ended: got %v, want nil", err)
	}
	got := f.Told()
	if want := recorded(); len(got) != want {
		t.Fatalf("events followed: got %d, want the %d recorded (of %d runs), each grant and release once", len(got), want, runs)
	}
	var last int64
	if len(got) == 2*runs {
		for i, e := range got {
			want := semaphore.EventGrant
			if i%2 == 1 {
				want = semaphore.EventRelease
			}
			if e.Kind != want || i%2 == 1 && e.Token != got[i-1].Token || i%2 == 0 && e.Token <= last || i > 0 && !e.Time.After(got[i-1].Time) {
				t.Fatalf("event %d followed: got %+v after %+v, want a %s, a grant with a new token, times rising", i, e, got[max(i-1, 0)], want)
			}
			last = e.Token
		}
	} else {
		// Some were dropped: each of the others once, oldest first.
		t.Logf("%d of %d events dropped as they were written", 2*runs-len(got), 2*runs)
		type once struct {
			kind  semaphore.EventKind
			token int64
		}
		seen := map[once]bool{}
		for i, e := range got {
			k := once{e.Kind, e.Token}
			if seen[k] || i > 0 && !e.Time.After(got[i-1].Time) {
				t.Fatalf("event %d followed: got %+v after %+v, want each event once, times rising", i, e, got[max(i-1, 0)])
			}
			seen[k] = true
			last = max(last, e.Token)
		}
	}

	// History, read after the rewrite cut short, has each event once.
	history := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if len(history) == 0 || history[len(history)-1].Token != last || len(history) > semaphore.MaxEvents {
		t.Fatalf("history: got %d events, want at most %d, the last of token %d", len(history), semaphore.MaxEvents, last)
	}
	for i := 1; i < len(history); i++ {
		if !history[i].Time.After(history[i-1].Time) {
			t.Fatalf("history: got %+v after %+v, want each event once, oldest first", history[i], history[i-1])
		}
	}
}

// A key's events and stats files are anyone's to write in a directory a
// group shares, and no one's to trust: what is not a log or counters
// semrun could have written, a file that is no regular file of one link,
// or another user's, or one a stopped writer keeps locked, is skipped.
// Grants, releases, busy answers, Status and Events go on, none waiting
// long, and no file but the key's own is written.
func TestLocalHostileEventFilesBreakNothing(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(t *testing.T, path string){
		"garbage": func(t *testing.T, path string) {
			write(t, path, "not json\n{\"t\":\x00\xff}\n1 -5 0\n{\"t\":1,\"e\":\"grant\",\"id\":\"../../etc\"}\n")
		},
		"a huge line": func(t *testing.T, path string) {
			write(t, path, strings.Repeat("9", 3<<20))
		},
		"absurd values": func(t *testing.T, path string) {
			if filepath.Base(path) == "stats" {
				// Counters at their limits stay there.
				const most = "9223372036854775807"
				write(t, path, "1 "+most+" 0 "+most+" 0 0 0 0 0 "+most+" "+most+strings.Repeat(" 0", 14)+" 0"+strings.Repeat(" 0", 15)+"\n")
				return
			}
			write(t, path, `{"t":9223372036854775807,"e":"grant"}`+"\n"+`{"t":5,"e":"release","held":-1,"exit":999}`+"\n"+
				`{"t":6,"e":"busy","why":"`+strings.Repeat("x", 5000)+`"}`+"\n"+`{"t":7,"e":"grant","id":"../../etc"}`+"\n")
		},
		"a symbolic link": func(t *testing.T, path string) {
			remove(t, path)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"a hard link": func(t *testing.T, path string) {
			remove(t, path)
			if err := os.Link(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"a FIFO": func(t *testing.T, path string) {
			remove(t, path)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			// Let a call stuck opening it go on, once the test failed.
			t.Cleanup(func() {
				if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Close(fd)
				}
			})
		},
		"another user's": func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			write(t, path, "")
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		},
		"locked by a stopped writer": func(t *testing.T, path string) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
		},
	}
	for _, file := range []string{"events", "stats"} {
		for what, planted := range plant {
			t.Run(file+" "+what, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				var warned semaphoretest.Warnings
				st := newLocal(t, dir, warned.Warnf)
				const key = "k"
				req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{Label: "mine"}}
				release(t, acquire(t, st, req)) // makes the key's files
				path := filepath.Join(dir, key, file)
				planted(t, path)
				// Read as it is, but a FIFO, which a read would wait on.
				untouched := what == "a symbolic link" || what == "a hard link" || what == "another user's"
				var before fileState
				if untouched {
					before = stateOf(t, path)
				}

				done := make(chan error, 1)
				go func() { done <- everyCall(st, req) }()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("calls on a key whose %s file is %s: %v", file, what, err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("calls on a key whose %s file is %s: still running after 20s, want them done", file, what)
				}
				if b, err := os.ReadFile(outside); err != nil || string(b) != "precious\n" {
					t.Errorf("the file outside the key: got %q (%v), want it untouched", b, err)
				}
				if untouched {
					if after := stateOf(t, path); !after.equal(before) {
						t.Errorf("%s: got %v, want it untouched, %v", path, after, before)
					}
				}
				// A file that cannot be read is said, naming it.
				switch what {
				case "a symbolic link", "a hard link", "a FIFO":
					if lines := warned.Take(); !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, path) }) {
						t.Errorf("lines said: got %q, want one naming %s", lines, path)
					}
				}
				if fi, err := os.Lstat(path); what == "a FIFO" && (err != nil || fi.Mode()&os.ModeNamedPipe == 0) {
					t.Errorf("%s: got %v (%v), want the FIFO left as it was", path, fi, err)
				}
			})
		}
	}
}

// everyCall runs, on the key of req, every call that writes or reads
// its events and counters: a grant, a busy answer, a release with an
// exit status, Status and Events. An event read back must be one of
// req's holder. Bounded: a call that hangs is its caller's to time out.
func everyCall(st semaphore.Store, req semaphore.Request) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req.NoWait = true
	l, err := st.Acquire(ctx, req)
	if err != nil {
		return fmt.Errorf("Acquire: %w", err)
	}
	if _, err := st.Acquire(ctx, req); !errors.Is(err, semaphore.ErrBusy) {
		return fmt.Errorf("no-wait Acquire with the permit held: got %v, want ErrBusy", err)
	}
	if err := l.Finish(ctx, 0); err != nil {
		return fmt.Errorf("Finish: %w", err)
	}
	if _, err := st.Status(ctx, []string{req.Key}); err != nil {
		return fmt.Errorf("Status: %w", err)
	}
	var foreign []semaphore.Event
	err = st.Events(ctx, semaphore.EventQuery{Keys: []string{req.Key}}, func(e semaphore.Event) error {
		if e.Label != req.Holder.Label || e.Holder != "" && len(e.Holder) != 10 {
			foreign = append(foreign, e)
		}
		return nil
	})
	if err != nil || len(foreign) > 0 {
		return fmt.Errorf("Events: got %v, and %+v, want nil and only this holder's", err, foreign)
	}
	if l, err = st.Acquire(ctx, req); err != nil {
		return fmt.Errorf("Acquire once released: %w", err)
	}
	return l.Release(ctx)
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// In a lock directory a group shares, a member reads what happened to a
// key as root and the other members do; and a member who may not
// replace the log, which is root's, keeps it to about MaxEvents lines
// in place.
func TestLocalGroupMembersReadEvents(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	st := newLocal(t, dir, nil)
	const key = "seen"
	req := semaphore.Request{Key: key, Permits: 2, TTL: time.Second, Holder: semaphore.HolderInfo{Label: "root"}}
	release(t, acquire(t, st, req)) // root's key: every member uses it
	if got := holdAsOf(t, bin, otherUID, dir, key, 2); !strings.HasPrefix(got, "holding ") {
		t.Fatalf("a member's Acquire: got %q, want it holding", got)
	}
	if got, want := eventsAs(t, bin, thirdUID, dir, key, "read"), "events grant,release,grant"; got != want {
		t.Errorf("another member's Events: got %q, want %q", got, want)
	}
	for _, file := range []string{"events", "stats"} {
		var fst syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, key, file), &fst); err != nil || fst.Uid != 0 || fst.Gid != sharedGID || fst.Mode&0o777 != 0o660 {
			t.Errorf("%s: got uid %d gid %d mode %o (%v), want root's, the group's, 0660", file, fst.Uid, fst.Gid, fst.Mode&0o777, err)
		}
	}

	runs := semaphore.MaxEvents
	if got := eventsAs(t, bin, thirdUID, dir, key, "runs "+strconv.Itoa(runs)); got != "done" {
		t.Fatalf("a member's %d runs: got %q, want done", runs, got)
	}
	got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}})
	if len(got) < semaphore.MaxEvents*9/10 || len(got) > semaphore.MaxEvents || got[len(got)-1].Kind != semaphore.EventRelease {
		t.Errorf("root's Events after a member's %d runs: got %d events, want about %d, the last a release", runs, len(got), semaphore.MaxEvents)
	}
	b, err := os.ReadFile(filepath.Join(dir, key, "events"))
	if lines := bytes.Count(b, []byte("\n")); err != nil || lines > semaphore.MaxEvents*5/4 {
		t.Errorf("the log after a member's %d runs: got %d lines (%v), want at most %d", runs, lines, err, semaphore.MaxEvents*5/4)
	}
	if c := countsOf(t, st, key); c.Grants != int64(2+runs) {
		t.Errorf("grants counted: got %d, want %d", c.Grants, 2+runs)
	}
}

// The helper process of TestLocalGroupMembersReadEvents does, to the key
// helperKeyEnv of the lock directory helperDirEnv, what helperEventsEnv
// says: "read" says "events" and the kinds of the key's events, "runs N"
// takes and gives back a permit N times and says "done"; else "error
// ...".
const helperEventsEnv = "SEMRUN_TEST_EVENTS"

func TestHelperEvents(t *testing.T) {
	op := os.Getenv(helperEventsEnv)
	if op == "" {
		return // not the helper process
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := os.Getenv(helperKeyEnv)
	st, err := localstore.New(localstore.Options{Dir: os.Getenv(helperDirEnv)})
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	verb, arg, _ := strings.Cut(op, " ")
	switch verb {
	case "read":
		var kinds []string
		err = st.Events(ctx, semaphore.EventQuery{Keys: []string{key}}, func(e semaphore.Event) error {
			kinds = append(kinds, string(e.Kind))
			return nil
		})
		if err == nil {
			fmt.Printf("events %s\n", strings.Join(kinds, ","))
			return
		}
	case "runs":
		n, _ := strconv.Atoi(arg)
		for range n {
			var l semaphore.Lease
			if l, err = st.Acquire(ctx, semaphore.Request{Key: key, Permits: 2, TTL: time.Second, NoWait: true}); err != nil {
				break
			}
			if err = l.Release(ctx); err != nil {
				break
			}
		}
		if err == nil {
			fmt.Println("done")
			return
		}
	default:
		err = fmt.Errorf("no such operation %q", verb)
	}
	fmt.Printf("error %v\n", err)
}

// eventsAs has a helper process running as uid do op to key in dir (see
// TestHelperEvents), and returns what it said.
func eventsAs(t *testing.T, bin string, uid int, dir, key, op string) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperEvents$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperKeyEnv+"="+key, helperEventsEnv+"="+op)
	cmd.SysProcAttr = asMember(uid)
	out, err := cmd.Output()
	got, _, _ := strings.Cut(string(out), "\n")
	if err != nil {
		t.Fatalf("%s as uid %d: %v (said %q)", op, uid, err, got)
	}
	return got
}

// A grant's sweep that finds many holders' files left behind (or files
// a member planted to look like theirs) notes their losses under one
// lock of the stats file: with that lock kept by a stopped process, the
// grant, and the line behind it, wait for it once, not once a file (64
// times 100ms, before). Not parallel: a process waits for at most 64
// such locks at once, which other tests' stopped writers would take.
func TestLocalSweepWaitsOnceForStatsLock(t *testing.T) {
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}
	release(t, acquire(t, st, req)) // makes the key's files
	const planted = 100
	for i := range planted {
		write(t, filepath.Join(dir, key, fmt.Sprintf("held.planted%03d", i)), `{"id":"AAAAAAAAAA","permits":1,"weight":1}`+"\n")
	}
	stats, err := os.Open(filepath.Join(dir, key, "stats"))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	if err := syscall.Flock(int(stats.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l := acquire(t, st, req)
	took := time.Since(start)
	release(t, l)
	if took > 3*time.Second {
		t.Errorf("a grant that swept %d holders' files, the stats file locked: took %v, want it to wait for the lock once (100ms)", planted, took)
	}
	if left := slices.ContainsFunc(dirNames(t, filepath.Join(dir, key)), func(n string) bool { return strings.HasPrefix(n, "held.planted") }); left {
		t.Errorf("holders' files left after the sweep: want them all removed")
	}
}

// A holder revoked twice is one revoke, as the first reason stands: one
// event, with it, and one count.
func TestLocalRevokedTwiceIsOneRevoke(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	l := acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
	defer release(t, l)
	id := statusOf(t, st, key).Holders[0].ID
	ctx := ctxTimeout(t, 10*time.Second)
	for _, reason := range []string{"first", "second"} {
		if err := st.Revoke(ctx, key, id, reason, false); err != nil {
			t.Fatalf("Revoke (%s): %v", reason, err)
		}
	}
	revokes := ofKind(eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}}), semaphore.EventRevoke)
	if len(revokes) != 1 || revokes[0].Reason != "first" {
		t.Errorf("revoke events of a holder revoked twice: got %+v, want one, of reason %q", revokes, "first")
	}
	if c := countsOf(t, st, key); c.Revokes != 1 {
		t.Errorf("revokes counted: got %d, want 1", c.Revokes)
	}
}

// Keys lists only names that can be keys: a directory named after a key
// with control characters, or bytes not UTF-8, which semrun never makes,
// is someone else's, and Events of every key does not show it.
func TestLocalKeysAreKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	release(t, acquire(t, st, semaphore.Request{Key: "real", Permits: 1, TTL: time.Second}))
	for _, name := range []string{"%1B%5D0%3Bowned%07", "%FF%FE", "%0Afake"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "events"), fmt.Sprintf(`{"t":%d,"e":"busy"}`+"\n", time.Now().UnixMicro()))
	}
	keys, err := st.Keys(ctxTimeout(t, 10*time.Second))
	if err != nil || !slices.Equal(keys, []string{"real"}) {
		t.Errorf("Keys: got %q (%v), want [real]", keys, err)
	}
	for _, e := range eventsOf(t, st, semaphore.EventQuery{}) {
		if e.Key != "real" {
			t.Errorf("Events of every key: got %+v, want only key real's", e)
		}
	}
}

// A key unused for an hour keeps its events and counters until they are
// EventLife old: last night's job is still there in the morning.
func TestLocalIdleKeyKeepsItsEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	release(t, acquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
	age(t, filepath.Join(dir, key), localstore.StaleAfter+time.Minute)
	if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got := eventsOf(t, st, semaphore.EventQuery{Keys: []string{key}}); len(got) != 2 {
		t.Errorf("events of a key unused for an hour, after Status: got %+v, want its grant and release", got)
	}
	if keys, err := st.Keys(ctxTimeout(t, 5*time.Second)); err != nil || !slices.Contains(keys, key) {
		t.Errorf("Keys of a key unused for an hour: got (%q, %v), want it listed", keys, err)
	}
	age(t, filepath.Join(dir, key), semaphore.EventLife+time.Minute)
	if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
		t.Fatalf("Status: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory of a key whose events are EventLife old, after Status: got %v, want it removed", err)
	}
}
