// Package clock reads a clock that keeps counting while the host is
// suspended, and sets alarms on it. A lease is measured on the store's
// clock, which does not stop when this host sleeps: a holder's deadline
// measured on Go's monotonic clock, which does stop, would pass late by as
// long as the host slept, and its command would run on past its lease.
package clock

import (
	"context"
	"sync"
	"time"
)

// Instant is a reading of the clock; the zero Instant is "never".
type Instant struct{ ns int64 }

// Now reads the clock.
func Now() Instant { return Instant{now()} }

// IsZero tells whether t is the zero Instant.
func (t Instant) IsZero() bool { return t.ns == 0 }

// Add returns t+d.
func (t Instant) Add(d time.Duration) Instant { return Instant{t.ns + int64(d)} }

// Sub returns t-u.
func (t Instant) Sub(u Instant) time.Duration { return time.Duration(t.ns - u.ns) }

// After tells whether t is after u.
func (t Instant) After(u Instant) bool { return t.ns > u.ns }

// Before tells whether t is before u.
func (t Instant) Before(u Instant) bool { return t.ns < u.ns }

// Until is how long until t; negative once t has passed.
func Until(t Instant) time.Duration { return t.Sub(Now()) }

// Clock reads a clock and sets alarms on it. System is the host's; code
// that takes a Clock can be run on a fake one in tests (clocktest).
type Clock interface {
	// Now reads the clock.
	Now() Instant
	// NewAlarm sets an alarm for at; one already past fires at once.
	NewAlarm(at Instant) *Alarm
	// WithDeadline returns a copy of parent whose context also ends when
	// the clock reaches at, with cause context.DeadlineExceeded.
	WithDeadline(parent context.Context, at Instant) (context.Context, context.CancelFunc)
}

// System is the host's clock, the one the package's functions read.
var System Clock = system{}

type system struct{}

func (system) Now() Instant               { return Now() }
func (system) NewAlarm(at Instant) *Alarm { return NewAlarm(at) }
func (system) WithDeadline(parent context.Context, at Instant) (context.Context, context.CancelFunc) {
	return WithDeadline(parent, at)
}

// Alarm delivers once on C when the clock reaches its instant, as soon as
// the host wakes if it slept through it.
type Alarm struct {
	C    <-chan struct{}
	stop func()
}

// NewAlarm sets an alarm for at; one already past fires at once.
func NewAlarm(at Instant) *Alarm {
	c := make(chan struct{}, 1)
	fire := func() { c <- struct{}{} }
	if Until(at) <= 0 {
		fire()
		return &Alarm{C: c, stop: func() {}}
	}
	return &Alarm{C: c, stop: alarm(at, fire)}
}

// NewManualAlarm returns an alarm for a Clock other than System to set:
// fire delivers on its C (once: a fire while a delivery is unread is
// dropped), and its Stop calls stop, which may be nil.
func NewManualAlarm(stop func()) (a *Alarm, fire func()) {
	c := make(chan struct{}, 1)
	if stop == nil {
		stop = func() {}
	}
	return &Alarm{C: c, stop: stop}, func() {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Stop disarms a; it may still have fired.
func (a *Alarm) Stop() {
	if a != nil {
		a.stop()
	}
}

// WithDeadline returns a copy of parent whose context also ends when the
// clock reaches at, with cause context.DeadlineExceeded. Its Deadline is
// at on Go's clocks as well, so that calls set their own timeouts by it.
func WithDeadline(parent context.Context, at Instant) (context.Context, context.CancelFunc) {
	ctx, cancelTimeout := context.WithTimeout(parent, Until(at))
	ctx, cancel := context.WithCancelCause(ctx)
	a := NewAlarm(at)
	done := make(chan struct{})
	go func() {
		select {
		case <-a.C:
			cancel(context.DeadlineExceeded)
		case <-done:
		case <-ctx.Done():
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(done)
			a.Stop()
			cancel(context.Canceled)
			cancelTimeout()
		})
	}
}

// Sleep waits for d on Go's timer, which does not count a suspend, or
// until ctx is done, and returns ctx's cause then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// timerAlarm is an alarm on a Go timer, which does not count a suspend.
func timerAlarm(at Instant, fire func()) func() {
	t := time.AfterFunc(Until(at), fire)
	return func() { t.Stop() }
}
