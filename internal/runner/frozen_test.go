//go:build unix

package runner_test

import (
	"errors"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// A holder whose whole process group was frozen (a paused VM, a SIGSTOP
// of the group) wakes with every alarm due at once. Past the point where
// its permit counts as lost, the command is stopped before anything else:
// no renewal is sent, and no line is said, while it could run on next to
// a new holder. The tests freeze the holder by moving the clock past
// several alarms in one step; each runs a few times, since which of the
// goroutines the thaw wakes runs first is the runtime's choice.
const thaws = 10

// lossAfterFirst is when the child must stop after the renewal at +10s,
// the last to succeed: the lease's end, +40s, less the kill-after and the
// margin.
const lossAfterFirst = 10*time.Second + ttl - killAfter - 3*time.Second

// TestFrozenPastTheLossPointStopsFirst: thawed past the lease, the child
// is killed (no grace is left) for a presumed loss, and the renewal due
// in the freeze, or the one under way as it began, neither renews nor
// warns.
func TestFrozenPastTheLossPointStopsFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []renewal
		// last is the last renewal before the freeze.
		last time.Duration
	}{
		{"a renewal due in the freeze", []renewal{renewOK}, 10 * time.Second},
		{"a renewal under way", []renewal{renewOK, renewHang}, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range thaws {
				h := newHarness(t, "cat")
				h.lease.script = tc.script
				h.run()
				for at := 10 * time.Second; at <= tc.last; at += 10 * time.Second {
					h.alarmAt(at)
					h.advanceTo(at)
					h.expectRenewal(at)
				}
				h.alarmAt(lossAfterFirst)
				h.advanceTo(60 * time.Second)
				res, err := h.wait()
				if err != nil || !res.Terminated || res.Signal != syscall.SIGKILL || !errors.Is(res.Lost, runner.ErrPresumedLost) {
					t.Fatalf("got %+v, %v; want the child killed for a presumed loss", res, err)
				}
				h.expectNoMoreRenewals()
				h.expectNoWarning()
				h.noAlarmsLeft()
			}
		})
	}
}

// TestFrozenPastMaxRuntimeAndTheLossPoint: a holder thawed past its
// MaxRuntime alone stops its command as at MaxRuntime (RanOut: 124); past
// the point where its permit counts as lost too, whether or not its lease
// has ended, the permit counts as lost (112), whichever alarm is read
// first: the command may have run without it, which says more.
func TestFrozenPastMaxRuntimeAndTheLossPoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		thaw time.Duration
		lost bool
	}{
		{"past MaxRuntime only", 25 * time.Second, false},
		{"past the loss point too", lossAfterFirst + 4*time.Second, true},
		{"past the lease too", 60 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range thaws {
				h := newHarness(t, "cat")
				h.spec.MaxRuntime = 15 * time.Second
				h.run()
				h.alarmAt(15 * time.Second) // set as the child starts, counted from then
				h.alarmAt(10 * time.Second)
				h.advanceTo(10 * time.Second)
				h.expectRenewal(10 * time.Second)
				h.alarmAt(lossAfterFirst)
				h.advanceTo(tc.thaw) // cat ends at the first signal
				res, err := h.wait()
				switch {
				case err != nil:
					t.Fatal(err)
				case tc.lost && (res.RanOut || !res.Terminated || !errors.Is(res.Lost, runner.ErrPresumedLost)):
					t.Fatalf("got %+v; want the permit lost, the child terminated, not a run-out", res)
				case !tc.lost && (!res.RanOut || res.Terminated || res.Lost != nil):
					t.Fatalf("got %+v; want a run-out, the permit kept", res)
				}
			}
		})
	}
}

// TestFrozenPastTheRunOutStopsBeforeRenewing: a lease at its bound,
// thawed past its run-out with a renewal due, stops the child as at
// MaxRuntime, and only then renews: the call finds the SIGTERM sent (its
// SIGKILL due) already.
func TestFrozenPastTheRunOutStopsBeforeRenewing(t *testing.T) {
	bound := 40 * time.Second
	out := bound - semaphore.Overrun(killAfter, ttl) // 31s
	thaw := out + 500*time.Millisecond               // the renewal due at 30s not yet made
	killAt := thaw + killAfter                       // before the bound less its margin
	for range thaws {
		ready, termed, alive := stubbornFiles(t)
		h := newHarness(t, "sh", "-c", stubborn, ready, termed, alive)
		h.lease.bound = h.start.Add(bound)
		h.lease.deadline = h.start.Add(bound)
		var mu sync.Mutex
		var early []time.Duration // renewals sent past the run-out before the stop
		h.lease.onRenew = func(sent clock.Instant) {
			if sent.Sub(h.start) >= out && !slices.Contains(h.clk.Alarms(), h.start.Add(killAt)) {
				mu.Lock()
				early = append(early, sent.Sub(h.start))
				mu.Unlock()
			}
		}
		h.run()
		waitFile(t, ready)
		for _, at := range []time.Duration{10 * time.Second, 20 * time.Second} {
			h.alarmAt(at)
			h.advanceTo(at)
			h.expectRenewal(at)
		}
		h.alarmAt(30 * time.Second)
		h.alarmAt(out)
		h.advanceTo(thaw)
		waitFile(t, termed)
		h.expectRenewal(thaw)
		h.alarmAt(killAt)
		h.advanceTo(killAt)
		res, err := h.wait()
		if err != nil || !res.RanOut || res.Terminated || res.Lost != nil || res.Signal != syscall.SIGKILL {
			t.Fatalf("got %+v, %v; want the child killed after its grace, RanOut, no loss", res, err)
		}
		mu.Lock()
		if len(early) > 0 {
			t.Fatalf("renewals sent at %v, past the run-out at +%v, before the child was told to stop; want the stop first", early, out)
		}
		mu.Unlock()
	}
}
