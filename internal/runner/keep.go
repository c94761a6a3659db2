package runner

import (
	"context"

	"github.com/semrun/semrun/internal/clock"
)

// Keep renews lease as Run does while a command runs, with no command:
// a hold's keeper. It returns nil when ctx ends, and why the permit is
// lost once it is: the store's word (an error wrapping
// semaphore.ErrLost), or no answer in time (ErrPresumedLost).
//
// Past the point where Run would stop its command, a keeper has nothing
// to stop, and its own renewals are not all that keeps the permit: the
// runs under its hold renew it too, while the keeper may have been unable
// to (frozen, starved). So it asks the store then, with a renewal bounded
// by AskFor, instead of presuming the permit lost on its own clock: only
// the store's word that it is gone, or no answer in time, is a loss.
func Keep(ctx context.Context, spec Spec, lease Lease) error {
	if spec.Clock == nil {
		spec.Clock = clock.System
	}
	renewCtx, stop := context.WithCancel(ctx)
	lost := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	nothingToStop := make(chan struct{})
	close(nothingToStop)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lease.Deadline().IsZero() {
			check(renewCtx, spec, lease, lost) // it never lapses: only an end from elsewhere
			return
		}
		keepAlive(renewCtx, spec, lease, renewals{renewed: renewed, lost: lost, stopped: nothingToStop, ask: true})
	}()
	defer func() {
		stop()
		<-done
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-lost:
			if ctx.Err() != nil {
				return nil // told to stop as it asked: the question is moot
			}
			return err
		case <-renewed:
		}
	}
}
