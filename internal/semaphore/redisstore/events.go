package redisstore

import (
	"context"
	"errors"

	"github.com/semrun/semrun/internal/semaphore"
)

// Events implements semaphore.Events.
func (s *Store) Events(ctx context.Context, q semaphore.EventQuery, each func(semaphore.Event) error) error {
	return errors.New("events: not built yet")
}

// Keys implements semaphore.Events.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	return nil, errors.New("events: not built yet")
}
