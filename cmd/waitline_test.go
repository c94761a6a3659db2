package cmd

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// A waiter's estimate: the holds ahead of it, a capacity's worth at a
// time, each as long as the recent ones, less the time since it was told;
// nothing without a recent hold, a place, or while paused or fenced.
func TestEstimate(t *testing.T) {
	t.Parallel()
	recent := semaphore.WaitState{Held: 3, Capacity: 3, Position: 7, Waiting: 9, RecentHold: time.Minute}
	paused, fenced, unplaced, unknown := recent, recent, recent, recent
	paused.Paused, fenced.Fenced, unplaced.Position, unknown.RecentHold = true, time.Second, 0, 0
	for _, c := range []struct {
		st    semaphore.WaitState
		since time.Duration
		want  time.Duration
		text  string
	}{
		{recent, 0, 3 * time.Minute, "about 3m"},
		{recent, 50 * time.Second, 130 * time.Second, "about 2m"},
		{recent, 3 * time.Minute, 0, ""},
		{semaphore.WaitState{Capacity: 1, Position: 1, RecentHold: 25 * time.Second}, 0, 25 * time.Second, "about 30s"},
		{semaphore.WaitState{Capacity: 2, Position: 80, RecentHold: 5 * time.Minute}, 0, 200 * time.Minute, "about 3h20m"},
		{semaphore.WaitState{Capacity: 1, Position: 1, RecentHold: 3 * time.Second}, 0, 3 * time.Second, "a few seconds"},
		{paused, 0, 0, ""},
		{fenced, 0, 0, ""},
		{unplaced, 0, 0, ""},
		{unknown, 0, 0, ""},
		// What a store says is not trusted: no guess past a year, nor
		// one that does not fit in a Duration.
		{semaphore.WaitState{Capacity: 1, Position: 1, RecentHold: math.MaxInt64}, 0, 0, ""},
		{semaphore.WaitState{Capacity: 1, Position: 5, RecentHold: 1 << 62}, 0, 0, ""},
		{semaphore.WaitState{Capacity: math.MaxInt, Position: math.MaxInt, RecentHold: time.Minute}, 0, time.Minute, "about 1m"},
		{semaphore.WaitState{Capacity: 1, Position: math.MaxInt, RecentHold: time.Minute}, 0, 0, ""},
	} {
		got := estimate(c.st, c.since)
		if got != c.want || (got > 0 && roughly(got) != c.text) {
			t.Errorf("estimate(%+v, %v): got %v (%q), want %v (%q)", c.st, c.since, got, roughly(got), c.want, c.text)
		}
	}
}

// A tick that comes after clear has begun, before the ticker stops, draws
// nothing; and a line cleared then updated again starts a ticker of its
// own, which a second clear stops.
func TestWaitLineTickAfterClear(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	l := newWaitLine(&out, wideTerminal{}, "k")
	l.update(semaphore.WaitState{Held: 1, Capacity: 1, Position: 1})
	l.clear()
	l.mu.Lock()
	l.draw() // what a late tick does
	l.mu.Unlock()
	if want := "\r\x1b[K"; !strings.HasSuffix(out.String(), want) {
		t.Fatalf("a tick after clear drew: %q", out.String())
	}
	l.update(semaphore.WaitState{Held: 1, Capacity: 1, Position: 1})
	l.clear()
	l.clear()
}

// wideTerminal is a terminal of 80 columns, in the foreground.
type wideTerminal struct{}

func (wideTerminal) Width() int       { return 80 }
func (wideTerminal) Background() bool { return false }
