package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// These tests cover what the rules of holds (semaphoretest) cannot: a
// keeper that is a process of its own, killed; records forged or mangled
// by whoever can write the lock directory; status with runs attached;
// records kept, then removed; an end written by another member of a
// shared lock directory.

// keeperInfo is the keeper the tests name when they make a hold.
var keeperInfo = semaphore.HolderInfo{Host: "keeper-host", PID: 4242, Command: "semrun acquire"}

// The helper process of these tests keeps a hold as semrun's keeper does:
// it attaches to the hold of its handle (or takes a permit of its key and
// makes it a hold first), says "holding HANDLE TOKEN", renews every third
// of the hold's TTL and, once the hold has ended, lets go and exits; it
// exits too when its stdin closes. With keeperEndEnv, it ends the hold of
// its handle instead, says "ended STATE NOW" and exits.
const (
	keeperDirEnv    = "SEMRUN_TEST_KEEPER_DIR"
	keeperKeyEnv    = "SEMRUN_TEST_KEEPER_KEY"
	keeperHandleEnv = "SEMRUN_TEST_KEEPER_HANDLE"
	keeperEndEnv    = "SEMRUN_TEST_KEEPER_END"
)

func TestHelperKeeper(t *testing.T) {
	dir := os.Getenv(keeperDirEnv)
	if dir == "" {
		return // not the helper process
	}
	fail := func(err error) { fmt.Printf("error %v\n", err) }
	st, err := localstore.New(localstore.Options{Dir: dir})
	if err != nil {
		fail(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var h semaphore.Handle
	var taken semaphore.Lease
	if s := os.Getenv(keeperHandleEnv); s != "" {
		h, err = semaphore.ParseHandle(s)
	} else {
		me := semaphore.HolderInfo{Host: "helper", PID: os.Getpid(), Command: "TestHelperKeeper"}
		taken, err = st.Acquire(ctx, semaphore.Request{Key: os.Getenv(keeperKeyEnv), Permits: 1, TTL: time.Second, NoWait: true, Holder: me})
		if err == nil {
			h, err = st.Hold(ctx, taken, me)
		}
	}
	if err != nil {
		fail(err)
		return
	}
	if os.Getenv(keeperEndEnv) != "" {
		end, now, err := st.EndHold(ctx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
		if err != nil {
			fail(err)
			return
		}
		fmt.Printf("ended %s %v\n", end.State, now)
		return
	}
	k, info, err := st.Attach(ctx, h, false)
	if err != nil {
		fail(err)
		return
	}
	if taken != nil {
		abandon(taken) // as semrun acquire exits
	}
	fmt.Printf("holding %s %d\n", h, info.Token)
	stdin := make(chan struct{})
	go func() {
		_, _ = os.Stdin.Read(make([]byte, 1))
		close(stdin)
	}()
	tick := time.NewTicker(info.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-stdin:
			return
		case <-tick.C:
			var ended *semaphore.HoldEndedError
			if err := k.Renew(context.Background()); errors.As(err, &ended) {
				_ = k.Release(context.Background())
				return
			}
		}
	}
}

// keeperProcess starts the helper process as a keeper in dir, with env
// added to its environment, and returns it with the handle and token it
// said. It is killed, if still running, when t ends.
func keeperProcess(t *testing.T, bin string, cred *syscall.SysProcAttr, dir string, env ...string) (*holderProcess, semaphore.Handle, int64) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperKeeper$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), keeperDirEnv+"="+dir), env...)
	cmd.SysProcAttr = cred
	line, p := startHelper(t, cmd)
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "holding" {
		t.Fatalf("keeper process said %q, want \"holding HANDLE TOKEN\"", line)
	}
	h, err := semaphore.ParseHandle(f[1])
	if err != nil {
		t.Fatalf("keeper process said handle %q: %v", f[1], err)
	}
	token, _ := strconv.ParseInt(f[2], 10, 64)
	return p, h, token
}

// attachKeeper starts a keeper process for the hold h in dir.
func attachKeeper(t *testing.T, dir string, h semaphore.Handle) *holderProcess {
	t.Helper()
	p, _, _ := keeperProcess(t, os.Args[0], nil, dir, keeperHandleEnv+"="+h.String())
	return p
}

