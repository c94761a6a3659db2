//go:build unix

package runner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/clock/clocktest"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// keeping runs runner.Keep on a fake lease of ttl whose renewals do what
// script says, on a fake clock; it returns the clock, the lease, and what
// Keep returns.
func keeping(t *testing.T, ctx context.Context, script ...renewal) (*clocktest.Clock, *fakeLease, <-chan error) {
	return keepingWith(t, ctx, nil, script...)
}

// keepingWith is keeping, with set called on the lease before Keep runs.
func keepingWith(t *testing.T, ctx context.Context, set func(*fakeLease), script ...renewal) (*clocktest.Clock, *fakeLease, <-chan error) {
	clk := clocktest.New()
	l := &fakeLease{clk: clk, ttl: ttl, calls: make(chan clock.Instant, 1000), deadline: clk.Now().Add(ttl), script: script}
	if set != nil {
		set(l)
	}
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done <- runner.Keep(ctx, runner.Spec{TTL: ttl, Clock: clk, Warnf: func(string, ...any) {}}, l)
	}()
	t.Cleanup(wg.Wait)
	return clk, l, done
}

// advanceUntil moves clk on a second at a time until Keep returns.
func advanceUntil(t *testing.T, clk *clocktest.Clock, done <-chan error, limit time.Duration) error {
	t.Helper()
	for moved := time.Duration(0); moved <= limit; moved += time.Second {
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Millisecond):
		}
		clk.Advance(time.Second)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(patience):
		t.Fatalf("Keep still running after the clock moved %v", limit)
		return nil
	}
}

// TestKeepRenewsUntilTheStoreSaysLost: a keeper renews as a run does, and
// returns the store's word that the permit is gone.
func TestKeepRenewsUntilTheStoreSaysLost(t *testing.T) {
	t.Parallel()
	clk, l, done := keeping(t, t.Context(), renewOK, renewOK, renewOK, renewLost)
	err := advanceUntil(t, clk, done, 2*time.Minute)
	if !errors.Is(err, semaphore.ErrLost) || errors.Is(err, runner.ErrPresumedLost) {
		t.Fatalf("Keep: got %v, want the store's ErrLost", err)
	}
	if n := len(l.calls); n != 4 {
		t.Errorf("renewals: got %d, want 4", n)
	}
}

// TestKeepPresumesLostWithoutRenewals: renewals that fail until the lease
// could lapse make the permit count as lost, on the keeper's own clock,
// before the lease's end.
func TestKeepPresumesLostWithoutRenewals(t *testing.T) {
	t.Parallel()
	clk, _, done := keeping(t, t.Context(), renewFail)
	start := clk.Now()
	err := advanceUntil(t, clk, done, 2*time.Minute)
	if !errors.Is(err, runner.ErrPresumedLost) {
		t.Fatalf("Keep: got %v, want ErrPresumedLost", err)
	}
	if at := clk.Now().Sub(start); at >= ttl {
		t.Errorf("presumed lost %v after the grant; want before the lease of %v ends", at, ttl)
	}
}

// TestKeepEndsWithItsContext: a keeper told to stop returns nil.
func TestKeepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	_, _, done := keeping(t, ctx)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Keep: got %v, want nil", err)
		}
	case <-time.After(patience):
		t.Fatal("Keep still running after its context ended")
	}
}

// frozen moves the clock of a keeper whose renewal at +10s succeeded
// past its loss point and its lease's end in one step, as a keeper
// SIGSTOPped or starved there wakes, and returns the renewal it then
// sends: its question to the store.
func frozen(t *testing.T, clk *clocktest.Clock, l *fakeLease) time.Duration {
	t.Helper()
	start := clk.Now()
	alarmSet(t, clk, start.Add(10*time.Second))
	clk.Advance(10 * time.Second)
	if got := (<-l.calls).Sub(start); got != 10*time.Second {
		t.Fatalf("first renewal at +%v, want +10s", got)
	}
	alarmSet(t, clk, start.Add(20*time.Second))
	clk.Advance(3 * ttl)
	select {
	case sent := <-l.calls:
		return sent.Sub(start)
	case <-time.After(patience):
		t.Fatalf("thawed past its loss point: no renewal within %v, want the store asked", patience)
		return 0
	}
}

