//go:build unix

package runner_test

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// At MaxRuntime of run time the child's group gets SIGTERM, then SIGKILL
// once KillAfter has passed, while the lease is renewed on: RanOut, not a
// loss.
func TestMaxRuntimeStopsTheChild(t *testing.T) {
	ready, termed, alive := stubbornFiles(t)
	h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
	h.spec.MaxRuntime = 15 * time.Second
	h.run()
	waitFile(t, ready)
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.alarmAt(15 * time.Second)
	h.advanceTo(15 * time.Second)
	waitFile(t, termed)
	h.graceThenKill(alive, 15*time.Second)
	res, err := h.wait()
	if err != nil || !res.RanOut || res.Terminated || res.Lost != nil || res.Signal != syscall.SIGKILL {
		t.Fatalf("got %+v, %v; want the child killed at MaxRuntime + KillAfter, RanOut, no loss", res, err)
	}
	h.noAlarmsLeft()
}

// A child that ends before MaxRuntime keeps its status, and no alarm is left.
func TestMaxRuntimeNotReached(t *testing.T) {
	h := newHarness(t, "sh", "-c", "cat; exit 3")
	h.spec.MaxRuntime = time.Hour
	h.spec.WarnAfter = time.Hour
	h.run()
	h.alarmAt(10 * time.Second)
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || res.RanOut || res.ExitCode != 3 {
		t.Fatalf("got %+v, %v; want the child's own status 3", res, err)
	}
	h.noAlarmsLeft()
	h.expectNoWarning()
}

// WarnAfter says once that the command runs long; nothing else changes.
func TestWarnAfterSaysItOnce(t *testing.T) {
	h := newHarness(t, "cat")
	h.spec.WarnAfter = 5 * time.Second
	h.run()
	h.alarmAt(10 * time.Second) // the first renewal's, armed before the clock moves
	h.alarmAt(5 * time.Second)
	h.advanceTo(5 * time.Second)
	h.expectWarning("the command has run for 5s (--warn-after)")
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.running()
	h.stdin.Close()
	res, err := h.wait()
	if err != nil || res.RanOut || res.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want the child's own status", res, err)
	}
	h.expectNoWarning()
}

// A lease that lasts to its bound (the store renews it no further) stops
// the child at the bound less the kill-after and the margin, as at
// MaxRuntime: RanOut, not a loss, and the SIGKILL lands before the lease
// ends. Renewals go on at their pace, not as fast as they can.
func TestBoundStopsTheChildAsMaxRuntime(t *testing.T) {
	ready, termed, alive := stubbornFiles(t)
	h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
	bound := 20 * time.Second
	out := bound - semaphore.Overrun(killAfter, ttl) // 13s
	h.lease.bound = h.start.Add(bound)
	h.lease.deadline = h.start.Add(bound)
	h.run()
	waitFile(t, ready)
	h.alarmAt(10 * time.Second)
	h.advanceTo(10 * time.Second)
	h.expectRenewal(10 * time.Second)
	h.alarmAt(out)
	// Not told to stop before its run-out, as a lease presumed lost would
	// be at its deadline less the kill-after and the margin (+11s): no
	// SIGKILL is due at +17s.
	h.advanceTo(out - time.Millisecond)
	early := h.start.Add(bound - killAfter - runner.Margin(ttl) + killAfter)
	ctx, cancel := context.WithTimeout(context.Background(), quietFor)
	defer cancel()
	if h.clk.BlockUntilFunc(ctx, func(alarms []clock.Instant) bool { return slices.Contains(alarms, early) }) == nil {
		t.Fatalf("at +%v: a SIGKILL due at +%v; want the child left alone until +%v", out-time.Millisecond, early.Sub(h.start), out)
	}
	h.advanceTo(out)
	waitFile(t, termed)
	h.graceThenKill(alive, out)
	res, err := h.wait()
	if err != nil || !res.RanOut || res.Terminated || res.Lost != nil || res.Signal != syscall.SIGKILL {
		t.Fatalf("got %+v, %v; want the child killed at the bound's run-out + KillAfter, RanOut, no loss", res, err)
	}
	h.expectNoMoreRenewals()
	h.noAlarmsLeft()
}

// A MaxRuntime shorter than the bound's run-out stops the child first.
func TestMaxRuntimeBeforeTheBound(t *testing.T) {
	h := newHarness(t, "cat")
	h.spec.MaxRuntime = 5 * time.Second
	h.lease.bound = h.start.Add(time.Hour)
	h.run()
	h.alarmAt(5 * time.Second)
	h.advanceTo(5 * time.Second)
	res, err := h.wait()
	if err != nil || !res.RanOut || res.Lost != nil || res.Signal != syscall.SIGTERM {
		t.Fatalf("got %+v, %v; want the child stopped at MaxRuntime", res, err)
	}
}

// A lease at its bound whose run-out passed while semrun could not look
// (stopped past it) stops the child as at MaxRuntime while the SIGKILL can
// still land before the lease ends.
func TestBoundPassedWhileStopped(t *testing.T) {
	h := newHarness(t, "cat")
	bound := 20 * time.Second
	h.lease.bound = h.start.Add(bound)
	h.lease.deadline = h.start.Add(bound)
	h.run()
	h.alarmAt(bound - semaphore.Overrun(killAfter, ttl))
	h.advanceTo(bound - semaphore.Overrun(killAfter, ttl) + 200*time.Millisecond)
	res, err := h.wait()
	if err != nil || !res.RanOut || res.Terminated || res.Signal != syscall.SIGTERM {
		t.Fatalf("got %+v, %v; want the child stopped as at MaxRuntime, late", res, err)
	}
}

// A lease at its bound whose bound itself passed while semrun could not
// look (stopped past the lease's end) may be another holder's by now: a
// loss, not a run-out, whichever of the two overdue alarms is read first.
func TestBoundAndLeasePassedWhileStopped(t *testing.T) {
	for range 10 { // the order of two due alarms is the runtime's choice
		h := newHarness(t, "cat")
		h.spec.MaxRuntime = 2 * time.Second
		bound := 20 * time.Second
		h.lease.bound = h.start.Add(bound)
		h.lease.deadline = h.start.Add(bound)
		h.run()
		h.alarmAt(2 * time.Second)
		h.advanceTo(bound + 5*time.Second)
		res, err := h.wait()
		if err != nil || res.RanOut || res.Lost == nil {
			t.Fatalf("got %+v, %v; want the permit lost (the lease ended while semrun was stopped), not a run-out", res, err)
		}
	}
}
