// Package clocktest provides a fake clock.Clock, which moves only when a
// test moves it, so that code timed by alarms is tested without sleeps.
package clocktest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// Clock is a fake clock.Clock. Its time stands still until Advance; the
// alarms and the deadlines of contexts set on it fire then, and the test
// can wait, with BlockUntil, until the code under test has set the alarms
// it expects. Its methods may be called from any goroutine.
type Clock struct {
	mu     sync.Mutex
	now    clock.Instant
	alarms []*alarm // pending, in the order they were set
	// changed is closed, and replaced, whenever the pending alarms change.
	changed chan struct{}
}

// alarm is a pending alarm or context deadline: fire delivers it.
type alarm struct {
	at   clock.Instant
	fire func()
}

// Start is the reading of a new Clock: an arbitrary instant, but not the
// zero Instant, which means "never".
var Start = clock.Instant{}.Add(100 * time.Hour)

// New returns a Clock reading Start, with no alarm set.
func New() *Clock { return &Clock{now: Start, changed: make(chan struct{})} }

// Now reads the clock.
func (c *Clock) Now() clock.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewAlarm sets an alarm for at; one not after Now fires at once. It is
// pending until Advance reaches at or it is stopped.
func (c *Clock) NewAlarm(at clock.Instant) *clock.Alarm {
	w := &alarm{at: at}
	a, fire := clock.NewManualAlarm(func() { c.remove(w) })
	w.fire = fire
	c.add(w)
	return a
}

// WithDeadline returns a copy of parent whose context also ends, with
// cause context.DeadlineExceeded, when Advance reaches at; at once when at
// is not after Now. The deadline counts as a pending alarm until it fires
// or cancel is called. Unlike clock.WithDeadline, the context has no Go
// deadline of its own (Deadline reports parent's): one on Go's clock would
// end calls at a moment the test does not control.
func (c *Clock) WithDeadline(parent context.Context, at clock.Instant) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &alarm{at: at, fire: func() { cancel(context.DeadlineExceeded) }}
	c.add(w)
	return ctx, func() {
		c.remove(w)
		cancel(context.Canceled)
	}
}

// Advance moves the clock d on and fires every alarm due by then, the
// earliest first. It panics for a negative d: the clock never goes back.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("clocktest: Advance by a negative duration")
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*alarm
	c.alarms = slices.DeleteFunc(c.alarms, func(w *alarm) bool {
		if w.at.After(c.now) {
			return false
		}
		due = append(due, w)
		return true
	})
	if len(due) > 0 {
		c.notifyLocked()
	}
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *alarm) int { return compare(a.at, b.at) })
	for _, w := range due {
		w.fire()
	}
}

// Alarms returns the instants of the pending alarms and context
// deadlines, the earliest first.
func (c *Clock) Alarms() []clock.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingLocked()
}

// BlockUntil waits until exactly n alarms and context deadlines are
// pending, or ctx ends, whose error it then returns.
func (c *Clock) BlockUntil(ctx context.Context, n int) error {
	return c.BlockUntilFunc(ctx, func(alarms []clock.Instant) bool { return len(alarms) == n })
}

// BlockUntilFunc waits until cond, called with what Alarms returns, is
// true, or ctx ends, whose error it then returns. cond is called once at
// first and again after each change of the pending alarms: a state that
// lasts is seen, one that passes quickly may not be.
func (c *Clock) BlockUntilFunc(ctx context.Context, cond func(alarms []clock.Instant) bool) error {
	for {
		c.mu.Lock()
		alarms, changed := c.pendingLocked(), c.changed
		c.mu.Unlock()
		if cond(alarms) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Clock) pendingLocked() []clock.Instant {
	at := make([]clock.Instant, 0, len(c.alarms))
	for _, w := range c.alarms {
		at = append(at, w.at)
	}
	slices.SortFunc(at, compare)
	return at
}

func compare(a, b clock.Instant) int {
	switch {
	case a.Before(b):
		return -1
	case a.After(b):
		return 1
	}
	return 0
}

// add makes w pending, or fires it at once when it is due already.
func (c *Clock) add(w *alarm) {
	c.mu.Lock()
	if !w.at.After(c.now) {
		c.mu.Unlock()
		w.fire()
		return
	}
	c.alarms = append(c.alarms, w)
	c.notifyLocked()
	c.mu.Unlock()
}

// remove disarms w, which may have fired already.
func (c *Clock) remove(w *alarm) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.alarms, w); i >= 0 {
		c.alarms = slices.Delete(c.alarms, i, i+1)
		c.notifyLocked()
	}
}

// notifyLocked wakes whoever waits in BlockUntilFunc to look again.
func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
