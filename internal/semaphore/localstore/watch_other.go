//go:build unix && !linux

package localstore

import (
	"context"
	"os"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// seatWatch, without inotify, looks at the seats again every pollEvery.
type seatWatch struct{}

const pollEvery = 20 * time.Millisecond

func watchSeats(*keyDir) *seatWatch { return &seatWatch{} }

func (*seatWatch) close() {}

func (*seatWatch) wait(ctx context.Context, _ time.Duration) (bool, error) {
	return false, clock.Sleep(ctx, pollEvery)
}

// ring has no one to wake: waiters look again on their own.
func ring(*os.File) {}
