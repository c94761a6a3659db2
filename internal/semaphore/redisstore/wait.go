package redisstore

import (
	"context"
	"errors"
	"slices"
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
	_, t, popped, err = w.waitAny(ctx, []string{w.key}, d)
	return t, popped, err
}

// waitAny is wait on several wake lists (a caller of several keys, on one
// server): it also returns which list it popped.
func (w *wakeups) waitAny(ctx context.Context, lists []string, d time.Duration) (i int, t protocol.Turn, popped bool, err error) {
	type result struct {
		i      int
		elem   string
		popped bool
		err    error
	}
	// The call's own deadline is a second past BLPOP's timeout.
	call, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+time.Second)
	done := make(chan result, 1)
	go func() {
		defer cancel()
		args := []any{"BLPOP"}
		for _, l := range lists {
			args = append(args, l)
		}
		args = append(args, strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64))
		kv, err := w.client.Do(call, args...).StringSlice()
		if errors.Is(err, redis.Nil) {
			err = nil // timed out: time to renew the place in line
		}
		var p result
		if err == nil && len(kv) == 2 {
			p.i, p.elem, p.popped = slices.Index(lists, kv[0]), kv[1], true
		}
		if p.i < 0 {
			p.i, p.popped = 0, false // a list it did not ask for: Redis's word
		}
		p.err = err
		done <- p
	}()
	select {
	case <-ctx.Done():
		return 0, protocol.Turn{}, false, context.Cause(ctx)
	case p := <-done:
		if p.err != nil {
			// Waiting goes on: the next ask retries the store, or fails.
			return 0, protocol.Turn{}, false, clock.Sleep(ctx, min(d, w.poll.step()))
		}
		return p.i, protocol.ReadTurn(p.elem), p.popped, nil
	}
}
