//go:build unix

package runner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/clock/clocktest"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// The runner runs real children (sh, cat), but its lease is a fake and its
// clock a clocktest.Clock: renewals, the loss of the permit and the kill
// happen when a test advances the clock. Tests assert what the runner does
// (when it renews, which signals reach the child, how Run ends); an alarm
// only tells a test that the runner is ready for the clock to move on
// (alarmAt), so that a change in how the runner times things fails only
// the tests whose behaviour changed. What a child does takes real time,
// and that is waited for with a bound.

const (
	ttl = 30 * time.Second
	// killAfter is the default grace period of these tests: with it, the
	// child is told to stop 30s - 6s - 3s = 21s after the last renewal.
	killAfter = 6 * time.Second
	// patience bounds every wait for the runner to react, in real time: it
	// reacts at once, and the bound only catches a hang (a loaded machine
	// held a reaction up for 2s).
	patience = 30 * time.Second
	// quietFor is how long a test watches for what must not happen.
	quietFor = 500 * time.Millisecond
	// slow bounds every wait for a child process, which a busy machine
	// may start late.
	slow = 10 * time.Second
)

// renewal is what one call of the fake lease's Renew does.
type renewal int

const (
	renewOK   renewal = iota // extends the lease by its TTL from the call
	renewFail                // fails, leaving the permit in doubt
	renewHang                // answers nothing until the call's context ends
	renewLost                // says the permit is gone (semaphore.ErrLost)
	// renewLate extends the lease, but its answer comes only as the
	// call's context ends: it crossed the deadline on its way back.
	renewLate
	// renewRevoked says an operator revoked the permit.
	renewRevoked
	// renewHeld extends the lease once the test sends on the lease's
	// answer, as a store whose reply takes a while; a call whose context
	// ends first fails, extending nothing.
	renewHeld
)

// fakeLease is a lease whose deadline is on the test's clock. Its renewals
// do what its script says, in turn; the script's last entry repeats.
type fakeLease struct {
	clk *clocktest.Clock
	ttl time.Duration
	// calls gets the clock's reading at each call of Renew.
	calls chan clock.Instant
	// inFlight counts the calls of Renew that have not returned.
	inFlight atomic.Int32

	mu       sync.Mutex
	deadline clock.Instant
	script   []renewal
	// bound, when set, is the store's: no renewal goes past it, and none
	// is made at or after it.
	bound clock.Instant
	// never: the lease never lapses; a renewal extends nothing.
	never bool
	// answer lets a renewHeld call answer.
	answer chan struct{}
	// onRenew, when set, is called at each call of Renew, first, with the
	// clock's reading.
	onRenew func(sent clock.Instant)
}

func (l *fakeLease) Deadline() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *fakeLease) Bound() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bound
}

func (l *fakeLease) Renew(ctx context.Context) error {
	l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	sent := l.clk.Now()
	if l.onRenew != nil {
		l.onRenew(sent)
	}
	l.mu.Lock()
	how := renewOK
	if len(l.script) > 0 {
		how = l.script[0]
	}
	if len(l.script) > 1 {
		l.script = l.script[1:]
	}
	if !l.bound.IsZero() && !sent.Before(l.bound) {
		how = renewLost
	}
	if how == renewHeld {
		l.mu.Unlock()
		l.calls <- sent
		select {
		case <-l.answer:
		case <-ctx.Done():
			return fmt.Errorf("renew: %w", context.Cause(ctx))
		}
		l.mu.Lock()
		if d := sent.Add(l.ttl); d.After(l.deadline) {
			l.deadline = d
		}
		l.mu.Unlock()
		return nil
	}
	if (how == renewOK || how == renewLate) && !l.never {
		// A lease is extended from when the renewal was sent, as the
		// store's script does, up to its bound.
		l.deadline = sent.Add(l.ttl)
		if !l.bound.IsZero() && l.deadline.After(l.bound) {
			l.deadline = l.bound
		}
	}
	l.mu.Unlock()
	l.calls <- sent
	switch how {
	case renewOK:
		return nil
	case renewFail:
		return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	case renewHang:
		<-ctx.Done()
		return fmt.Errorf("renew: %w", context.Cause(ctx))
	case renewLate:
		<-ctx.Done()
		return nil
	case renewRevoked:
		return &semaphore.RevokedError{Key: "k", Reason: "rotate keys"}
	default:
		return fmt.Errorf("renew: %w", semaphore.ErrLost)
	}
}

