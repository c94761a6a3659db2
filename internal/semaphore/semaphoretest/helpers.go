// Package semaphoretest is the contract every semaphore.Store obeys, as a
// suite of tests each store runs (Run), and the helpers its own tests share.
package semaphoretest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

var keySeq atomic.Int64

// UniqueKey returns a semaphore key no other test uses.
func UniqueKey(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), keySeq.Add(1))
}

// StatusOf returns the status of one key.
func StatusOf(t testing.TB, st semaphore.Store, key string) semaphore.KeyStatus {
	t.Helper()
	status, err := st.Status(Context(t, 5*time.Second), []string{key})
	if err != nil {
		t.Fatalf("Status(%q): got error %v, want nil", key, err)
	}
	if len(status) != 1 || status[0].Key != key {
		t.Fatalf("Status(%q): got %+v, want one entry for the key", key, status)
	}
	return status[0]
}

// Context is a context that ends after d, or when t ends.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// AcquireWithin calls s.Acquire with a context that ends after d (or when
// t ends), and fails t when Acquire has not returned 10s after that: a
// store that ignores its context must fail the test, not hang it.
func AcquireWithin(t testing.TB, s semaphore.Store, d time.Duration, req semaphore.Request) (semaphore.Lease, error) {
	t.Helper()
	return acquireCtx(t, s, Context(t, d), d, req)
}

// acquireCtx calls s.Acquire with ctx, which ends after d at the latest,
// and fails t when it has not returned ctxGrace after that: a store that
// ignores its context must fail the test, not hang it.
func acquireCtx(t testing.TB, s semaphore.Store, ctx context.Context, d time.Duration, req semaphore.Request) (semaphore.Lease, error) {
	t.Helper()
	var l semaphore.Lease
	var err error
	if !within(t, d+ctxGrace, fmt.Sprintf("Acquire(key %q) returned", req.Key), func() { l, err = s.Acquire(ctx, req) }) {
		t.FailNow()
	}
	return l, err
}

// ctxGrace is how long after its context ended a store's call may take
// to return before a test fails it: it returns at once (after a second at
// most, to give back what may have been granted), and the bound only
// catches one that ignores its context. A loaded machine held one up for
// more than 10s.
const ctxGrace = 30 * time.Second

// Acquire takes a permit with NoWait and fails t if none is granted.
func Acquire(t testing.TB, s semaphore.Store, req semaphore.Request) semaphore.Lease {
	t.Helper()
	req.NoWait = true
	l, err := AcquireWithin(t, s, 5*time.Second, req)
	if err != nil {
		t.Fatalf("Acquire(key %q, n=%d): got error %v, want a permit", req.Key, req.Permits, err)
	}
	return l
}

// WaitFor polls cond every 20ms until it holds, and fails t with "what
// not true within patience" once patience has passed. cond is asked once
// more after the deadline, so a slow poll never fails a condition that
// came true meanwhile. The patience only catches a hang or a regression:
// it is no assertion about speed.
func WaitFor(t testing.TB, patience time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			if cond() {
				return
			}
			t.Fatalf("%s not true within %v", what, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Warnings collects what a store passes to Warnf.
type Warnings struct {
	mu  sync.Mutex
	got []string
}

// Warnf collects one warning.
func (w *Warnings) Warnf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, fmt.Sprintf(format, args...))
}

// Take returns the warnings collected since the last Take.
func (w *Warnings) Take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

// Release gives l back, failing t on an error.
func Release(t testing.TB, l semaphore.Lease) {
	t.Helper()
	if err := l.Release(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Release: got error %v, want nil", err)
	}
}

// Hold takes a permit with NoWait, fails t if none is granted, and gives it
// back when t ends (releasing twice is harmless).
func Hold(t testing.TB, s semaphore.Store, req semaphore.Request) semaphore.Lease {
	t.Helper()
	l := Acquire(t, s, req)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(ctx)
	})
	return l
}

// Acquired is what a background Acquire returned.
type Acquired struct {
	L   semaphore.Lease
	Err error
}

// StartAcquire runs Acquire in a goroutine with a context of its own that
// ends after bound or when stop is called. When t ends, that context is
// canceled, the goroutine is waited for and a permit it got is released.
func StartAcquire(t testing.TB, s semaphore.Store, req semaphore.Request, bound time.Duration) (result <-chan Acquired, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	out := make(chan Acquired, 1)
	done := make(chan struct{})
	var got semaphore.Lease
	go func() {
		defer close(done)
		l, err := s.Acquire(ctx, req)
		got = l
		out <- Acquired{l, err}
	}()
	t.Cleanup(func() {
		cancel()
		if !within(t, ctxGrace, fmt.Sprintf("Acquire(key %q) returned once its context ended", req.Key), func() { <-done }) {
			return
		}
		if got != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = got.Release(ctx)
		}
	})
	return out, cancel
}

// within runs wait and waits for it, at most patience; past that it
// fails t with "what not true within patience" and returns false, leaving
// wait to run. A store that ignores its context must fail the test, not
// hang it.
func within(t testing.TB, patience time.Duration, what string, wait func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	select {
	case <-done:
		return true
	case <-time.After(patience):
		t.Errorf("%s not true within %v", what, patience)
		return false
	}
}

// Receive waits up to bound for a background Acquire to return. The bound
// only catches a hang.
func Receive(t testing.TB, ch <-chan Acquired, bound time.Duration, what string) Acquired {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(bound):
		t.Fatalf("%s: still waiting after %v, want it to return", what, bound)
		return Acquired{}
	}
}

// MustWait fails t unless the background Acquire whose result comes on
// got waits: waiting, closed by its OnWait, must close first, within
// 10s. what names the Acquire.
func MustWait(t testing.TB, got <-chan Acquired, waiting <-chan struct{}, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s: got (%v, %v), want it to wait", what, r.L, r.Err)
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: OnWait not called after 10s, want it called", what)
	}
}

// Signal returns a func that closes the returned channel on its first call.
func Signal() (func(), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }, ch
}

// Follower is Events with Follow running in the background, keeping what
// it is told.
type Follower struct {
	mu     sync.Mutex
	told   []semaphore.Event
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// Follow starts st.Events(q), following, until Stop or the end of t.
func Follow(t testing.TB, st semaphore.Store, q semaphore.EventQuery) *Follower {
	t.Helper()
	q.Follow = true
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{cancel: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- st.Events(ctx, q, func(e semaphore.Event) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.told = append(f.told, e)
			return nil
		})
	}()
	t.Cleanup(func() { _ = f.Stop(t) })
	return f
}

// Told is what the follower was told so far.
func (f *Follower) Told() []semaphore.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.told)
}

// Count is how many events the follower was told so far.
func (f *Follower) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.told)
}

// AtLeast is a condition for WaitFor: the follower was told n events.
func (f *Follower) AtLeast(n int) func() bool {
	return func() bool { return f.Count() >= n }
}

// Stop ends the follower and returns what Events returned, failing t
// when it has not returned 10s after its context ended.
func (f *Follower) Stop(t testing.TB) error {
	t.Helper()
	f.cancel()
	if f.ended {
		return f.err
	}
	select {
	case f.err = <-f.done:
		f.ended = true
	case <-time.After(ctxGrace):
		t.Fatalf("Events following: still running %v after its context ended", ctxGrace)
	}
	return f.err
}
