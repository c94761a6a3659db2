package redisstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// semaphores lists the semaphores under the prefix, sorted, with SCAN on every
// master: KEYS would block Redis for as long as it takes to walk every key.
func (s *Store) semaphores(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	pattern := protocol.KeyPattern(s.prefix)
	masters, err := s.client.Masters(ctx)
	if err := s.noServer(err); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", s.prefix, s.addr, err)
	}
	var (
		mu    sync.Mutex
		found = map[string]bool{}
		wg    sync.WaitGroup
		errs  = make([]error, len(masters))
	)
	for i, m := range masters {
		wg.Go(func() {
			iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				// A key whose state is gone but whose past is kept is held
				// by nobody: Keys lists those.
				if name, ok := protocol.SemaphoreOf(s.prefix, iter.Val()); ok && !protocol.IsPast(iter.Val()) {
					mu.Lock()
					found[name] = true
					mu.Unlock()
				}
			}
			errs[i] = iter.Err()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err := s.noServer(err); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", s.prefix, s.addr, err)
		}
	}
	return slices.Sorted(maps.Keys(found)), nil
}