// harness runs one child under a fake lease of ttl, held from start until
// start + ttl, on a fake clock.
type harness struct {
	t     *testing.T
	clk   *clocktest.Clock
	start clock.Instant
	lease *fakeLease
	spec  runner.Spec
	// signals are forwarded by Run, as a semrun that caught them would.
	signals chan os.Signal
	// warnings gets what Run says through Warnf.
	warnings chan string
	// stdin is the child's standard input: closing it ends cat.
	stdin *os.File

	done chan struct{} // closed once Run returned res, err
	res  runner.Result
	err  error
}

func newHarness(t *testing.T, args ...string) *harness {
	t.Helper()
	clk := clocktest.New()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		w.Close()
	})
	// What the children say (sh reports jobs it saw killed) is shown only
	// when the test fails.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer stderr.Close()
		if b, _ := os.ReadFile(stderr.Name()); t.Failed() && len(b) > 0 {
			t.Logf("the child's stderr:\n%s", b)
		}
	})
	h := &harness{
		t: t, clk: clk, start: clk.Now(),
		lease:    &fakeLease{clk: clk, ttl: ttl, calls: make(chan clock.Instant, 1000), deadline: clk.Now().Add(ttl)},
		signals:  make(chan os.Signal, 4),
		warnings: make(chan string, 100),
		stdin:    w,
	}
	h.spec = runner.Spec{
		Args: args, Env: os.Environ(),
		Stdin: r, Stdout: nil, Stderr: stderr,
		TTL: ttl, KillAfter: killAfter,
		Signals: runner.NewSignals(h.signals, func() { t.Error("the job was suspended; want no suspend") }),
		Warnf: func(format string, args ...any) {
			select {
			case h.warnings <- fmt.Sprintf(format, args...):
			default:
			}
		},
		Clock: clk,
		// As semrun runs: the test process starts no other children
		// while Run runs.
		ReapOrphans: true,
	}
	return h
}

// run starts Run. A test that ends before Run returned has the child's
// group killed, so that neither outlives the test.
func (h *harness) run() {
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		h.res, h.err = runner.Run(context.Background(), h.spec, h.lease)
	}()
	h.t.Cleanup(func() {
		select {
		case <-h.done:
			return
		default:
		}
		h.signals <- syscall.SIGKILL
		select {
		case <-h.done:
		case <-time.After(slow):
			h.t.Errorf("Run still running %v after its child's group was killed", slow)
		}
	})
}

// wait waits for Run to return.
func (h *harness) wait() (runner.Result, error) {
	h.t.Helper()
	select {
	case <-h.done:
		return h.res, h.err
	case <-time.After(slow):
		h.t.Fatalf("Run: did not return within %v; pending alarms %v", slow, h.offsets(h.clk.Alarms()))
		return runner.Result{}, nil
	}
}

// graceThenKill takes a stubborn child, told to stop at +at, through its
// grace period: alive to answer a moment before it ends, and the clock
// moved on to its end, when SIGKILL is due.
func (h *harness) graceThenKill(alive string, at time.Duration) {
	h.t.Helper()
	h.alarmAt(at + killAfter)
	h.advanceTo(at + killAfter - time.Millisecond)
	h.signals <- syscall.SIGUSR1 // still alive to answer?
	waitFile(h.t, alive)
	h.running()
	h.advanceTo(at + killAfter)
}

// running fails the test if Run has returned.
func (h *harness) running() {
	h.t.Helper()
	select {
	case <-h.done:
		h.t.Fatalf("Run returned %+v, %v at +%v; want it still running", h.res, h.err, h.clk.Now().Sub(h.start))
	default:
	}
}

// advanceTo moves the clock on to start+at.
func (h *harness) advanceTo(at time.Duration) {
	h.t.Helper()
	d := h.start.Add(at).Sub(h.clk.Now())
	if d < 0 {
		h.t.Fatalf("advanceTo(+%v): the clock is at +%v already", at, h.clk.Now().Sub(h.start))
	}
	h.clk.Advance(d)
}

// alarmAt waits until the runner has an alarm set for start+at: the
// runner has then reacted to what happened before, and the test may move
// the clock on to at. The other alarms pending are none of its business.
func (h *harness) alarmAt(at time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	want := h.start.Add(at)
	err := h.clk.BlockUntilFunc(ctx, func(alarms []clock.Instant) bool { return slices.Contains(alarms, want) })
	if err != nil {
		h.t.Fatalf("at +%v: no alarm for +%v within %v; pending %v", h.clk.Now().Sub(h.start), at, patience, h.offsets(h.clk.Alarms()))
	}
}

