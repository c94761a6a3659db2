package semaphore

import (
	"context"
	"errors"
)

// errNoLocal refuses the local store on Windows. It is built on flock(2):
// a lock the child inherits keeps the seat held, and a lock file can be
// unlinked while held. LockFileEx locks belong to the process that took
// them, and an open file cannot be removed, so a port would be another
// store, not this one.
var errNoLocal = errors.New("--local is not supported on Windows; use Redis (--redis)")

// Local is the host-local store, which Windows does not have.
type Local struct{}

// DefaultLockDir is empty: there is no lock directory on Windows.
func DefaultLockDir() string { return "" }

// NewLocal always fails on Windows.
func NewLocal(LocalOptions) (*Local, error) { return nil, errNoLocal }

// Dir is empty.
func (*Local) Dir() string { return "" }

// Close does nothing.
func (*Local) Close() error { return nil }

// Acquire always fails.
func (*Local) Acquire(context.Context, Request) (Lease, error) { return nil, errNoLocal }

// Status always fails.
func (*Local) Status(context.Context, []string) ([]KeyStatus, error) { return nil, errNoLocal }
