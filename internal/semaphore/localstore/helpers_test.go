//go:build unix

package localstore_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// TestContract: the local store obeys the rules of every store.
func TestContract(t *testing.T) {
	semaphoretest.Run(t, semaphoretest.Kind{
		Name: "Local",
		Start: func(t *testing.T) *semaphoretest.Backend {
			dir := t.TempDir()
			return &semaphoretest.Backend{
				Open: func(warnf func(string, ...any)) semaphore.Store {
					return newLocal(t, dir, warnf)
				},
				Written: func() []string { return dirNames(t, dir) },
			}
		},
	})
}

// The helpers every store's tests share.
var (
	uniqueKey    = semaphoretest.UniqueKey
	ctxTimeout   = semaphoretest.Context
	acquire      = semaphoretest.Acquire
	acquireFor   = semaphoretest.AcquireWithin
	hold         = semaphoretest.Hold
	release      = semaphoretest.Release
	startAcquire = semaphoretest.StartAcquire
	receive      = semaphoretest.Receive
	signal       = semaphoretest.Signal
	waitFor      = semaphoretest.WaitFor
	statusOf     = semaphoretest.StatusOf
)

// newLocal opens a host-local store on dir, closed when t ends.
func newLocal(t testing.TB, dir string, warnf func(string, ...any)) *localstore.Store {
	t.Helper()
	s, err := localstore.New(localstore.Options{Dir: dir, Warnf: warnf})
	if err != nil {
		t.Fatalf("New(%q): got error %v, want nil", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dirNames lists the names in dir, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): got error %v, want nil", dir, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// tally counts how a no-wait Acquire ended, busy or failed, and gives back
// the permit it got.
func tally(l semaphore.Lease, err error, busy, failed *atomic.Int64) {
	switch {
	case errors.Is(err, semaphore.ErrBusy):
		busy.Add(1)
	case err != nil:
		failed.Add(1)
	default:
		_ = l.Release(context.Background())
	}
}

// abandon drops a lease as a process that exits does: unreleased, its
// files closed.
func abandon(l semaphore.Lease) {
	for _, f := range l.Files() {
		f.Close()
	}
}
