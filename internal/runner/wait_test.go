//go:build unix

package runner_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// The wait for a permit, with a fake store: each ask (one call of the
// acquire function) is handed to the test, which grants it or lets it
// wait, and signals come on a channel, as semrun would catch them.

// grant is a permit a fake ask grants, told apart by its token.
type grant int64

func (grant) Deadline() clock.Instant           { return clock.Instant{} }
func (grant) Renew(context.Context) error       { return nil }
func (grant) Release(context.Context) error     { return nil }
func (grant) Finish(context.Context, int) error { return nil }
func (grant) Bound() clock.Instant              { return clock.Instant{} }
func (grant) Files() []*os.File                 { return nil }
func (g grant) Token() int64                    { return int64(g) }
func (grant) Slots() semaphore.Slots            { return semaphore.Slots{} }

// ask is one call of the fake acquire function, under way.
type ask struct {
	// grant, sent to, ends the ask with that permit.
	grant chan grant
	// lateGrant, when set before the ask's context ends, is granted as it
	// ends: a grant that crossed the end of the wait.
	lateGrant grant
	// ended is closed once the ask has returned.
	ended chan struct{}
}

// waiter runs one Wait with a fake store and fake signals.
type waiter struct {
	t       *testing.T
	signals chan os.Signal
	asks    chan *ask
	// givenBack gets what Wait gave back; stopping and suspended say
	// that Wait called Stopping and stopped the job.
	givenBack, stopping, suspended chan grant
	// continued, sent to, continues a suspended job.
	continued chan struct{}

	done  chan struct{}
	lease semaphore.Lease
	err   error
}

func startWait(t *testing.T, ctx context.Context, lateGrant grant) *waiter {
	w := &waiter{
		t: t, signals: make(chan os.Signal), asks: make(chan *ask, 10),
		givenBack: make(chan grant, 10), stopping: make(chan grant, 10), suspended: make(chan grant, 10),
		continued: make(chan struct{}), done: make(chan struct{}),
	}
	// quit continues a job the test left stopped, once it has ended.
	quit := make(chan struct{})
	suspend := func() {
		w.suspended <- 0
		select {
		case <-w.continued:
		case <-quit:
		}
	}
	go func() {
		defer close(w.done)
		w.lease, w.err = runner.NewSignals(w.signals, suspend).Wait(ctx, runner.Waiting{
			Acquire: func(ctx context.Context) (semaphore.Lease, error) {
				a := &ask{grant: make(chan grant), lateGrant: lateGrant, ended: make(chan struct{})}
				defer close(a.ended)
				w.asks <- a
				select {
				case g := <-a.grant:
					return g, nil
				case <-ctx.Done():
					if a.lateGrant != 0 {
						return a.lateGrant, nil
					}
					return nil, ctx.Err()
				}
			},
			GiveBack: func(l semaphore.Lease) { w.givenBack <- l.(grant) },
			Stopping: func() { w.stopping <- 0 },
		})
	}()
	// A test that ends before Wait returned ends it, so that no ask
	// outlives the test.
	t.Cleanup(func() {
		close(quit)
		select {
		case <-w.done:
		case w.signals <- syscall.SIGKILL:
			expect(t, w.done, "Wait's return, after SIGKILL")
		case <-time.After(patience):
			t.Errorf("Wait: neither returned nor took a signal within %v", patience)
		}
	})
	return w
}

// nextAsk waits for the next call of the acquire function.
func (w *waiter) nextAsk() *ask {
	w.t.Helper()
	return expect(w.t, w.asks, "an ask for a permit")
}

// send delivers sig to Wait, which has received it when send returns.
func (w *waiter) send(sig os.Signal) {
	w.t.Helper()
	select {
	case w.signals <- sig:
	case <-w.done:
		w.t.Fatalf("%v: Wait had returned %v, %v already", sig, w.lease, w.err)
	case <-time.After(patience):
		w.t.Fatalf("%v: not received within %v", sig, patience)
	}
}

// result waits for Wait to return.
func (w *waiter) result() (semaphore.Lease, error) {
	w.t.Helper()
	expect(w.t, w.done, "Wait's return")
	return w.lease, w.err
}

