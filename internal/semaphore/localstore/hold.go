//go:build unix

package localstore

import (
	"context"
	"errors"

	"github.com/semrun/semrun/internal/semaphore"
)

func (s *Store) Hold(context.Context, semaphore.Lease, semaphore.HolderInfo) (semaphore.Handle, error) {
	return semaphore.Handle{}, errors.ErrUnsupported
}

func (s *Store) Attach(context.Context, semaphore.Handle, bool) (semaphore.Lease, semaphore.HoldInfo, error) {
	return nil, semaphore.HoldInfo{}, errors.ErrUnsupported
}

func (s *Store) EndHold(context.Context, semaphore.Handle, semaphore.HoldEnd) (semaphore.HoldEnd, bool, error) {
	return semaphore.HoldEnd{}, false, errors.ErrUnsupported
}
