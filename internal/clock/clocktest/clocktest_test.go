package clocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/clock/clocktest"
)

var _ clock.Clock = clocktest.New()

// fired tells whether a has delivered, without waiting: the fake fires
// within Advance, so a delivery due is there when Advance returns.
func fired(a *clock.Alarm) bool {
	select {
	case <-a.C:
		return true
	default:
		return false
	}
}

func TestAdvanceFiresAlarmsDue(t *testing.T) {
	c := clocktest.New()
	start := c.Now()
	if start.IsZero() || start != clocktest.Start {
		t.Fatalf("New().Now(): got %v, want Start, not the zero Instant", start)
	}
	later := c.NewAlarm(start.Add(2 * time.Second))
	soon := c.NewAlarm(start.Add(time.Second))
	if got := c.Alarms(); len(got) != 2 || got[0] != start.Add(time.Second) || got[1] != start.Add(2*time.Second) {
		t.Errorf("Alarms: got %v, want [+1s +2s]", got)
	}

	c.Advance(time.Second - time.Nanosecond)
	if fired(soon) || fired(later) {
		t.Fatalf("alarms at +1s and +2s fired at +1s-1ns, want neither")
	}
	c.Advance(time.Nanosecond)
	if !fired(soon) || fired(later) {
		t.Fatalf("at +1s: want the +1s alarm fired and the +2s one not")
	}
	c.Advance(time.Hour)
	if !fired(later) {
		t.Fatalf("at +1h: the +2s alarm did not fire")
	}
	if fired(soon) || fired(later) {
		t.Errorf("an alarm delivered twice")
	}
	if got := c.Now().Sub(start); got != time.Hour+time.Second {
		t.Errorf("Now after advancing 1s and 1h: got +%v, want +1h1s", got)
	}
	if n := len(c.Alarms()); n != 0 {
		t.Errorf("pending alarms once all fired: got %d, want 0", n)
	}
}

func TestAlarmPastFiresAtOnce(t *testing.T) {
	c := clocktest.New()
	if a := c.NewAlarm(c.Now()); !fired(a) {
		t.Errorf("alarm for Now: did not fire at once")
	}
	if n := len(c.Alarms()); n != 0 {
		t.Errorf("pending alarms after one for Now: got %d, want 0", n)
	}
}

func TestAlarmStopped(t *testing.T) {
	c := clocktest.New()
	a := c.NewAlarm(c.Now().Add(time.Second))
	a.Stop()
	a.Stop()
	if n := len(c.Alarms()); n != 0 {
		t.Errorf("pending alarms after Stop: got %d, want 0", n)
	}
	c.Advance(time.Minute)
	if fired(a) {
		t.Errorf("stopped alarm: fired")
	}
}

func TestWithDeadline(t *testing.T) {
	c := clocktest.New()
	ctx, cancel := c.WithDeadline(context.Background(), c.Now().Add(time.Second))
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Errorf("Deadline: got one, want none on Go's clock")
	}
	c.Advance(time.Second - time.Nanosecond)
	if ctx.Err() != nil {
		t.Fatalf("context ending at +1s: ended at +1s-1ns with %v", context.Cause(ctx))
	}
	c.Advance(time.Nanosecond)
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context ending at +1s, at +1s: got cause %v, want DeadlineExceeded", err)
	}

	ctx, cancel = c.WithDeadline(context.Background(), c.Now().Add(time.Second))
	cancel()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before its deadline: got cause %v, want Canceled", err)
	}
	if n := len(c.Alarms()); n != 0 {
		t.Errorf("pending alarms after cancel: got %d, want 0", n)
	}

	ctx, cancel = c.WithDeadline(context.Background(), c.Now())
	defer cancel()
	if err := context.Cause(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline already reached: got cause %v, want DeadlineExceeded at once", err)
	}
}

func TestBlockUntil(t *testing.T) {
	c := clocktest.New()
	set := make(chan *clock.Alarm)
	go func() {
		a := c.NewAlarm(c.Now().Add(time.Second))
		_, cancel := c.WithDeadline(context.Background(), c.Now().Add(time.Second))
		defer cancel()
		set <- a
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.BlockUntil(ctx, 2); err != nil {
		t.Fatalf("BlockUntil(2) with an alarm and a deadline set elsewhere: %v; pending %d", err, len(c.Alarms()))
	}
	c.Advance(time.Second)
	if a := <-set; !fired(a) {
		t.Errorf("alarm set elsewhere: did not fire at its instant")
	}

	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelShort()
	if err := c.BlockUntil(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("BlockUntil(1) with none ever set: got %v, want the context's DeadlineExceeded", err)
	}
}
