package cmd

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// TestEveryKeyAsksTheSameOrder: the caller's priority, age and supersede
// reach its request, and every key's of a caller of several alike, so
// that its order is the same in each line.
func TestEveryKeyAsksTheSameOrder(t *testing.T) {
	t.Parallel()
	o := &waitOptions{
		commonOptions: &commonOptions{f: &Factory{Streams: &IOStreams{}}, src: sources{}},
		key:           "a", keys: []string{"a", "b", "c"}, permits: 1, weight: 1, ttl: 30 * time.Second,
		priority: -7, priorityAge: 1500 * time.Millisecond, busyExitCode: defaultBusyExitCode,
	}
	if err := o.validateWait(); err != nil {
		t.Fatal(err)
	}
	reqs := o.requests()
	if len(reqs) != 3 {
		t.Fatalf("got %d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		if r.Priority != -7 || r.PriorityAge != 1500*time.Millisecond || r.Supersede {
			t.Errorf("key %q: got priority %d, age %v, supersede %v; want -7, 1.5s, false", r.Key, r.Priority, r.PriorityAge, r.Supersede)
		}
	}
	o.keys, o.supersede = nil, true
	if err := o.validateWait(); err != nil {
		t.Fatal(err)
	}
	if !o.req.Supersede || o.req.Priority != -7 {
		t.Errorf("one key with --supersede: got %+v, want it asked", o.req)
	}
}

