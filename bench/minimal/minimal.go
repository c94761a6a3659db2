// Package minimal is a counting semaphore in Redis at its simplest, which
// the bench holds semrun's cost against: one sorted set of leases on the
// server's clock, whose lapsed leases are swept, the rest counted, and a
// lease added when one is free; its release is a ZREM. No line, no fencing
// token, no restart fence, no weights, no events: what semrun does beyond
// it is what its promises cost.
package minimal

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// acquire takes one of ARGV[1] permits of KEYS[1] for ARGV[3], a lease of
// ARGV[2] ms: 1 when granted.
var acquire = redis.NewScript(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

// Scripted are the commands the script calls, as INFO commandstats names
// them: what a client sends is the rest (HELLO, EVALSHA, ZREM).
var Scripted = map[string]bool{"time": true, "zremrangebyscore": true, "zcard": true, "zadd": true, "pexpire": true}

// GrantRelease takes one of 3 permits of key, with a lease of 30s, for id,
// and gives it back: the script by EVALSHA (loaded when Redis lacks it),
// then a ZREM.
func GrantRelease(ctx context.Context, c redis.Cmdable, key, id string) error {
	got, err := acquire.Run(ctx, c, []string{key}, 3, 30000, id).Int()
	if err != nil {
		return err
	}
	if got != 1 {
		return fmt.Errorf("minimal semaphore: %s not granted", id)
	}
	return c.ZRem(ctx, key, id).Err()
}
