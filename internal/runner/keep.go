package runner

import (
	"context"

	"github.com/semrun/semrun/internal/clock"
)

// Keep renews lease as Run does while a command runs, with no command:
// a hold's keeper. It returns nil when ctx ends, and why the permit is
// lost once it is: the store's word (an error wrapping
// semaphore.ErrLost), or no renewal in time (ErrPresumedLost), on the
// same clock and with the same margin as Run.
func Keep(ctx context.Context, spec Spec, lease Lease) error {
	if spec.Clock == nil {
		spec.Clock = clock.System
	}
	renewCtx, stop := context.WithCancel(ctx)
	lost := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepAlive(renewCtx, spec, lease, renewed, lost)
	}()
	giveUp := spec.Clock.NewAlarm(lossAt(spec, lease))
	defer func() {
		stop()
		<-done
		giveUp.Stop()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-lost:
			return err
		case <-renewed:
			giveUp.Stop()
			giveUp = spec.Clock.NewAlarm(lossAt(spec, lease))
		case <-giveUp.C:
			if at := lossAt(spec, lease); until(spec.Clock, at) > 0 {
				giveUp = spec.Clock.NewAlarm(at) // a renewal is on its way to us
				continue
			}
			return presumedLost(spec)
		}
	}
}