// expect waits for what c says happened.
func expect[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(patience):
		t.Fatalf("%s: not within %v", what, patience)
		var zero T
		return zero
	}
}

// A granted permit ends the wait.
func TestWaitReturnsTheGrant(t *testing.T) {
	w := startWait(t, context.Background(), 0)
	w.nextAsk().grant <- 7
	if lease, err := w.result(); err != nil || lease != grant(7) {
		t.Fatalf("got %v, %v; want the grant", lease, err)
	}
}

// A store's answer (busy, --timeout) ends the wait, as the store said it.
func TestWaitReturnsTheStoresError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	w := startWait(t, ctx, 0)
	w.nextAsk()
	if lease, err := w.result(); !errors.Is(err, context.DeadlineExceeded) || lease != nil {
		t.Fatalf("got %v, %v; want the ask's context.DeadlineExceeded", lease, err)
	}
}

// A signal that would end semrun ends the wait at once: the ask under
// way is called off, and nothing is held.
func TestSignalEndsTheWait(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.Signal(40)} {
		t.Run(sig.String(), func(t *testing.T) {
			w := startWait(t, context.Background(), 0)
			a := w.nextAsk()
			w.send(sig)
			lease, err := w.result()
			var interrupted *runner.Interrupted
			if !errors.As(err, &interrupted) || interrupted.Signal != sig || lease != nil {
				t.Fatalf("got %v, %v; want Interrupted by %v, nothing held", lease, err, sig)
			}
			select {
			case <-a.ended:
			default:
				t.Error("the ask under way: still asking when Wait returned, want it called off")
			}
			if len(w.givenBack) != 0 {
				t.Errorf("given back: got %d permits, want none: none was granted", len(w.givenBack))
			}
		})
	}
}

// A permit granted as a signal ends the wait is given back: nothing held.
func TestGrantAsTheWaitEndsIsGivenBack(t *testing.T) {
	w := startWait(t, context.Background(), 9)
	w.nextAsk()
	w.send(syscall.SIGTERM)
	lease, err := w.result()
	var interrupted *runner.Interrupted
	if !errors.As(err, &interrupted) || lease != nil {
		t.Fatalf("got %v, %v; want Interrupted, nothing held", lease, err)
	}
	if got := expect(t, w.givenBack, "the late grant given back"); got != 9 {
		t.Errorf("given back: got permit %d, want 9", got)
	}
}

// A resized terminal, a status request or a closed pipe does not end the
// wait, nor ask again: the same ask goes on to its grant.
func TestSignalsThatDoNotEndTheWait(t *testing.T) {
	w := startWait(t, context.Background(), 0)
	a := w.nextAsk()
	w.send(syscall.SIGWINCH)
	w.send(syscall.SIGPIPE)
	a.grant <- 3
	if lease, err := w.result(); err != nil || lease != grant(3) {
		t.Fatalf("got %v, %v; want the grant of the first ask", lease, err)
	}
	if len(w.asks) != 0 {
		t.Errorf("asks: got %d more, want none", len(w.asks))
	}
}

// Stopped while waiting (Ctrl-Z), semrun leaves the line before it
// stops, giving back a permit granted as it left, so that a stopped waiter
// keeps no one waiting; continued, it asks again.
func TestStopWhileWaitingLeavesTheLineAndAsksAgain(t *testing.T) {
	w := startWait(t, context.Background(), 5)
	first := w.nextAsk()
	w.send(syscall.SIGTSTP)
	expect(t, w.stopping, "Stopping called")
	expect(t, w.suspended, "the job stopped")
	select {
	case <-first.ended:
	default:
		t.Error("the ask under way: still asking while stopped, want it called off")
	}
	if got := expect(t, w.givenBack, "the late grant given back"); got != 5 {
		t.Errorf("given back: got permit %d, want 5", got)
	}
	if len(w.asks) != 0 {
		t.Fatal("asked again while stopped, want no ask until continued")
	}
	w.continued <- struct{}{}
	second := w.nextAsk()
	second.grant <- 6
	if lease, err := w.result(); err != nil || lease != grant(6) {
		t.Fatalf("got %v, %v; want the grant of the ask after the continue", lease, err)
	}
}
