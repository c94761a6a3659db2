package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// failRenewOnce fails the next run of renew.lua, once armed, as a
// connection cut would, before Redis sees it.
type failRenewOnce struct {
	hash  string
	armed atomic.Bool
}

var errCutRenew = errors.New("connection cut before the renewal")

func (f *failRenewOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failRenewOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *failRenewOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && fmt.Sprint(args[1]) == f.hash && f.armed.CompareAndSwap(true, false) {
			cmd.SetErr(errCutRenew)
			return errCutRenew
		}
		return next(ctx, cmd)
	}
}

// TestHandedOverTermsRecordedBeforeTheCommand: a permit handed to a waiter
// with a min hold is no lease to start a command on until the store has
// its terms (the waiter's first call records them): a first call that
// fails gives it back and asks again, so that a command started on it
// cools whatever becomes of its holder.
func TestHandedOverTermsRecordedBeforeTheCommand(t *testing.T) {
	t.Parallel()
	srv, st, raw := setup(t, Options{})
	hook := &failRenewOnce{hash: scriptNamed(t, "renew").Hash()}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	waiting := wrapStore(t, c, Options{Prefix: testPrefix})
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})

	got, _ := startAcquire(t, waiting, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinHold: time.Hour}, 20*time.Second)
	waitListening(t, raw, key, 1)
	hook.armed.Store(true)
	release(t, h)
	r := receive(t, got, 15*time.Second, "the waiter after the holder released")
	if r.Err != nil {
		t.Fatalf("waiter: got %v, want a permit", r.Err)
	}
	if hook.armed.Load() {
		t.Fatalf("the waiter's first renewal: never sent, want it sent (and failed) before the command could start")
	}
	id := r.L.(*lease).id
	if minEnd, err := raw.HGet(ctxTimeout(t, 5*time.Second), k.Info, "#min "+protocol.Member(id)).Int64(); err != nil || minEnd <= 0 {
		t.Errorf("the min hold of the lease Acquire returned: got (%d, %v), want it recorded before the command could start", minEnd, err)
	}
	release(t, r.L)
}
