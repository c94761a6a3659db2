package cmd

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// waitLine is the one line a waiting semrun keeps up to date on a terminal:
// key, permits held, place in line, time waited. It is cleared when the wait
// ends, so the child's output starts on a clean line.
type waitLine struct {
	w     io.Writer
	term  Terminal
	key   string
	began time.Time

	mu    sync.Mutex
	state *semaphore.WaitState
	told  time.Time // when state was told
	stop  chan struct{}
	done  chan struct{}
}

func newWaitLine(w io.Writer, term Terminal, key string) *waitLine {
	return &waitLine{w: w, term: term, key: key, began: time.Now()}
}

// update is the store's OnWait: it redraws the line, and from the first
// call on, redraws it every second for the time waited.
func (l *waitLine) update(st semaphore.WaitState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.state == nil
	l.state, l.told = &st, time.Now()
	l.draw()
	if first {
		l.stop, l.done = make(chan struct{}), make(chan struct{})
		go l.tick(l.stop, l.done)
	}
}

// tick is given its own channels: a clear and a later update may replace
// the line's while it still runs.
func (l *waitLine) tick(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			l.mu.Lock()
			l.draw()
			l.mu.Unlock()
		}
	}
}

// draw rewrites the line in place; l.mu is held. It draws nothing while
// semrun is in the background (Ctrl-Z, then bg), the prompt being the shell's,
// nor once cleared: a tick may come between clear and the ticker's stop.
// A line wider than the terminal is cut: a wrapped line cannot be redrawn.
func (l *waitLine) draw() {
	if l.state == nil || l.term.Background() {
		return
	}
	text := "semrun: " + waitText(l.key, *l.state, time.Since(l.began))
	if est := estimate(*l.state, time.Since(l.told)); est > 0 {
		text += ", " + roughly(est) + " to go"
	}
	if width := l.term.Width(); width > 1 && len(text) >= width {
		text = text[:width-1]
	}
	fmt.Fprintf(l.w, "\r\x1b[K%s", text)
}

// clear ends the line's updates and erases it; a later update starts over.
func (l *waitLine) clear() {
	if l == nil {
		return
	}
	l.mu.Lock()
	started := l.state != nil
	stop, done := l.stop, l.done
	l.state, l.stop, l.done = nil, nil, nil
	l.mu.Unlock()
	if !started {
		return
	}
	close(stop)
	<-done
	fmt.Fprint(l.w, "\r\x1b[K")
}

// waitText says what a waiter waits for: `waiting for key "pdf": 3/3 permits
// held, 2nd of 5 in line, priority 5, 12s`, the priority when not 0;
// without the time when waited is negative.
func waitText(key string, st semaphore.WaitState, waited time.Duration) string {
	if st.Key != "" {
		key = st.Key // of several, the one that holds the caller back
	}
	s := fmt.Sprintf("waiting for key %q: %d/%d permits held", key, st.Held, st.Capacity)
	if st.Fenced > 0 {
		s = fmt.Sprintf("waiting for key %q: Redis started or failed over less than the restart fence ago, no grant for %v more (--restart-fence)", key, st.Fenced)
	}
	if st.Paused {
		s = fmt.Sprintf("waiting for key %q: %s, %d/%d permits held", key, pausedText(&st.Pause), st.Held, st.Capacity)
	}
	switch {
	case st.Position > 0 && st.Waiting > 0:
		s += fmt.Sprintf(", %s of %d in line", ordinal(st.Position), st.Waiting)
	case st.Position > 0:
		s += fmt.Sprintf(", %s in line", ordinal(st.Position))
	}
	if st.Priority != 0 {
		// As the line counts it now: raised by the wait, with an age.
		s += fmt.Sprintf(", priority %d", st.Priority)
	}
	if waited < 0 {
		return s
	}
	return s + ", " + waited.Truncate(time.Second).String()
}

// estimate guesses how much longer a waiter waits, since told st ago: a
// turn comes once the waiters ahead have been served, a capacity's worth
// of holds at a time, each lasting as long as the key's recent holds. 0
// when there is nothing to go by, or the guess has run out: a guess that
// runs late says nothing.
func estimate(st semaphore.WaitState, since time.Duration) time.Duration {
	if st.RecentHold <= 0 || st.Position <= 0 || st.Capacity <= 0 || st.Paused || st.Fenced > 0 {
		return 0
	}
	rounds := time.Duration((st.Position-1)/st.Capacity + 1)
	// The recent hold is the store's, which whoever may write to it may
	// have made anything: a guess past maxGuess (or past what a Duration
	// holds) says nothing.
	if st.RecentHold > maxGuess/rounds {
		return 0
	}
	return rounds*st.RecentHold - since
}

// maxGuess bounds a waiter's estimate.
const maxGuess = 366 * 24 * time.Hour

// roughly says a guessed duration as roughly as it is known: "a few
// seconds", "about 40s", "about 2m", "about 1h30m".
func roughly(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return "a few seconds"
	case d < time.Minute:
		return "about " + d.Round(10*time.Second).String()
	case d < time.Hour:
		return "about " + strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return "about " + strings.TrimSuffix(d.Round(10*time.Minute).String(), "0s")
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
