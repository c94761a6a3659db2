package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// semKeys are the Redis keys of one semaphore (lib.lua says what each
// holds). They share one hash tag, so one Cluster slot; braces in the
// prefix and the key are escaped so that neither can break the tag.
type semKeys struct {
	holders, info, token, queue, waiters, leases string
	// wake is the prefix of the waiters' wake lists: each waiter blocks on
	// its own (wakeList), where the scripts push its turn.
	wake string
}

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// keyUnescaper undoes keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

func newKeys(prefix, key string) semKeys {
	base := keyEscaper.Replace(prefix) + "{" + keyEscaper.Replace(key) + "}:"
	return semKeys{
		holders: base + "holders", info: base + "info", token: base + "token",
		queue: base + "queue", waiters: base + "waiters", leases: base + "leases", wake: base + "wake",
	}
}

// list is KEYS of every script, in the order lib.lua takes them.
func (k semKeys) list() []string {
	return []string{k.holders, k.info, k.token, k.queue, k.waiters, k.leases}
}

// wakeList is the wake list of the waiter whose permit id is id: named
// after a hash of the id, so that the list tells nobody a permit id. It
// shares the semaphore's hash tag.
func (k semKeys) wakeList(id string) string {
	sum := sha1.Sum([]byte(id))
	return k.wake + ":" + hex.EncodeToString(sum[:8])
}

// globEscaper escapes what SCAN's MATCH pattern would read as a wildcard.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// semaphores lists the semaphores under the prefix, sorted, with SCAN on every
// master: KEYS would block Redis for as long as it takes to walk every key.
func (s *Store) semaphores(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	prefix := keyEscaper.Replace(s.prefix) + "{"
	pattern := globEscaper.Replace(prefix) + "*}:*"
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
				if name, _, ok := strings.Cut(strings.TrimPrefix(iter.Val(), prefix), "}"); ok {
					mu.Lock()
					found[keyUnescaper.Replace(name)] = true
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
