//go:build unix

package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// fixture is a real redis-server with a store and one held lease.
type fixture struct {
	srv   *redistest.Server
	store *semaphore.Redis
	lease semaphore.Lease
	key   string
}

func newFixture(t *testing.T, ttl time.Duration) *fixture {
	t.Helper()
	srv := redistest.New(t)
	store, err := semaphore.NewRedis(semaphore.RedisOptions{URL: srv.URL(), Prefix: "test:", ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key := strings.ReplaceAll(t.Name(), "/", "-")
	lease, err := store.Acquire(context.Background(), semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, store: store, lease: lease, key: key}
}

// flushAll drops every key, as a store that lost its data would.
func (f *fixture) flushAll(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: f.srv.Addr})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Errorf("FLUSHALL: %v", err)
	}
}

func (f *fixture) held(t *testing.T) int {
	t.Helper()
	st, err := f.store.Status(context.Background(), []string{f.key})
	if err != nil {
		t.Fatal(err)
	}
	return st[0].Held
}

func spec(t *testing.T, ttl time.Duration, args ...string) runner.Spec {
	return runner.Spec{
		Args: args, Env: os.Environ(),
		Stdin: nil, Stdout: os.Stdout, Stderr: os.Stderr,
		TTL: ttl, KillAfter: runner.MaxKillAfter(ttl) / 2,
		Warnf: t.Logf,
	}
}

func TestExitStatusAndSignal(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	res, err := runner.Run(context.Background(), spec(t, 3*time.Second, "sh", "-c", "exit 7"), f.lease)
	if err != nil || res.ExitCode != 7 || res.Signal != 0 || res.Lost != nil {
		t.Fatalf("got %+v, %v; want exit 7", res, err)
	}
	res, err = runner.Run(context.Background(), spec(t, 3*time.Second, "sh", "-c", "kill -USR2 $$"), f.lease)
	if err != nil || res.Signal != syscall.SIGUSR2 {
		t.Fatalf("got %+v, %v; want death by SIGUSR2", res, err)
	}
}

func TestStartErrors(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	var se *runner.StartError
	_, err := runner.Run(context.Background(), spec(t, 3*time.Second, "no-such-command-here"), f.lease)
	if !errors.As(err, &se) || !se.NotFound {
		t.Fatalf("got %v, want a not-found StartError", err)
	}
	if err := runner.Check(t.TempDir()); !errors.As(err, &se) || se.NotFound {
		t.Fatalf("Check(directory) = %v, want a cannot-execute StartError", err)
	}
}

// The lease outlives its TTL while the child runs, renewed every TTL/3.
func TestRenewalKeepsThePermit(t *testing.T) {
	f := newFixture(t, time.Second)
	res, err := runner.Run(context.Background(), spec(t, time.Second, "sleep", "2.5"), f.lease)
	if err != nil || res.ExitCode != 0 || res.Lost != nil {
		t.Fatalf("got %+v, %v; want a clean exit with the permit kept", res, err)
	}
	if got := f.held(t); got != 1 {
		t.Fatalf("got %d holders after 2.5 TTLs, want 1", got)
	}
}

// Forwarded signals reach the child's process group, grandchildren too.
func TestForwardsSignals(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	signals := make(chan os.Signal, 1)
	s := spec(t, 3*time.Second, "sh", "-c", `trap 'exit 9' USR1; touch "$0"; while :; do sleep 0.05; done`, ready)
	s.Signals = signals
	go func() {
		waitFile(t, ready)
		signals <- syscall.SIGUSR1
	}()
	res, err := runner.Run(context.Background(), s, f.lease)
	if err != nil || res.ExitCode != 9 {
		t.Fatalf("got %+v, %v; want exit 9 from the child's trap", res, err)
	}
}

func TestLostPermitTerminatesChild(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.flushAll(t)
	}()
	res, err := runner.Run(context.Background(), spec(t, 3*time.Second, "sleep", "30"), f.lease)
	if err != nil || !res.Terminated || res.Signal != syscall.SIGTERM || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want the child terminated for a lost permit", res, err)
	}
}

func TestLostPermitContinue(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	go func() {
		time.Sleep(200 * time.Millisecond)
		f.flushAll(t)
	}()
	s := spec(t, 3*time.Second, "sh", "-c", "sleep 1.5; exit 4")
	s.OnLost = runner.Continue
	res, err := runner.Run(context.Background(), s, f.lease)
	if err != nil || res.Terminated || res.ExitCode != 4 || !errors.Is(res.Lost, semaphore.ErrLost) {
		t.Fatalf("got %+v, %v; want the child to finish with 4, the loss reported", res, err)
	}
}

