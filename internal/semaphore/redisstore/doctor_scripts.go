package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// scriptCheck runs semrun's scripts as a run does, on a throw-away
// semaphore.
type scriptCheck struct {
	s              *Store
	key            string
	keys           protocol.Keys
	holder, waiter string
	// loaded: Redis lacked a script, which EVAL loaded.
	loaded bool
}

// scripts runs semrun's own scripts as a run does, on a throw-away
// semaphore: a grant, a waiter in line, a renewal, a release that hands
// the permit over to the waiter (read with BLPOP), status, and the last
// release. A missing permission the acl check found is not told again.
func (s *Store) scripts(ctx context.Context, aclFailed bool) semaphore.Check {
	c := &scriptCheck{s: s, key: doctorKey(), holder: newPermitID(), waiter: newPermitID()}
	c.keys = protocol.NewKeys(s.prefix, c.key)
	defer s.cleanup(ctx, append(c.keys.All(), c.keys.WakeList(c.holder), c.keys.WakeList(c.waiter)))
	step, err := c.run(ctx)
	if err == nil {
		how := "already loaded: EVALSHA"
		if c.loaded {
			how = "loaded with EVAL, then run with EVALSHA"
		}
		return semaphore.Check{Name: "scripts", Status: semaphore.CheckOK, Detail: "semrun's scripts (" + how + ") granted, queued, renewed, handed a permit over (BLPOP) and released on a throw-away key"}
	}
	_, _, perm := refusal(err)
	if perm && aclFailed {
		return semaphore.Check{Name: "scripts", Status: semaphore.CheckSkip, Detail: fmt.Sprintf("stopped at %s by a missing permission (see acl)", step)}
	}
	check := semaphore.Check{Name: "scripts", Status: semaphore.CheckFail, Detail: step + ": " + shortError(err), Fix: s.fixFor(err.Error())}
	if perm {
		check.Fix = "find the command refused as an admin: redis-cli ACL LOG 1 (its object), then ACL SETUSER " + s.client.User() + " +COMMAND"
	}
	return check
}

// call runs a script with EVALSHA, and with EVAL when Redis lacks it,
// each in one round trip with a PEXPIRE of the key's log and counters,
// which a script gives a week's life: wherever doctor stops, what it
// wrote expires within a minute.
func (c *scriptCheck) call(ctx context.Context, args protocol.Args) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.connectTimeout)
	defer cancel()
	run := func(send func(redis.Scripter) *redis.Cmd) (any, error) {
		var cmd *redis.Cmd
		_, err := c.s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = send(p)
			p.PExpire(ctx, c.keys.Events, time.Minute)
			p.PExpire(ctx, c.keys.Stats, time.Minute)
			return nil
		})
		if cmd == nil {
			return nil, err
		}
		return cmd.Result()
	}
	res, err := run(func(p redis.Scripter) *redis.Cmd { return protocol.EvalSha(ctx, p, c.keys, args) })
	if protocol.IsNoScript(err) {
		c.loaded = true
		res, err = run(func(p redis.Scripter) *redis.Cmd { return protocol.Eval(ctx, p, c.keys, args) })
	}
	return res, protocol.Wrap(args, err)
}

// acquire asks for the key's one permit for id.
func (c *scriptCheck) acquire(ctx context.Context, id string, wait bool) (protocol.AcquireReply, error) {
	a := protocol.AcquireArgs{ID: id, Permits: 1, TTL: doctorLease, Weight: 1}
	if wait {
		a.Wait = doctorLease
	}
	res, err := c.call(ctx, a)
	if err != nil {
		return protocol.AcquireReply{}, err
	}
	return protocol.DecodeAcquire(res)
}

// run runs each step in turn, and returns the one that failed.
func (c *scriptCheck) run(ctx context.Context) (string, error) {
	if r, err := c.acquire(ctx, c.holder, false); err != nil || !r.Granted {
		if err == nil {
			err = fmt.Errorf("no permit granted on a free key (%d held, fenced %dms)", r.Held, r.Fenced)
		}
		return "acquire", err
	}
	if r, err := c.acquire(ctx, c.waiter, true); err != nil || r.Granted || r.Position != 1 {
		if err == nil {
			err = fmt.Errorf("a second caller of a key of 1 permit: got %+v, want first in line", r)
		}
		return "acquire (wait)", err
	}
	// As a renewal with min replicas sends it: the whole script.
	call, cancel := context.WithTimeout(ctx, c.s.connectTimeout)
	renew := protocol.RenewArgs{ID: c.holder, TTL: doctorLease}
	res, err := protocol.Eval(call, c.s.client, c.keys, renew).Result()
	cancel()
	if r, derr := protocol.DecodeRenew(res); err == nil && (derr != nil || !r.Renewed) {
		err = fmt.Errorf("the holder's permit was not renewed: %w", derr)
	}
	if err != nil {
		return "renew (EVAL)", protocol.Wrap(renew, err)
	}
	if _, err := c.call(ctx, protocol.ReleaseArgs{ID: c.holder}); err != nil {
		return "release", err
	}
	// A whole second, which Redis before 6.0 takes too (the permit is there
	// already): the acl check tries what waiters send.
	kv, err := c.s.do(ctx, c.s.client.Do, "BLPOP", c.keys.WakeList(c.waiter), 1).StringSlice()
	if err == nil && (len(kv) != 2 || !protocol.ReadTurn(kv[1]).Handed) {
		err = fmt.Errorf("got %q, want the permit handed over", kv)
	}
	if err != nil {
		return "BLPOP of the waiter's wake list", err
	}
	if res, err = c.call(ctx, protocol.StatusArgs{}); err != nil {
		return "status", err
	}
	if st, err := readStatus(c.key, res, nil); err != nil || st.Held != 1 || len(st.Waiters) != 0 {
		return "status", fmt.Errorf("got %+v (%v), want the waiter holding", st, err)
	}
	if res, err = c.call(ctx, protocol.ReleaseArgs{ID: c.waiter}); err != nil {
		return "release", err
	}
	if r, err := protocol.DecodeRelease(res); err != nil || !r.Released {
		return "release", fmt.Errorf("the waiter's permit was not held: %w", err)
	}
	return "", nil
}