// noAlarmsLeft fails the test if Run, which has returned, left an alarm set.
func (h *harness) noAlarmsLeft() {
	h.t.Helper()
	if left := h.clk.Alarms(); len(left) > 0 {
		h.t.Errorf("alarms left set once Run returned: got %v, want none", h.offsets(left))
	}
}

func (h *harness) offsets(alarms []clock.Instant) []time.Duration {
	var d []time.Duration
	for _, a := range alarms {
		d = append(d, a.Sub(h.start))
	}
	return d
}

// expectRenewal waits for a call of Renew, which must come at start+at.
func (h *harness) expectRenewal(at time.Duration) {
	h.t.Helper()
	select {
	case sent := <-h.lease.calls:
		if got := sent.Sub(h.start); got != at {
			h.t.Fatalf("renewal: got one at +%v, want it at +%v", got, at)
		}
	case <-time.After(patience):
		h.t.Fatalf("renewal at +%v: got none within %v, want one", at, patience)
	}
}

// expectNoMoreRenewals fails the test if Renew was called since the last
// renewal expected.
func (h *harness) expectNoMoreRenewals() {
	h.t.Helper()
	select {
	case sent := <-h.lease.calls:
		h.t.Errorf("renewal: got one at +%v, want none", sent.Sub(h.start))
	default:
	}
}

// expectWarning waits for a warning that contains want.
func (h *harness) expectWarning(want string) {
	h.t.Helper()
	select {
	case got := <-h.warnings:
		if !strings.Contains(got, want) {
			h.t.Fatalf("warning: got %q, want one saying %q", got, want)
		}
	case <-time.After(patience):
		h.t.Fatalf("warning %q: got none within %v", want, patience)
	}
}

// expectNoWarning fails the test if Run warned.
func (h *harness) expectNoWarning() {
	h.t.Helper()
	select {
	case got := <-h.warnings:
		h.t.Errorf("warning: got %q, want none", got)
	default:
	}
}

// waitFile waits, in real time and with a bound, for a child to create path.
func waitFile(t *testing.T, path string) {
	t.Helper()
	semaphoretest.WaitFor(t, slow, "the child creating "+filepath.Base(path), func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// stubborn is a shell script that survives SIGTERM and says so: it touches
// $0 once its traps are set, $1 on each SIGTERM, and $2 on each SIGUSR1.
const stubborn = `trap 'touch "$1"' TERM; trap 'touch "$2"' USR1; touch "$0"; while :; do sleep 1 & wait; done`

// stubbornFiles returns the files stubborn touches: ready, termed and alive.
func stubbornFiles(t *testing.T) (ready, termed, alive string) {
	dir := t.TempDir()
	return filepath.Join(dir, "ready"), filepath.Join(dir, "termed"), filepath.Join(dir, "alive")
}

func TestExitStatusPassesThrough(t *testing.T) {
	h := newHarness(t, "sh", "-c", "exit 7")
	h.run()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{ExitCode: 7}) {
		t.Fatalf("got %+v, %v; want exit 7, no signal, nothing lost", res, err)
	}
	h.noAlarmsLeft()
}

func TestDeathBySignalIsReported(t *testing.T) {
	h := newHarness(t, "sh", "-c", "kill -USR2 $$")
	h.run()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{ExitCode: -1, Signal: syscall.SIGUSR2}) {
		t.Fatalf("got %+v, %v; want death by SIGUSR2", res, err)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("\x00\x01 not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noInterpreter := filepath.Join(dir, "script")
	if err := os.WriteFile(noInterpreter, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, command string
		notFound      bool
	}{
		{"not found", "no-such-command-here", true},
		{"a directory", dir, false},
		{"not a program", garbage, false}, // found, but exec fails: ENOEXEC
		// exec fails with ENOENT: not found, as timeout(1) says.
		{"its interpreter missing", noInterpreter, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.command)
			_, err := runner.Run(context.Background(), h.spec, h.lease)
			var se *runner.StartError
			if !errors.As(err, &se) || se.NotFound != tc.notFound || se.Command != tc.command {
				t.Fatalf("Run(%s): got %v, want a StartError with NotFound %v", tc.command, err, tc.notFound)
			}
			if !strings.HasPrefix(se.Error(), tc.command+": ") {
				t.Errorf("StartError: got %q, want it to start with the command", se.Error())
			}
			if n := len(h.lease.calls); n != 0 {
				t.Errorf("renewals: got %d for a child never started, want 0", n)
			}
			h.noAlarmsLeft()
		})
	}
	var se *runner.StartError
	if _, err := runner.Find(dir); !errors.As(err, &se) || se.NotFound {
		t.Errorf("Find(directory): got %v, want a cannot-execute StartError", err)
	}
	if _, err := runner.Find("no-such-command-here"); !errors.As(err, &se) || !se.NotFound {
		t.Errorf("Find(missing): got %v, want a not-found StartError", err)
	}
	if _, err := runner.Find(""); !errors.As(err, &se) || !se.NotFound {
		t.Errorf(`Find(""): got %v, want a not-found StartError`, err)
	}
	if path, err := runner.Find("sh"); err != nil || !filepath.IsAbs(path) {
		t.Errorf("Find(sh): got %q, %v; want its absolute path", path, err)
	}
}

