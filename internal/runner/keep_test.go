//go:build unix

package runner_test

import (
	"context"
	"errors"
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
	clk := clocktest.New()
	l := &fakeLease{clk: clk, ttl: ttl, calls: make(chan clock.Instant, 1000), deadline: clk.Now().Add(ttl), script: script}
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
