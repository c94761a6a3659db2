package redisstore

import (
	"context"
	"fmt"

	"github.com/semrun/semrun/internal/semaphore"
)

// scriptCheck runs semrun's scripts as a run does, on a throw-away
// semaphore.
type scriptCheck struct {
	s              *Store
	key            string
	keys           semKeys
	holder, waiter string
	// loaded: Redis lacked a script, which EVAL loaded.
	loaded bool
}

// scripts runs semrun's own scripts as a run does, on a throw-away
// semaphore: a grant, a waiter in line, a renewal, a release that hands
// the seat over to the waiter (read with BLPOP), status, and the last
// release. A missing permission the acl check found is not told again.
func (s *Store) scripts(ctx context.Context, aclFailed bool) semaphore.Check {
	c := &scriptCheck{s: s, key: doctorKey(), holder: newPermitID(), waiter: newPermitID()}
	c.keys = newKeys(s.prefix, c.key)
	defer s.cleanup(ctx, append(c.keys.list(), c.keys.wakeList(c.holder), c.keys.wakeList(c.waiter)))
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

// call runs a script with EVALSHA, and with EVAL when Redis lacks it.
func (c *scriptCheck) call(ctx context.Context, sc script, args namedArgs) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.connectTimeout)
	defer cancel()
	res, err := sc.lua().EvalSha(ctx, c.s.client, c.keys.list(), args...).Result()
	if isNoScript(err) {
		c.loaded = true
		res, err = sc.lua().Eval(ctx, c.s.client, c.keys.list(), args...).Result()
	}
	return res, sc.wrap(err)
}

// acquire asks for a permit of the key's one seat for id.
func (c *scriptCheck) acquire(ctx context.Context, id string, wait bool) (acquireReply, error) {
	a := acquireArgs{id: id, permits: 1, ttl: doctorLease, weight: 1, wake: c.keys.wake, line: MaxLine}
	if wait {
		a.wait = doctorLease
	}
	res, err := c.call(ctx, acquireScript, a.named())
	if err != nil {
		return acquireReply{}, err
	}
	return decodeAcquire(res)
}

// run runs each step in turn, and returns the one that failed.
func (c *scriptCheck) run(ctx context.Context) (string, error) {
	if r, err := c.acquire(ctx, c.holder, false); err != nil || !r.granted {
		if err == nil {
			err = fmt.Errorf("no permit granted on a free key (%d held, fenced %dms)", r.held, r.fenced)
		}
		return "acquire", err
	}
	if r, err := c.acquire(ctx, c.waiter, true); err != nil || r.granted || r.position != 1 {
		if err == nil {
			err = fmt.Errorf("a second caller of a key of 1 permit: got %+v, want first in line", r)
		}
		return "acquire (wait)", err
	}
	// As a renewal with min replicas sends it: the whole script.
	call, cancel := context.WithTimeout(ctx, c.s.connectTimeout)
	res, err := renewScript.lua().Eval(call, c.s.client, c.keys.list(), renewArgs(c.holder, doctorLease, 0)...).Result()
	cancel()
	if renewed, derr := decodeRenew(res); err == nil && (derr != nil || !renewed) {
		err = fmt.Errorf("the holder's permit was not renewed: %w", derr)
	}
	if err != nil {
		return "renew (EVAL)", renewScript.wrap(err)
	}
	if _, err := c.call(ctx, releaseScript, releaseArgs(c.holder, c.keys.wake)); err != nil {
		return "release", err
	}
	// A whole second, which Redis before 6.0 takes too (the seat is there
	// already): the acl check tries what waiters send.
	kv, err := c.s.do(ctx, c.s.client.Do, "BLPOP", c.keys.wakeList(c.waiter), 1).StringSlice()
	if err == nil && (len(kv) != 2 || !readTurn(kv[1]).handed) {
		err = fmt.Errorf("got %q, want the permit handed over", kv)
	}
	if err != nil {
		return "BLPOP of the waiter's wake list", err
	}
	if res, err = c.call(ctx, statusScript, statusArgs()); err != nil {
		return "status", err
	}
	if st, err := readStatus(c.key, res, nil); err != nil || st.Held != 1 || len(st.Waiters) != 0 {
		return "status", fmt.Errorf("got %+v (%v), want the waiter holding", st, err)
	}
	if res, err = c.call(ctx, releaseScript, releaseArgs(c.waiter, c.keys.wake)); err != nil {
		return "release", err
	}
	if r, err := decodeRelease(res); err != nil || !r.released {
		return "release", fmt.Errorf("the waiter's permit was not held: %w", err)
	}
	return "", nil
}