// The file found before the wait is the one started: Run does not look
// the command up again between the grant and the start.
func TestRunStartsThePathFound(t *testing.T) {
	path, err := runner.Find("sh")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, "no-such-command-here", "-c", "exit 9")
	h.spec.Path = path
	h.run()
	if res, err := h.wait(); err != nil || !reflect.DeepEqual(res, runner.Result{ExitCode: 9}) {
		t.Fatalf("got %+v, %v; want the shell found before, exiting 9", res, err)
	}
}

// A lease that aged to half its TTL before Run (semrun was stopped after
// the grant) is renewed before the child starts; if that fails, Run
// returns ErrStale and starts nothing.
func TestRunStartsNothingOnAnAgedLease(t *testing.T) {
	for _, tc := range []struct {
		how     renewal
		started bool
	}{{renewOK, true}, {renewFail, false}, {renewLost, false}} {
		marker := filepath.Join(t.TempDir(), "started")
		h := newHarness(t, "sh", "-c", "touch "+marker)
		h.lease.deadline = h.start.Add(ttl / 2)
		h.lease.script = []renewal{tc.how}
		h.run()
		res, err := h.wait()
		_, statErr := os.Stat(marker)
		switch {
		case tc.started && (err != nil || statErr != nil):
			t.Errorf("renewal %d: got %+v, %v (started: %v); want the child run after the renewal", tc.how, res, err, statErr == nil)
		case !tc.started && (!errors.Is(err, runner.ErrStale) || statErr == nil):
			t.Errorf("renewal %d: got %+v, %v (started: %v); want ErrStale and no child", tc.how, res, err, statErr == nil)
		}
	}
}

// The lease is renewed every TTL/3 of the clock's time, and outlives its
// TTL while the child runs.
func TestRenewsEveryThirdOfTTL(t *testing.T) {
	h := newHarness(t, "cat")
	h.run()
	every := runner.RenewEvery(ttl)
	if every != 10*time.Second {
		t.Fatalf("RenewEvery(%v): got %v, want 10s", ttl, every)
	}
	for i := 1; i <= 4; i++ { // past the TTL, and past 21s after the start
		at := time.Duration(i) * every
		h.alarmAt(at)
		h.advanceTo(at)
		h.expectRenewal(at)
	}
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want a clean exit with the permit kept", res, err)
	}
	h.expectNoMoreRenewals()
	h.expectNoWarning()
	h.noAlarmsLeft()
}

// A lease that never lapses (zero Deadline) is looked at every
// CheckEvery, whatever the TTL, to learn of a revoke; a look that fails,
// or none for far longer than the TTL (semrun stopped, the host
// suspended), presumes nothing lost.
func TestLeaseThatNeverLapsesIsOnlyLookedAt(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	h := newHarness(t, "sh", "-c", `touch "$0"; exec cat`, ready)
	h.lease.deadline, h.lease.never = clock.Instant{}, true
	h.lease.script = []renewal{renewOK, renewFail, renewFail, renewOK}
	h.run()
	waitFile(t, ready)
	for i := 1; i <= 4; i++ {
		at := time.Duration(i) * runner.CheckEvery
		h.alarmAt(at)
		h.advanceTo(at)
		h.expectRenewal(at)
		switch i {
		case 2:
			h.expectWarning("could not look at the permit")
		case 4:
			h.expectWarning("looked at again")
		}
	}
	h.alarmAt(5 * runner.CheckEvery)
	h.advanceTo(10 * ttl)
	h.expectRenewal(10 * ttl)
	h.alarmAt(10*ttl + runner.CheckEvery)
	h.running()
	h.stdin.Close()
	if res, err := h.wait(); err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want a clean exit", res, err)
	}
	h.expectNoMoreRenewals()
	h.expectNoWarning()
	h.noAlarmsLeft()
}

