//go:build unix && !linux

package localstore

import (
	"context"
	"os"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// permitWatch, without inotify, looks at the permits again every pollEvery.
type permitWatch struct{}

const pollEvery = 20 * time.Millisecond

func watchPermits(*keyDir) *permitWatch { return &permitWatch{} }

func watchPermitsOf([]*keyDir) *permitWatch { return &permitWatch{} }

func (*permitWatch) close() {}

func (*permitWatch) wait(ctx context.Context, _ time.Duration) (bool, error) {
	return false, clock.Sleep(ctx, pollEvery)
}

// ring has no one to wake: waiters look again on their own.
func ring(*os.File) {}

// logWatch, without inotify, has a follower of key logs (Events) read
// them all every pollLogs.
type logWatch struct{}

const pollLogs = 250 * time.Millisecond

func newLogWatch() *logWatch { return &logWatch{} }

func (*logWatch) live() bool { return false }

func (*logWatch) add(*os.File) int { return -1 }

func (*logWatch) wait(ctx context.Context, d time.Duration) (map[int]bool, bool, error) {
	return nil, true, clock.Sleep(ctx, min(d, pollLogs))
}

func (*logWatch) close() {}
