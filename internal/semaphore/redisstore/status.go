package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
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
		res, err := s.call(ctx, statusScript, newKeys(s.prefix, key), statusArgs())
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

// readStatus reads status.lua's reply, or the error it came with. A
// record that is not one is left out, as the scripts do.
func readStatus(key string, res any, err error) (semaphore.KeyStatus, error) {
	if err != nil {
		return semaphore.KeyStatus{}, err
	}
	r, err := decodeStatus(res)
	if err != nil {
		return semaphore.KeyStatus{}, err
	}
	st := semaphore.KeyStatus{Key: key, Capacity: int(max(r.capacity, 0)), Held: int(max(r.held, 0)),
		Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{},
		Fenced: time.Duration(min(max(r.fenced, 0), semaphore.MaxTTL.Milliseconds())) * time.Millisecond}
	if len(r.holders) > statusList || len(r.waiters) > statusList {
		return semaphore.KeyStatus{}, fmt.Errorf("%s: unexpected reply of %d holders and %d waiters", statusScript.name, len(r.holders), len(r.waiters))
	}
	for _, e := range r.holders {
		pair, _ := e.([]any)
		if len(pair) != 2 {
			return semaphore.KeyStatus{}, fmt.Errorf("%s: unexpected holder %s", statusScript.name, shortReply(e))
		}
		expiry, _ := pair[0].(int64)
		rec, _ := pair[1].(string)
		h, err := readHolder(rec, r.now)
		if err != nil {
			continue
		}
		h.ExpiresIn = time.Duration(min(max(expiry-r.now, 0), semaphore.MaxTTL.Milliseconds())) * time.Millisecond
		st.Holders = append(st.Holders, h)
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
	st.Unlisted = int(max(r.holding-statusList, 0) + max(r.waiting-statusList, 0))
	return st, nil
}
