package redisstore

import (
	"context"
	"fmt"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// Status implements semaphore.Store. Without keys, it lists every key under
// the prefix (see semaphores). A key that cannot be read (a key of another
// type under the prefix, an absurd reply) comes with its Error: the others
// are still shown.
func (s *Store) Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = s.semaphores(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]semaphore.KeyStatus, 0, len(keys))
	for _, key := range keys {
		res, err := s.call(ctx, protocol.NewKeys(s.prefix, key), protocol.StatusArgs{})
		if err != nil && (ctx.Err() != nil || !s.keyFault(err)) {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		st, err := readStatus(key, res, err)
		if err != nil {
			st = semaphore.KeyStatus{Key: key, Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{}, Error: err.Error()}
		}
		out = append(out, st)
	}
	return out, nil
}

// keyFault tells an error of one key's data (the server answered) from
// the store's (unreachable, refused).
func (s *Store) keyFault(err error) bool {
	_, _, perm := refusal(err)
	return !retryable(err) && !unauthenticated(err) && !perm
}

// readStatus reads status.lua's reply, or the error it came with.
func readStatus(key string, res any, err error) (semaphore.KeyStatus, error) {
	if err != nil {
		return semaphore.KeyStatus{}, err
	}
	return protocol.DecodeStatus(key, res)
}