// A lease that never lapses, revoked, ends the child as a loss does, at
// the first look after the revoke.
func TestRevokedLeaseThatNeverLapsesTerminatesChild(t *testing.T) {
	h := newHarness(t, "cat")
	h.lease.deadline, h.lease.never = clock.Instant{}, true
	h.lease.script = []renewal{renewOK, renewRevoked}
	h.run()
	for _, at := range []time.Duration{runner.CheckEvery, 2 * runner.CheckEvery} {
		h.alarmAt(at)
		h.advanceTo(at)
		h.expectRenewal(at)
	}
	res, err := h.wait()
	var revoked *semaphore.RevokedError
	if err != nil || !res.Terminated || res.Signal != syscall.SIGTERM || !errors.As(res.Lost, &revoked) {
		t.Fatalf("got %+v, %v; want the child terminated by SIGTERM for a revoked permit", res, err)
	}
	if got, want := runner.LostWhy(res.Lost), "an operator revoked it: rotate keys"; got != want {
		t.Errorf("LostWhy: got %q, want %q", got, want)
	}
	h.noAlarmsLeft()
}

// Forwarded signals reach the child's process group, grandchildren too.
func TestForwardsSignalsToTheGroup(t *testing.T) {
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	// The child waits for a grandchild that touches $1 on SIGUSR1; the
	// child exits 9 on its own SIGUSR1, once the grandchild is done.
	h := newHarness(t, "sh", "-c", `
		trap 'wait; exit 9' USR1
		sh -c 'trap "touch \"\$1\"; exit 0" USR1; echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; while :; do sleep 1 & wait; done' "$0" "$1" &
		wait`, ready, got)
	h.run()
	killGroupOnFailure(t, readPid(t, ready))
	h.signals <- syscall.SIGUSR1
	res, err := h.wait()
	if err != nil || res.ExitCode != 9 || res.Signal != 0 {
		t.Fatalf("got %+v, %v; want exit 9 from the child's trap", res, err)
	}
	if _, err := os.Stat(got); err != nil {
		t.Errorf("the grandchild's trap: %v, want it to have run", err)
	}
}

// A loss the store reports ends the child with SIGTERM.
func TestLossTerminatesChild(t *testing.T) {
	h := newHarness(t, "cat")
	h.lease.script = []renewal{renewLost}
	h.run()
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	res, err := h.wait()
	if err != nil || !res.Terminated || res.Signal != syscall.SIGTERM || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want the child terminated by SIGTERM for a lost permit", res, err)
	}
	if errors.Is(res.Lost, runner.ErrPresumedLost) {
		t.Errorf("Lost: got %v, want the store's loss, not a presumed one", res.Lost)
	}
	h.noAlarmsLeft()
}

// With Continue, a lost permit is a warning: the child finishes.
func TestLossContinue(t *testing.T) {
	h := newHarness(t, "sh", "-c", "cat; exit 4")
	h.spec.OnLost = runner.Continue
	h.lease.script = []renewal{renewLost}
	h.run()
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.expectWarning("permit lost")
	// Nothing more to renew, give up on or kill: the child runs on.
	h.advanceTo(3 * ttl)
	h.running()
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || res.Terminated || res.ExitCode != 4 || res.Signal != 0 || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want the child to finish with 4, the loss reported", res, err)
	}
	h.expectNoMoreRenewals()
}

// A child that ignores SIGTERM gets SIGKILL once KillAfter has passed, and
// not before.
func TestKillAfterGracePeriod(t *testing.T) {
	ready, termed, alive := stubbornFiles(t)
	h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
	h.lease.script = []renewal{renewLost}
	h.run()
	waitFile(t, ready)
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	waitFile(t, termed)

	h.graceThenKill(alive, 10*time.Second)
	res, err := h.wait()
	if err != nil || !res.Terminated || res.Signal != syscall.SIGKILL || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want SIGKILL after the grace period", res, err)
	}
}