// A child that ignores SIGTERM is killed after the grace period.
func TestKillAfter(t *testing.T) {
	f := newFixture(t, 3*time.Second)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	go func() {
		waitFile(t, ready)
		f.flushAll(t)
	}()
	s := spec(t, 3*time.Second, "sh", "-c", `trap '' TERM; touch "$0"; while :; do sleep 0.05; done`, ready)
	s.KillAfter = 200 * time.Millisecond
	res, err := runner.Run(context.Background(), s, f.lease)
	if err != nil || !res.Terminated || res.Signal != syscall.SIGKILL {
		t.Fatalf("got %+v, %v; want SIGKILL after the grace period", res, err)
	}
}

// With the store unreachable (paused), the permit is presumed lost and the
// child is gone before the lease could lapse on the server.
func TestPresumedLossEndsChildBeforeLeaseLapses(t *testing.T) {
	ttl := 3 * time.Second
	f := newFixture(t, ttl)
	if err := f.srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer f.srv.Resume()
	s := spec(t, ttl, "sh", "-c", `trap '' TERM; while :; do sleep 0.05; done`)
	s.KillAfter = 500 * time.Millisecond
	res, err := runner.Run(context.Background(), s, f.lease)
	ended := clock.Now()
	if err != nil || !res.Terminated || !errors.Is(res.Lost, runner.ErrPresumedLost) {
		t.Fatalf("got %+v, %v; want the child stopped for a presumed loss", res, err)
	}
	// The lease's deadline counts from the send time of the last renewal
	// that succeeded, so the server cannot have freed the seat before it.
	if deadline := f.lease.Deadline(); !ended.Before(deadline) {
		t.Fatalf("child ended %v after the lease's earliest lapse, want before it", ended.Sub(deadline))
	}
}

func waitFile(t *testing.T, path string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Errorf("%s did not appear", path)
}

// A store that stalls for a moment around the first renewal (a failover, a
// slow fork for a snapshot) must not cost a healthy job its permit, even with
// the longest grace period allowed: retries fit before the child must stop.
func TestRenewalRidesOutShortStall(t *testing.T) {
	ttl := 3 * time.Second
	f := newFixture(t, ttl)
	go func() {
		time.Sleep(runner.RenewEvery(ttl) - 100*time.Millisecond)
		c := redis.NewClient(&redis.Options{Addr: f.srv.Addr})
		defer c.Close()
		if err := c.Do(context.Background(), "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
			t.Errorf("CLIENT PAUSE: %v", err)
		}
	}()
	s := spec(t, ttl, "sleep", "2")
	s.KillAfter = runner.MaxKillAfter(ttl)
	res, err := runner.Run(context.Background(), s, f.lease)
	if err != nil || res.Lost != nil || res.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want the job to keep its permit through a 300ms stall", res, err)
	}
}

// Work the child leaves running in its group holds the permit: Run returns
// the child's status only once that work is gone too (Linux, where semrun
// adopts the orphans).
func TestRunWaitsForWhatTheChildLeftInItsGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux adopts orphans")
	}
	f := newFixture(t, 3*time.Second)
	bgpid := filepath.Join(t.TempDir(), "bgpid")
	res, err := runner.Run(context.Background(), spec(t, 3*time.Second, "sh", "-c", `sleep 0.3 & echo $! > "$0"; exit 3`, bgpid), f.lease)
	if err != nil || res.ExitCode != 3 || res.Lost != nil {
		t.Fatalf("got %+v, %v; want exit 3", res, err)
	}
	b, err := os.ReadFile(bgpid)
	if err != nil {
		t.Fatalf("read the background pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("background pid %q: %v", b, err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the child's background work (pid %d) when Run returned: kill -0 gave %v, want ESRCH (gone and reaped)", pid, err)
	}
}

// shortLease is a lease handed over with little of it left: its deadline
// is near, and each renewal extends it by the TTL from when it was sent.
type shortLease struct {
	mu       sync.Mutex
	ttl      time.Duration
	deadline clock.Instant
	renewals int
}

func (l *shortLease) Deadline() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *shortLease) Renew(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewals++
	l.deadline = clock.Now().Add(l.ttl)
	return nil
}

// A lease with less left than a renewal period and the grace need is
// renewed at once, not presumed lost before anyone tried to renew it.
func TestShortLeaseRenewedBeforeItCountsAsLost(t *testing.T) {
	const ttl = 3 * time.Second
	l := &shortLease{ttl: ttl, deadline: clock.Now().Add(2 * time.Second)}
	s := spec(t, ttl, "sleep", "1.5")
	s.KillAfter = time.Second // the child would be told to stop 0.7s in
	res, err := runner.Run(context.Background(), s, l)
	if err != nil || res.Lost != nil || res.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want the child to run its 1.5s on a renewed lease", res, err)
	}
	if l.renewals == 0 {
		t.Errorf("renewals: got 0, want at least one")
	}
}
