//go:build unix

package runner_test

import (
	"syscall"
	"testing"
	"time"
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
