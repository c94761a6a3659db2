package cmd

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/semrun/semrun/internal/semaphore"
)

// TestLineFullIsBusy: a caller refused a place in a full line gets the
// busy status and one line that says the line is full, not that every
// permit is held.
func TestLineFullIsBusy(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	o := &waitOptions{commonOptions: &commonOptions{}, key: "pdf", permits: 3, busyExitCode: 75}
	err := fmt.Errorf("key %q: %w", "pdf", &semaphore.LineError{Waiting: 10000, Max: 10000})
	_, got := o.acquired(context.Background(), nil, nil, err, 0, o.logger(&errOut))
	code, _, msg := exitStatus(got)
	if want := `key "pdf": 10000 callers wait already, the most one key takes; not joining the line`; code != 75 || msg != want {
		t.Errorf("a full line: got status %d and %q, want 75 and %q", code, msg, want)
	}
}

// TestStatusSaysWhatIsNotListed: a key of a long line says how many
// holders and waiters are not listed; one that could not be read says
// why, and status fails.
func TestStatusSaysWhatIsNotListed(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	keys := []semaphore.KeyStatus{
		{Key: "long", Capacity: 3, Held: 3, Unlisted: 1500},
		{Key: "broken", Error: "WRONGTYPE Operation against a key holding the wrong kind of value"},
	}
	if err := printStatus(&out, keys); err != nil {
		t.Fatal(err)
	}
	want := "key \"long\": 3 held, capacity 3, 1500 more not listed\n\nkey \"broken\": could not be read: WRONGTYPE Operation against a key holding the wrong kind of value\n"
	if out.String() != want {
		t.Errorf("status: got %q, want %q", out.String(), want)
	}
	if code, _, msg := exitStatus(unreadable(keys)); code != 1 || msg != "status: could not read 1 of 2 keys" {
		t.Errorf("status with an unreadable key: got %d %q, want 1 and the count", code, msg)
	}
}