// makeHold takes a permit of req and makes it a hold kept by keeperInfo.
func makeHold(t *testing.T, st semaphore.Store, req semaphore.Request) (semaphore.Handle, semaphore.Lease) {
	t.Helper()
	l := acquire(t, st, req)
	h, err := st.Hold(ctxTimeout(t, 5*time.Second), l, keeperInfo)
	if err != nil {
		t.Fatalf("Hold: got error %v", err)
	}
	return h, l
}

// heldKey is a test's own lock directory, a store on it, and a hold of a
// permit of req made there.
type heldKey struct {
	dir string
	st  *localstore.Store
	req semaphore.Request
	h   semaphore.Handle
	// l is the permit the hold was made of, as semrun acquire has it.
	l semaphore.Lease
}

// newHeldKey makes a hold, of weight, of a key with permits, in a lock
// directory of t's own.
func newHeldKey(t *testing.T, permits, weight int) heldKey {
	t.Helper()
	k := heldKey{dir: t.TempDir(), req: semaphore.Request{Key: uniqueKey(t), Permits: permits, Weight: weight, TTL: time.Second}}
	k.st = newLocal(t, k.dir, nil)
	k.h, k.l = makeHold(t, k.st, k.req)
	return k
}

// exits waits for p to exit, as a keeper does once its hold has ended.
func exits(t *testing.T, p *holderProcess) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("keeper process: still running 10s after the end, want it gone")
	}
}

// attach attaches to h, failing t on an error; the lease is released
// when t ends.
func attach(t *testing.T, st semaphore.Store, h semaphore.Handle) (semaphore.Lease, semaphore.HoldInfo) {
	t.Helper()
	l, info, err := st.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach: got error %v", err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l, info
}

// lostAs checks that err says the hold was lost, with why.
func lostAs(t *testing.T, what string, err error, why string) {
	t.Helper()
	var ended *semaphore.HoldEndedError
	if !errors.As(err, &ended) || !notHeld(ended.End.State) || !strings.Contains(ended.End.Why, why) {
		t.Fatalf("%s: got %v, want the hold lost or unknown: %s", what, err, why)
	}
}

// endLost checks that EndHold of h finds the hold lost, not ended by it.
func endLost(t *testing.T, st semaphore.Store, h semaphore.Handle, what string) {
	t.Helper()
	end, now, err := st.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || now || !notHeld(end.State) {
		t.Fatalf("EndHold %s: got (%+v, %v, %v), want lost or unknown, not now", what, end, now, err)
	}
}

// notHeld tells the states of a hold a forged or broken record stands
// for: lost (a record there, but not one), or unknown (none there).
func notHeld(s semaphore.HoldState) bool {
	return s == semaphore.HoldLost || s == semaphore.HoldUnknown
}

// busy checks that a no-wait Acquire of req is refused.
func busy(t *testing.T, st semaphore.Store, req semaphore.Request, what string) {
	t.Helper()
	req.NoWait = true
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("no-wait Acquire %s: got %v, want ErrBusy", what, err)
	}
}

// The permit of a hold is held by whichever processes are attached, not by
// the acquire that made it: killed, keeper and run free it, and the hold
// is lost.
func TestLocalHoldKilledKeeperAndRun(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 1, 1)
	st, req, h, l := hk.st, hk.req, hk.h, hk.l
	keeper := attachKeeper(t, hk.dir, h)
	run := attachKeeper(t, hk.dir, h)
	abandon(l) // semrun acquire exits
	busy(t, st, req, "beside a hold kept by another process")
	s := statusOf(t, st, req.Key)
	want := keeperInfo
	want.Hold = true
	if s.Held != 1 || len(s.Holders) != 1 || !reflect.DeepEqual(s.Holders[0].HolderInfo, want) {
		t.Fatalf("Status of a hold kept by other processes: got %+v, want one holder, %+v", s, want)
	}

	keeper.kill(t)
	busy(t, st, req, "with the keeper killed and a run attached")
	again, _, err := st.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach with the keeper killed and a run attached: got %v, want the hold", err)
	}
	release(t, again)
	run.kill(t)
	waitFor(t, 10*time.Second, "the hold's permit free once its processes are gone", func() bool {
		return statusOf(t, st, req.Key).Held == 0
	})
	_, _, err = st.Attach(ctxTimeout(t, 5*time.Second), h, false)
	lostAs(t, "Attach once keeper and run were killed", err, "had gone")
	endLost(t, st, h, "once keeper and run were killed")
	hold(t, st, req)
}