// With renewals that fail or hang (the store unreachable), the permit is
// presumed lost: the child is told to stop at Deadline - KillAfter - Margin
// and is gone before the lease's Deadline, when the store could give the
// permit away.
func TestPresumedLoss(t *testing.T) {
	lossAt := ttl - killAfter - runner.Margin(ttl) // 21s: the renewal at 10s failed
	for _, tc := range []struct {
		name string
		how  renewal
	}{
		{"renewals fail", renewFail},
		{"renewals hang", renewHang},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, termed, alive := stubbornFiles(t)
			h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
			h.lease.script = []renewal{tc.how}
			h.run()
			waitFile(t, ready)
			h.alarmAt(10 * time.Second)
			h.advanceTo(10 * time.Second)
			h.expectRenewal(10 * time.Second)
			h.alarmAt(lossAt)
			h.advanceTo(lossAt - time.Millisecond)
			h.running()

			h.advanceTo(lossAt)
			// Told to stop, SIGKILL due a margin before the lease's end.
			waitFile(t, termed)
			h.alarmAt(ttl - runner.Margin(ttl))
			h.running()
			h.advanceTo(ttl - runner.Margin(ttl))
			res, err := h.wait()
			if err != nil || !res.Terminated || res.Signal != syscall.SIGKILL || !errors.Is(res.Lost, runner.ErrPresumedLost) {
				t.Fatalf("got %+v, %v; want the child killed for a presumed loss", res, err)
			}
			if now, deadline := h.clk.Now(), h.lease.Deadline(); !now.Before(deadline) {
				t.Errorf("child gone at +%v, lease's deadline +%v; want it gone before", now.Sub(h.start), deadline.Sub(h.start))
			}
			h.noAlarmsLeft()
		})
	}
}

// A loss noticed late (semrun was stopped, an alarm fired late) leaves
// less of the grace period: SIGKILL still lands a margin before the lease
// ends, and at once when that is past.
func TestLateLossShortensTheGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		// noticed is when the loss due at 21s is noticed.
		noticed time.Duration
		// killAt is when SIGKILL is due; 0 for at once, without SIGTERM.
		killAt time.Duration
	}{
		{"some grace left", 25 * time.Second, ttl - runner.Margin(ttl)},
		{"none left", 28 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, termed, alive := stubbornFiles(t)
			h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
			h.lease.script = []renewal{renewHang}
			h.run()
			waitFile(t, ready)
			h.alarmAt(10 * time.Second)
			h.advanceTo(10 * time.Second)
			h.expectRenewal(10 * time.Second)
			h.alarmAt(21 * time.Second)
			h.advanceTo(tc.noticed)
			if tc.killAt != 0 {
				waitFile(t, termed)
				h.alarmAt(tc.killAt)
				h.running()
				h.advanceTo(tc.killAt)
			}
			res, err := h.wait()
			if err != nil || !res.Terminated || res.Signal != syscall.SIGKILL || !errors.Is(res.Lost, runner.ErrPresumedLost) {
				t.Fatalf("got %+v, %v; want the child killed for a presumed loss", res, err)
			}
		})
	}
}

// A store that stalls for a moment around a renewal (a failover, a slow
// fork for a snapshot) costs a healthy job nothing: the failed renewal is
// retried sooner (TTL/12, at least 50ms, and so that three tries fit before
// the child must stop), and one success keeps the permit, even with the
// longest grace period allowed.
func TestFailedRenewalRetriedSooner(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		ttl, kill time.Duration
		// first is when the first renewal is due, retry when it is
		// retried, lossAt when the child must stop without a renewal.
		first, retry, lossAt time.Duration
		// next is the renewal after the retry succeeded; nextLossAt is
		// when the child would be told to stop without it (not asserted:
		// TestPresumedLoss times a loss).
		next, nextLossAt time.Duration
		// left is what is left of the lease at first; 0 is its TTL.
		left time.Duration
	}{
		{"TTL/12", 30 * time.Second, killAfter, 10 * time.Second, 12500 * ms, 21 * time.Second, 22500 * ms, 33500 * ms, 0},
		// With the longest grace, the child must stop 15s in: the first
		// renewal is due at half that, and retried a third of the rest later.
		{"longest grace", 30 * time.Second, runner.MaxKillAfter(30 * time.Second), 7500 * ms, 10 * time.Second, 15 * time.Second, 17500 * ms, 25 * time.Second, 0},
		{"at least 50ms", 300 * ms, 10 * ms, 100 * ms, 150 * ms, 260 * ms, 250 * ms, 410 * ms, 0},
		// Handed over with 27s left, the child must stop 12s in: the first
		// renewal is due at half that, and retried a third of the rest
		// later, sooner than TTL/12.
		{"three tries fit", 30 * time.Second, runner.MaxKillAfter(30 * time.Second), 6 * time.Second, 8 * time.Second, 12 * time.Second, 15500 * ms, 23 * time.Second, 27 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "cat")
			h.spec.TTL, h.spec.KillAfter = tc.ttl, tc.kill
			h.lease.ttl, h.lease.deadline = tc.ttl, h.start.Add(tc.ttl)
			if tc.left != 0 {
				h.lease.deadline = h.start.Add(tc.left)
			}
			h.lease.script = []renewal{renewFail, renewOK}
			h.run()
			h.alarmAt(tc.first)
			h.advanceTo(tc.first)
			h.expectRenewal(tc.first)
			h.expectWarning("renewal failed")
			h.alarmAt(tc.retry)
			h.advanceTo(tc.retry)
			h.expectRenewal(tc.retry)
			h.expectWarning("renewal succeeded again, after 1 failed attempt")
			// The child is no longer to stop at lossAt: the permit is
			// kept, and renewed on time (past lossAt, but at 50ms).
			h.alarmAt(tc.next)
			h.advanceTo(tc.next)
			h.expectRenewal(tc.next)
			h.stdin.Close()
			res, err := h.wait()
			if err != nil || !reflect.DeepEqual(res, runner.Result{}) {
				t.Fatalf("got %+v, %v; want the job to keep its permit through the stall", res, err)
			}
			h.expectNoWarning()
		})
	}
}

