package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Status implements semaphore.Store. Without keys, it lists every key under
// the prefix (see semaphores).
func (s *Store) Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = s.semaphores(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]semaphore.KeyStatus, 0, len(keys))
	for _, key := range keys {
		res, err := s.call(ctx, statusScript, newKeys(s.prefix, key), nil)
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		st, err := readStatus(key, res)
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// readStatus reads status.lua's reply. A record that is not one is left
// out, as the scripts do; a holder's still takes one seat.
func readStatus(key string, res any) (semaphore.KeyStatus, error) {
	r, err := decodeStatus(res)
	if err != nil {
		return semaphore.KeyStatus{}, err
	}
	st := semaphore.KeyStatus{Key: key, Capacity: int(max(r.capacity, 0)), Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{}}
	for _, e := range r.holders {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			return semaphore.KeyStatus{}, fmt.Errorf("%s: unexpected holder %s", statusScript.name, shortReply(e))
		}
		expiry, _ := pair[0].(int64)
		rec, _ := pair[1].(string)
		h, err := readHolder(rec, r.now)
		if err != nil {
			st.Held++
			continue
		}
		h.ExpiresIn = time.Duration(expiry-r.now) * time.Millisecond
		st.Holders = append(st.Holders, h)
		st.Held += h.Weight
	}
	for _, e := range r.waiters {
		rec, _ := e.(string)
		w, err := readWaiter(rec, r.now)
		if err != nil {
			continue
		}
		w.Position = len(st.Waiters) + 1
		st.Waiters = append(st.Waiters, w)
	}
	return st, nil
}