// A hold whose processes are all gone is lost, even once someone else
// took its permit: no one joins that holder on it. A permit makes one hold.
func TestLocalLapsedHoldsPermitRetaken(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 1, 1)
	st, req, h, l := hk.st, hk.req, hk.h, hk.l
	if _, err := st.Hold(ctxTimeout(t, 5*time.Second), l, keeperInfo); err == nil {
		t.Fatalf("a second Hold of one permit: got a handle, want an error")
	}
	k, _ := attach(t, st, h)
	abandon(l)
	abandon(k)
	other := hold(t, st, req)
	_, _, err := st.Attach(ctxTimeout(t, 5*time.Second), h, false)
	lostAs(t, "Attach to a lapsed hold whose permit another holds", err, "had gone")
	if s := statusOf(t, st, req.Key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != other.Token() || s.Holders[0].Hold {
		t.Fatalf("Status: got %+v, want the new holder alone", s)
	}
}

// A release from another process waits for the keeper to let go: once it
// returns, the permit is free.
func TestLocalReleaseFreesThePermitOfAKeeperProcess(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 1, 1)
	keeper := attachKeeper(t, hk.dir, hk.h)
	abandon(hk.l)
	busy(t, hk.st, hk.req, "beside a hold")

	releaser := newLocal(t, hk.dir, nil) // semrun release, a process of its own
	end, now, err := releaser.EndHold(ctxTimeout(t, 10*time.Second), hk.h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || !now || end.State != semaphore.HoldReleased {
		t.Fatalf("EndHold: got (%+v, %v, %v), want released now", end, now, err)
	}
	exits(t, keeper)
	hold(t, hk.st, hk.req)
}

// EndHold waits for the processes attached to let go, a little: not
// past their release.
func TestLocalEndHoldWaitsForAttachedToLetGo(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 1, 1)
	k, _ := attach(t, newLocal(t, hk.dir, nil), hk.h) // the keeper, through a store of its own
	abandon(hk.l)
	done := make(chan error, 1)
	go func() {
		_, _, err := newLocal(t, hk.dir, nil).EndHold(context.Background(), hk.h, semaphore.HoldEnd{State: semaphore.HoldReleased})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("EndHold with the keeper attached: returned (%v) before the keeper let go, want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	release(t, k)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("EndHold: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("EndHold: not returned 10s after the keeper let go")
	}
	hold(t, hk.st, hk.req)
}

// A hold is one holder, its keeper, however many runs are attached, and
// takes its weight once.
func TestLocalStatusShowsAHoldOnce(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 3, 2)
	dir, st, req, h := hk.dir, hk.st, hk.req, hk.h
	k, info := attach(t, st, h)
	abandon(hk.l)
	attach(t, newLocal(t, dir, nil), h)
	attach(t, newLocal(t, dir, nil), h)
	s := statusOf(t, st, req.Key)
	if s.Held != 2 || len(s.Holders) != 1 {
		t.Fatalf("Status of a hold with a keeper and two runs: got %+v, want one holder taking 2", s)
	}
	if got := s.Holders[0]; !got.Hold || got.Host != keeperInfo.Host || got.PID != keeperInfo.PID || got.Weight != 2 || got.Permits != 3 || got.Token != k.Token() || got.Token != info.Token {
		t.Errorf("Status holder: got %+v, want the keeper's, taking 2 of 3, token %d", got, k.Token())
	}
	for _, name := range dirNames(t, filepath.Join(dir, req.Key)) {
		if strings.HasPrefix(name, "held.") {
			t.Errorf("files of a held key: got %s, want no holder's record beside the hold's", name)
		}
	}
	hold(t, st, semaphore.Request{Key: req.Key, Permits: 3, TTL: time.Second, NoWait: true})
	busy(t, st, semaphore.Request{Key: req.Key, Permits: 3, TTL: time.Second}, "of a 4th permit of 3")
}

