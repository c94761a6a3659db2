//go:build unix && !linux

package localstore

import (
	"errors"
	"fmt"
)

// Holds need a permit that several processes hold at once, each with a lock
// of its own: a byte lock (hold_linux.go). A permit here is an exclusive
// flock(2), which only one open file can hold.
var errNoHolds = fmt.Errorf("holds need open file description locks, which semrun uses on Linux only: %w", errors.ErrUnsupported)

func (k *keyDir) markHold(*heldPermits, int64) error { return errNoHolds }

func (k *keyDir) holdAlive([]span, int64) (bool, error) { return false, errNoHolds }

func (k *keyDir) joinHold([]span, int64) (*heldPermits, error) { return nil, errNoHolds }
