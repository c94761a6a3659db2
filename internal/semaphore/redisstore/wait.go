package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// wakeups are a waiter's wake list. The scripts push its turn there, and
// it stays until read: a wake-up that comes while the waiter asks is not lost.
type wakeups struct {
	client Client
	key    string
	// poll paces the waiter when BLPOP fails (a Redis before 6.0 refuses
	// its timeouts in fractions of a second): it looks again instead.
	poll backoff
}

// wait returns what was pushed to the wake list (popped), or nothing after
// d, or ctx's cause: at once, even while BLPOP still blocks.
func (w *wakeups) wait(ctx context.Context, d time.Duration) (t protocol.Turn, popped bool, err error) {
	type result struct {
		elem   string
		popped bool
		err    error
	}
	// The call's own deadline is a second past BLPOP's timeout.
	call, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+time.Second)
	done := make(chan result, 1)
	go func() {
		defer cancel()
		kv, err := w.client.Do(call, "BLPOP", w.key, strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)).StringSlice()
		if errors.Is(err, redis.Nil) {
			err = nil // timed out: time to renew the place in line
		}
		var p result
		if err == nil && len(kv) == 2 {
			p.elem, p.popped = kv[1], true
		}
		p.err = err
		done <- p
	}()
	select {
	case <-ctx.Done():
		return protocol.Turn{}, false, context.Cause(ctx)
	case p := <-done:
		if p.err != nil {
			// Waiting goes on: the next ask retries the store, or fails.
			return protocol.Turn{}, false, clock.Sleep(ctx, min(d, w.poll.step()))
		}
		return protocol.ReadTurn(p.elem), p.popped, nil
	}
}