// A record is untrusted: one forged, copied, changed or mangled by
// whoever can write the lock directory never lets a process attach to
// permits that are not its hold's, never hangs nor panics; it is a lost
// hold.
func TestLocalForgedHoldRecords(t *testing.T) {
	t.Parallel()
	hk := newHeldKey(t, 2, 1)
	dir, st, req, x, l := hk.dir, hk.st, hk.req, hk.h, hk.l
	path := func(h semaphore.Handle) string { return filepath.Join(dir, req.Key, localstore.HoldFileName(h.Secret)) }
	xk, _ := attach(t, st, x)
	abandon(l)
	real, err := os.ReadFile(path(x))
	if err != nil {
		t.Fatalf("read the hold's record: %v", err)
	}
	if bytes := string(real); strings.Contains(bytes, x.Secret) {
		t.Fatalf("the hold's record %q holds its secret, want only its hash in its name", bytes)
	}
	forged := func(content string) semaphore.Handle {
		t.Helper()
		h := semaphore.Handle{Store: x.Store, Key: x.Key, Secret: semaphore.NewSecret()}
		if err := os.WriteFile(path(h), []byte(content), 0o600); err != nil {
			t.Fatalf("write a forged record: %v", err)
		}
		return h
	}

	// The forger's own hold, on the other permit, its record then changed
	// to name the first hold's permit.
	z, l2 := makeHold(t, st, req)
	zk, _ := attach(t, st, z)
	abandon(l2)
	zrec, err := os.ReadFile(path(z))
	if err != nil {
		t.Fatalf("read the second hold's record: %v", err)
	}
	moved := strings.Replace(string(zrec), `"seats":[[1,1]]`, `"seats":[[0,1]]`, 1)
	if moved == string(zrec) {
		t.Fatalf("the second hold's record %q: want it on permit 1", zrec)
	}
	if err := os.WriteFile(path(z), []byte(moved), 0o600); err != nil {
		t.Fatalf("rewrite the second hold's record: %v", err)
	}
	_, _, err = st.Attach(ctxTimeout(t, 5*time.Second), z, false)
	lostAs(t, "Attach to a hold whose record names another hold's permit", err, "had gone")
	lostAs(t, "Renew of a hold whose record names another permit", zk.Renew(ctxTimeout(t, 5*time.Second)), "")

	fifo := semaphore.Handle{Store: x.Store, Key: x.Key, Secret: semaphore.NewSecret()}
	if err := syscall.Mkfifo(path(fifo), 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	link := semaphore.Handle{Store: x.Store, Key: x.Key, Secret: semaphore.NewSecret()}
	if err := os.Symlink(path(x), path(link)); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	for _, c := range []struct {
		what string
		h    semaphore.Handle
		why  string
	}{
		{"a copy of a live hold's record", forged(string(real)), "had gone"},
		{"garbage", forged("{\"v\":1,\x00"), "malformed"},
		{"an empty record", forged(""), "malformed"},
		{"a record too long", forged(strings.Repeat(" ", 70<<10) + string(real)), "malformed"},
		{"a record of another version", forged(strings.Replace(string(real), `"v":1`, `"v":2`, 1)), "malformed"},
		{"a record of another state", forged(strings.Replace(string(real), `"state":"held"`, `"state":"mine"`, 1)), "malformed"},
		{"permits past the capacity", forged(strings.Replace(string(real), `"seats":[[0,1]]`, `"seats":[[5,1]]`, 1)), "malformed"},
		{"more permits than its weight", forged(strings.Replace(string(real), `"seats":[[0,1]]`, `"seats":[[0,2]]`, 1)), "malformed"},
		{"a record of another key", forged(strings.Replace(string(real), `"key":"`, `"key":"x`, 1)), "no acquire printed it"},
		{"a FIFO", fifo, "malformed"},
		{"a symbolic link to a live hold's record", link, "malformed"},
	} {
		_, _, err := st.Attach(ctxTimeout(t, 5*time.Second), c.h, false)
		lostAs(t, "Attach to "+c.what, err, c.why)
		endLost(t, st, c.h, "of "+c.what)
	}
	warn := func(string, ...any) {}
	if _, err := newLocal(t, dir, warn).Status(ctxTimeout(t, 5*time.Second), []string{req.Key}); err != nil {
		t.Fatalf("Status among forged records: %v", err)
	}
	// The second hold's permit is still held by its keeper, which its
	// record, changed, no longer shows: a holder not listed.
	s := statusOf(t, st, req.Key)
	if s.Held != 2 || len(s.Holders) != 1 || s.Holders[0].Token != xk.Token() || s.Unlisted != 1 {
		t.Fatalf("Status: got %+v, want both permits held, the first hold the one holder shown, one not listed", s)
	}
	busy(t, st, req, "beside two holds and forged records")
	if err := xk.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew of the first hold among forged records: got %v, want nil", err)
	}
}