// TestSupersededIsBusy: a waiter sent away by a newer one gets the busy
// status and one line naming that caller, escaped; with
// --busy-exit-code 0, a quiet skip.
func TestSupersededIsBusy(t *testing.T) {
	t.Parallel()
	gone := fmt.Errorf("wait: %w", &semaphore.SupersededError{Key: "deploy",
		By: semaphore.HolderInfo{Host: "ci\x1b[2J-7", PID: 4242, Label: "deploy #8\n"}})
	for _, tc := range []struct {
		code int
		want string
	}{
		{75, `key "deploy": superseded by a newer caller on ci\x1b[2J-7, pid 4242, label "deploy #8\n" (--supersede)`},
		{3, `key "deploy": superseded by a newer caller on ci\x1b[2J-7, pid 4242, label "deploy #8\n" (--supersede)`},
		{0, ""},
	} {
		var errOut bytes.Buffer
		o := &waitOptions{commonOptions: &commonOptions{}, key: "deploy", permits: 1, busyExitCode: tc.code}
		_, err := o.acquired(context.Background(), nil, nil, gone, 0, o.logger(&errOut))
		code, _, msg := exitStatus(err)
		if code != tc.code || msg != tc.want {
			t.Errorf("--busy-exit-code %d: got status %d and %q, want %d and %q", tc.code, code, msg, tc.code, tc.want)
		}
	}
	// Without a label, none is said.
	if got, want := supersededText("k", semaphore.HolderInfo{Host: "h", PID: 1}), `key "k": superseded by a newer caller on h, pid 1 (--supersede)`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWaitTextSaysThePriority: the waiting line says the caller's
// priority as the line counts it, when it is not 0.
func TestWaitTextSaysThePriority(t *testing.T) {
	t.Parallel()
	st := semaphore.WaitState{Held: 1, Capacity: 1, Position: 2, Waiting: 3}
	if got := waitText("k", st, 12*time.Second); strings.Contains(got, "priority") {
		t.Errorf("priority 0: got %q, want no priority said", got)
	}
	st.Priority = 5
	if got, want := waitText("k", st, 12*time.Second), `waiting for key "k": 1/1 permits held, 2nd of 3 in line, priority 5, 12s`; got != want {
		t.Errorf("priority 5: got %q, want %q", got, want)
	}
	st.Priority = -3
	if got, want := waitText("k", st, -1), `waiting for key "k": 1/1 permits held, 2nd of 3 in line, priority -3`; got != want {
		t.Errorf("priority -3, -v: got %q, want %q", got, want)
	}
}

// TestStatusShowsPriorities: a PRIORITY column where some waiter's is
// not 0 or the key has an age, none otherwise; the key's line says its
// stored age.
func TestStatusShowsPriorities(t *testing.T) {
	t.Parallel()
	waiter := func(p, pos int) semaphore.Waiter {
		return semaphore.Waiter{HolderInfo: semaphore.HolderInfo{Host: "h", PID: 10 + pos, Command: "job"}, Permits: 1, Weight: 1,
			Position: pos, Waited: time.Second, Priority: p}
	}
	for _, tc := range []struct {
		name   string
		k      semaphore.KeyStatus
		column bool
		rows   []string
	}{
		{"priorities", semaphore.KeyStatus{Key: "k", Capacity: 1, Held: 1, Waiters: []semaphore.Waiter{waiter(5, 1), waiter(0, 2), waiter(-3, 3)}},
			true, []string{"  1        h     11   job      1      1     1s      5", "  3        h     13   job      1      1     1s      -3"}},
		{"all 0", semaphore.KeyStatus{Key: "k", Capacity: 1, Held: 1, Waiters: []semaphore.Waiter{waiter(0, 1), waiter(0, 2)}},
			false, []string{"  2        h     12   job      1      1     1s\n"}},
		{"an age", semaphore.KeyStatus{Key: "k", Capacity: 1, Held: 1, PriorityAge: time.Minute, Waiters: []semaphore.Waiter{waiter(0, 1)}},
			true, []string{`key "k": 1 held, capacity 1, 1 waiting, priority age 1m0s (kept in the store)` + "\n", "  1        h     11   job      1      1     1s      0\n"}},
	} {
		var out bytes.Buffer
		if err := printStatus(&out, []semaphore.KeyStatus{tc.k}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "\tPRIORITY") || strings.Contains(out.String(), " PRIORITY"); got != tc.column {
			t.Errorf("%s: PRIORITY column %v, want %v:\n%s", tc.name, got, tc.column, out.String())
		}
		for _, row := range tc.rows {
			if !strings.Contains(out.String(), row) {
				t.Errorf("%s: got\n%s\nwant a line %q", tc.name, out.String(), row)
			}
		}
	}
}

// TestEventsOfTheOrderOfTheLine: a supersede names the newer caller and
// the wait; a priority age set or unset says which.
func TestEventsOfTheOrderOfTheLine(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 2, 0, 0, 0, time.Local)
	for _, tc := range []struct {
		e    semaphore.Event
		want string
	}{
		{semaphore.Event{Time: at, Key: "deploy", Kind: semaphore.EventSupersede, HolderInfo: semaphore.HolderInfo{Host: "a", PID: 1, Command: "deploy.sh", Label: "#7"},
			Waited: 90 * time.Second, By: &semaphore.HolderInfo{Host: "b\x1b", PID: 2, Label: "#8\x07"}},
			` deploy supersede a:1 deploy.sh label "#7" by b\x1b:2 label "#8\a" after 1m30s waiting`},
		{semaphore.Event{Time: at, Key: "deploy", Kind: semaphore.EventSupersede, Waited: time.Second, By: &semaphore.HolderInfo{Host: "b", PID: 2}},
			` deploy supersede by b:2 after 1s waiting`},
		{semaphore.Event{Time: at, Key: "k", Kind: semaphore.EventPriorityAge, Until: 10 * time.Minute}, ` k priority-age stored priority age 10m0s`},
		{semaphore.Event{Time: at, Key: "k", Kind: semaphore.EventPriorityAge}, ` k priority-age stored priority age unset`},
	} {
		var out strings.Builder
		if err := printEvent(&out, tc.e); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(out.String(), tc.want+"\n") {
			t.Errorf("got %q, want it to end in %q", out.String(), tc.want)
		}
	}
}
