package redisstore

import (
	"context"
	"errors"
	"time"
)

// Not yet: an operator's hand on a key.

func (s *Store) SetCapacity(context.Context, string, int) error { return errors.ErrUnsupported }

func (s *Store) Pause(context.Context, string, string, time.Duration) error {
	return errors.ErrUnsupported
}

func (s *Store) Resume(context.Context, string) error { return errors.ErrUnsupported }

func (s *Store) Revoke(context.Context, string, string, string, bool) error {
	return errors.ErrUnsupported
}