// A hold's record stays a day once no one holds it, for release to learn
// how it ended, and then goes; a live hold's never does.
func TestLocalHoldRecordsKeptADay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	endNow := func(h semaphore.Handle) {
		t.Helper()
		if _, now, err := st.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"}); err != nil || !now {
			t.Fatalf("EndHold: got (%v, %v), want it ended now", now, err)
		}
	}
	ended := func(key string) semaphore.Handle {
		t.Helper()
		h, l := makeHold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: time.Second})
		k, _ := attach(t, st, h)
		abandon(l)
		endNow(h)
		release(t, k)
		return h
	}
	statusAll := func() {
		t.Helper()
		if _, err := st.Status(ctxTimeout(t, 5*time.Second), nil); err != nil {
			t.Fatalf("Status: %v", err)
		}
	}

	old := ended("ended")
	age(t, filepath.Join(dir, old.Key), localstore.StaleAfter+time.Minute)
	statusAll()
	if end, now, err := st.EndHold(ctxTimeout(t, 5*time.Second), old, semaphore.HoldEnd{State: semaphore.HoldLost}); err != nil || now || end.State != semaphore.HoldReleased {
		t.Fatalf("EndHold of a hold ended over an hour ago: got (%+v, %v, %v), want it released, as it was", end, now, err)
	}
	// Status removes the record, and the key's directory once its events
	// are old.
	age(t, filepath.Join(dir, old.Key), localstore.HoldKept+time.Minute)
	statusAll()
	if _, err := os.Stat(filepath.Join(dir, old.Key, localstore.HoldFileName(old.Secret))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of a hold ended over a day ago, after Status: got %v, want it removed", err)
	}
	endLost(t, st, old, "of a hold ended over a day ago")
	age(t, filepath.Join(dir, old.Key), semaphore.EventLife+time.Minute)
	statusAll()
	if _, err := os.Stat(filepath.Join(dir, old.Key)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory of a key unused for EventLife after its hold's record went: got %v, want it removed", err)
	}

	const key = "live"
	live, l := makeHold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: time.Second})
	k, _ := attach(t, st, live)
	abandon(l)
	gone := ended(key)
	draft := filepath.Join(dir, key, "hold-draft.AAAAAAAAAAAAAAAA") // left by a Hold killed midway
	if err := os.WriteFile(draft, nil, 0o600); err != nil {
		t.Fatalf("write %s: %v", draft, err)
	}
	age(t, filepath.Join(dir, key), localstore.HoldKept+time.Minute)
	if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != k.Token() {
		t.Fatalf("Status of a hold held over a day: got %+v, want it", s)
	}
	for _, name := range []string{localstore.HoldFileName(gone.Secret), filepath.Base(draft)} {
		if _, err := os.Stat(filepath.Join(dir, key, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, over a day old, after Status: got %v, want it removed", name, err)
		}
	}
	if err := k.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew of a hold held over a day: got %v, want nil", err)
	}
	attach(t, st, live)
}

// In a lock directory a group shares, any member with the handle ends a
// hold another made, and its keeper, a process of that other member,
// lets the permit go.
func TestLocalHoldEndedByAnotherMember(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	key := uniqueKey(t)
	keeper, h, _ := keeperProcess(t, bin, asMember(otherUID), dir, keeperKeyEnv+"="+key)
	if got := holdAs(t, bin, thirdUID, dir, key); !strings.Contains(got, "no permit available") {
		t.Fatalf("another member's Acquire beside the hold: got %q, want it busy", got)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperKeeper$", "-test.count=1")
	cmd.Env = append(os.Environ(), keeperDirEnv+"="+dir, keeperHandleEnv+"="+h.String(), keeperEndEnv+"=1")
	cmd.SysProcAttr = asMember(thirdUID)
	if got, _ := startHelper(t, cmd); got != "ended released true" {
		t.Fatalf("EndHold by another member: got %q, want \"ended released true\"", got)
	}
	exits(t, keeper)
	if got := holdAs(t, bin, thirdUID, dir, key); !strings.HasPrefix(got, "holding ") {
		t.Fatalf("another member's Acquire once the hold ended: got %q, want it holding", got)
	}
}
