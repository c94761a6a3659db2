package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

func TestNowAdvances(t *testing.T) {
	a := clock.Now()
	time.Sleep(10 * time.Millisecond)
	b := clock.Now()
	if a.IsZero() || !b.After(a) || b.Sub(a) < 10*time.Millisecond || !a.Before(b) {
		t.Errorf("Now 10ms apart: got %v then %v, want the second at least 10ms later", a, b)
	}
	if got := a.Add(time.Second).Sub(a); got != time.Second {
		t.Errorf("Add(1s).Sub: got %v, want 1s", got)
	}
	if !(clock.Instant{}).IsZero() {
		t.Errorf("the zero Instant: IsZero false, want true")
	}
}

func TestAlarmFiresOnce(t *testing.T) {
	t.Parallel()
	at := clock.Now().Add(30 * time.Millisecond)
	a := clock.NewAlarm(at)
	defer a.Stop()
	select {
	case <-a.C:
	case <-time.After(10 * time.Second):
		t.Fatalf("alarm 30ms ahead: did not fire within 10s")
	}
	if early := clock.Until(at); early > 0 {
		t.Errorf("alarm fired %v before its instant", early)
	}
	select {
	case <-a.C:
		t.Errorf("alarm: fired twice")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestAlarmPastFiresAtOnce(t *testing.T) {
	a := clock.NewAlarm(clock.Now().Add(-time.Second))
	defer a.Stop()
	select {
	case <-a.C:
	default:
		t.Errorf("alarm for an instant past: did not fire at once")
	}
}

func TestAlarmStopped(t *testing.T) {
	t.Parallel()
	a := clock.NewAlarm(clock.Now().Add(20 * time.Millisecond))
	a.Stop()
	a.Stop() // harmless twice
	select {
	case <-a.C:
		t.Errorf("stopped alarm: fired")
	case <-time.After(100 * time.Millisecond):
	}
	var none *clock.Alarm
	none.Stop() // a nil alarm is none
}

func TestWithDeadline(t *testing.T) {
	t.Parallel()
	at := clock.Now().Add(30 * time.Millisecond)
	ctx, cancel := clock.WithDeadline(context.Background(), at)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 30*time.Millisecond {
		t.Errorf("Deadline: got (%v, %v), want within 30ms", d, ok)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("context with a deadline 30ms ahead: not done within 10s")
	}
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cause: got %v, want DeadlineExceeded", err)
	}

	ctx, cancel = clock.WithDeadline(context.Background(), clock.Now().Add(time.Hour))
	cancel()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before its deadline: got cause %v, want Canceled", err)
	}
}

// System is the package's functions behind the Clock interface.
func TestSystem(t *testing.T) {
	var c clock.Clock = clock.System
	if before, now := clock.Now(), c.Now(); now.Before(before) {
		t.Errorf("System.Now: got %v, before clock.Now's %v", now, before)
	}
	a := c.NewAlarm(c.Now().Add(-time.Second))
	defer a.Stop()
	select {
	case <-a.C:
	default:
		t.Errorf("System alarm for an instant past: did not fire at once")
	}
	ctx, cancel := c.WithDeadline(context.Background(), c.Now().Add(time.Hour))
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Errorf("System.WithDeadline an hour ahead: got Deadline (%v, %v), want about an hour ahead", d, ok)
	}
}

func TestManualAlarm(t *testing.T) {
	stopped := 0
	a, fire := clock.NewManualAlarm(func() { stopped++ })
	select {
	case <-a.C:
		t.Fatalf("manual alarm: delivered before fire")
	default:
	}
	fire()
	fire() // a second fire while the first is unread is dropped, not blocked on
	<-a.C
	select {
	case <-a.C:
		t.Errorf("manual alarm fired twice before a read: delivered twice")
	default:
	}
	a.Stop()
	if stopped != 1 {
		t.Errorf("Stop: called stop %d times, want 1", stopped)
	}
	b, _ := clock.NewManualAlarm(nil)
	b.Stop() // no stop given: nothing to do
}

func TestSleep(t *testing.T) {
	if err := clock.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms): got %v, want nil", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("given up")
	cancel(why)
	start := time.Now()
	if err := clock.Sleep(ctx, time.Hour); err != why {
		t.Errorf("Sleep(1h) with ctx done: got %v, want its cause %v", err, why)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Sleep(1h) with ctx done: returned after %v, want at once", d)
	}
}