// alarmSet waits, at most patience, until an alarm for at is set.
func alarmSet(t *testing.T, clk *clocktest.Clock, at clock.Instant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := clk.BlockUntilFunc(ctx, func(alarms []clock.Instant) bool { return slices.Contains(alarms, at) }); err != nil {
		t.Fatalf("no alarm set for %v within %v; pending %v", at, patience, clk.Alarms())
	}
}

// TestKeepFrozenPastItsLossPointAsksTheStore: a keeper thawed past its
// loss point asks the store whether its permit lives (the runs under its
// hold renew it too) and, told it does, keeps it: it is not lost for the
// keeper's own clock. Only the store's word, later, ends it.
func TestKeepFrozenPastItsLossPointAsksTheStore(t *testing.T) {
	t.Parallel()
	answer := make(chan struct{}, 1)
	clk, l, done := keepingWith(t, t.Context(), func(l *fakeLease) { l.answer = answer }, renewOK, renewHeld, renewOK, renewLost)
	if at := frozen(t, clk, l); at != 10*time.Second+3*ttl {
		t.Fatalf("asked at +%v, want at the thaw, +%v", at, 10*time.Second+3*ttl)
	}
	select {
	case err := <-done:
		t.Fatalf("Keep returned %v before the store answered; want it to wait for the answer", err)
	default:
	}
	answer <- struct{}{} // the step under the hold kept the permit: alive
	err := advanceUntil(t, clk, done, 2*time.Minute)
	if !errors.Is(err, semaphore.ErrLost) || errors.Is(err, runner.ErrPresumedLost) {
		t.Fatalf("Keep: got %v, want the store's ErrLost, later", err)
	}
	if n := len(l.calls); n != 2 {
		t.Errorf("renewals after the answer: got %d, want 2 (one kept it, one found it gone)", n)
	}
}

// TestKeepFrozenAskedFindsItGone: thawed past its loss point, a keeper
// whose permit the store no longer has returns the store's word, not a
// presumed loss; one whose store does not answer within AskFor returns a
// presumed loss, then and not before.
func TestKeepFrozenAskedFindsItGone(t *testing.T) {
	t.Parallel()
	t.Run("gone", func(t *testing.T) {
		t.Parallel()
		clk, l, done := keeping(t, t.Context(), renewOK, renewLost)
		frozen(t, clk, l)
		select {
		case err := <-done:
			if !errors.Is(err, semaphore.ErrLost) || errors.Is(err, runner.ErrPresumedLost) {
				t.Fatalf("Keep: got %v, want the store's ErrLost", err)
			}
		case <-time.After(patience):
			t.Fatal("Keep still running after the store said the permit is gone")
		}
	})
	t.Run("no answer", func(t *testing.T) {
		t.Parallel()
		clk, l, done := keeping(t, t.Context(), renewOK, renewHang)
		asked := frozen(t, clk, l)
		alarmSet(t, clk, clocktest.Start.Add(asked+runner.AskFor(ttl))) // the question's deadline
		clk.Advance(runner.AskFor(ttl) - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("Keep returned %v %v after it asked; want it to wait %v for the answer", err, runner.AskFor(ttl)-time.Millisecond, runner.AskFor(ttl))
		case <-time.After(20 * time.Millisecond):
		}
		clk.Advance(time.Millisecond)
		select {
		case err := <-done:
			if !errors.Is(err, runner.ErrPresumedLost) {
				t.Fatalf("Keep: got %v, want ErrPresumedLost once the store did not answer", err)
			}
		case <-time.After(patience):
			t.Fatalf("Keep still running %v after it asked at +%v; want a presumed loss", runner.AskFor(ttl), asked)
		}
	})
}