// A renewal under way when the child ends is called off: Run returns only
// once it has, and it is no failure to warn about.
func TestRenewalUnderWayEndsWithRun(t *testing.T) {
	h := newHarness(t, "cat")
	h.lease.script = []renewal{renewHang}
	h.run()
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want a clean exit", res, err)
	}
	if n := h.lease.inFlight.Load(); n != 0 {
		t.Errorf("renewals under way when Run returned: got %d, want 0", n)
	}
	h.expectNoWarning()
	h.noAlarmsLeft()
}

// A renewal that succeeds just as the child is due to be told to stop
// keeps the permit, whichever Run reads first: the alarm, or the renewal.
func TestRenewalAsTheChildIsDueToStop(t *testing.T) {
	h := newHarness(t, "cat")
	h.lease.script = []renewal{renewLate, renewOK}
	h.run()
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.alarmAt(21 * time.Second) // the call's deadline
	h.advanceTo(21 * time.Second)
	// Renewed from 10s: the child is to stop at 31s; the next renewal
	// comes halfway there.
	h.alarmAt(26 * time.Second)
	h.advanceTo(26 * time.Second)
	h.expectRenewal(26 * time.Second)
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want the job to keep its permit", res, err)
	}
}

// A child terminated for a lost permit takes what it left in its group
// with it: that must not outlive the lease either.
func TestTerminatedChildTakesItsGroupAlong(t *testing.T) {
	dir := t.TempDir()
	ready, bgPid := filepath.Join(dir, "ready"), filepath.Join(dir, "bg")
	h := newHarness(t, "sh", "-c", `
		(trap '' TERM; touch "$0"; while :; do sleep 1 & wait; done) &
		echo $! > "$1.tmp" && mv "$1.tmp" "$1"
		cat`, ready, bgPid)
	h.lease.script = []renewal{renewLost}
	h.run()
	waitFile(t, ready)
	bg := readPid(t, bgPid)
	killGroupOnFailure(t, bg)
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	// The grace period is not over (its alarm is not advanced to): the
	// group is killed as the child ends.
	res, err := h.wait()
	if err != nil || !res.Terminated || res.Signal != syscall.SIGTERM || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want the child terminated by SIGTERM for a lost permit", res, err)
	}
	if runtime.GOOS == "linux" { // elsewhere, init reaps it
		if err := syscall.Kill(bg, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("the child's background work (pid %d) when Run returned: kill -0 gave %v, want ESRCH (gone and reaped)", bg, err)
		}
	}
}

// A lease handed over with little left (less than a renewal period and
// the grace the child needs) is renewed at once, before it could count as
// lost.
func TestShortLeaseRenewedBeforeItCountsAsLost(t *testing.T) {
	h := newHarness(t, "cat")
	h.spec.KillAfter = 10 * time.Second
	h.lease.deadline = h.start.Add(20 * time.Second)
	h.run()
	// The child would be told to stop 7s in: the renewal comes at half that.
	h.alarmAt(3500 * time.Millisecond)
	h.advanceTo(3500 * time.Millisecond)
	h.expectRenewal(3500 * time.Millisecond)
	// Renewed to +33.5s: the child must stop at +20.5s, the next renewal
	// comes halfway there.
	h.alarmAt(12 * time.Second)
	h.advanceTo(12 * time.Second)
	h.expectRenewal(12 * time.Second)
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want the child to run on a renewed lease", res, err)
	}
}

// Work the child leaves running in its group holds the permit: Run renews
// it meanwhile, and returns the child's status only once that work is gone
// too (Linux, where semrun adopts the orphans).
func TestRunWaitsForWhatTheChildLeftInItsGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux adopts orphans")
	}
	dir := t.TempDir()
	childPid, bgPid, release := filepath.Join(dir, "child"), filepath.Join(dir, "bg"), filepath.Join(dir, "release")
	h := newHarness(t, "sh", "-c", `
		(while [ ! -e "$2" ]; do sleep 0.01; done) &
		echo $! > "$1.tmp" && mv "$1.tmp" "$1"
		echo $$ > "$0.tmp" && mv "$0.tmp" "$0"
		exit 3`, childPid, bgPid, release)
	h.run()
	h.alarmAt(10 * time.Second)
	// The child itself exits at once, and is reaped.
	bg := lingering(t, childPid, bgPid)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.running()

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := h.wait()
	if err != nil || !reflect.DeepEqual(res, runner.Result{ExitCode: 3}) {
		t.Fatalf("got %+v, %v; want exit 3", res, err)
	}
	if err := syscall.Kill(bg, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the child's background work (pid %d) when Run returned: kill -0 gave %v, want ESRCH (gone and reaped)", bg, err)
	}
}

// killGroupOnFailure kills the process group of pid, a process the child
// started, if the test fails: what a runner that failed to end it left
// behind must not outlive the test.
func killGroupOnFailure(t *testing.T, pid int) {
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return // gone already
	}
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	waitFile(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid in %s: got %q, want a number", filepath.Base(path), b)
	}
	return pid
}

// A command that ended by itself keeps its status when the permit is found
// lost only later (semrun was stopped past the loss point, say): what it
// left in its group is killed, as the lease ends, but the command was not
// terminated, and its status is its own.
func TestLossAfterTheChildExitedKeepsItsStatus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux adopts orphans")
	}
	dir := t.TempDir()
	childPid, bgPid := filepath.Join(dir, "child"), filepath.Join(dir, "bg")
	h := newHarness(t, "sh", "-c", `
		sleep 300 &
		echo $! > "$1.tmp" && mv "$1.tmp" "$1"
		echo $$ > "$0.tmp" && mv "$0.tmp" "$0"
		exit 3`, childPid, bgPid)
	h.lease.script = []renewal{renewHang}
	h.run()
	h.alarmAt(10 * time.Second)
	bg := lingering(t, childPid, bgPid)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	lossAt := ttl - killAfter - runner.Margin(ttl)
	h.alarmAt(lossAt)
	h.advanceTo(lossAt)
	res, err := h.wait()
	if err != nil || res.ExitCode != 3 || res.Terminated || !errors.Is(res.Lost, runner.ErrPresumedLost) {
		t.Fatalf("got %+v, %v; want exit 3, not terminated, the permit lost", res, err)
	}
	if err := syscall.Kill(bg, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("what the child left (pid %d) after the loss: kill -0 gave %v, want ESRCH (killed)", bg, err)
	}
}

// Renewals failing in a row are said twice in all: when they start
// failing, and when one works again; not at each retry between.
func TestFailingRenewalsSaidOnceAndOnRecovery(t *testing.T) {
	h := newHarness(t, "cat")
	h.lease.script = []renewal{renewFail, renewFail, renewOK}
	h.run()
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.expectWarning("renewal failed, retrying")
	h.alarmAt(12500 * time.Millisecond) // TTL/12 later
	h.advanceTo(12500 * time.Millisecond)
	h.expectRenewal(12500 * time.Millisecond)
	h.alarmAt(15 * time.Second)
	h.expectNoWarning()
	h.advanceTo(15 * time.Second)
	h.expectRenewal(15 * time.Second)
	h.expectWarning("renewal succeeded again, after 2 failed attempts")
	h.stdin.Close()
	if res, err := h.wait(); err != nil || !reflect.DeepEqual(res, runner.Result{}) {
		t.Fatalf("got %+v, %v; want the job to keep its permit", res, err)
	}
	h.expectNoWarning()
}

// lingering waits until a child that wrote its pid to childPid, and that of
// what it left in its group to bgPid, has exited and been reaped, and
// returns what it left, which is killed if the test fails.
func lingering(t *testing.T, childPid, bgPid string) int {
	t.Helper()
	child, bg := readPid(t, childPid), readPid(t, bgPid)
	killGroupOnFailure(t, bg)
	semaphoretest.WaitFor(t, slow, fmt.Sprintf("child (pid %d) exited and reaped", child), func() bool {
		return syscall.Kill(child, 0) != nil
	})
	return bg
}
