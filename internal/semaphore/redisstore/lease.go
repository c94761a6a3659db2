package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// lease is a held permit: a member of the semaphore's holders, whose score
// is when it lapses on the server's clock.
type lease struct {
	s           *Store
	minReplicas int
	key         string
	keys        protocol.Keys
	id          string
	ttl         time.Duration
	// fence is the holder's restart fence, which the key remembers while
	// the lease lasts.
	fence time.Duration
	token int64
	slots semaphore.Slots
	// share names this process among those attached to a hold (see
	// hold.go); empty for a lease that is not a hold's.
	share string
	// asked is how long after its grant the store renews the permit at
	// most (the request's max runtime and overrun; 0: no bound), and bound
	// that instant, here; minHold is the request's.
	asked, minHold time.Duration
	// coolAfter is the request's MinHoldAfter: which ends cool.
	coolAfter semaphore.CoolAfter
	// unbound: the store has yet to record the terms (a permit handed
	// over); the first renewal does.
	unbound bool
	// countReplicas: the next replicated renewal also reads how many
	// replicas the master has, to warn once of min replicas that is no
	// majority of them (with --verbose only).
	countReplicas atomic.Bool

	mu              sync.Mutex
	deadline, bound clock.Instant
}

// newLease is the lease of req's permit id, granted at the server's
// clock since, as a script that ran at its clock now answered a call sent
// at sent: its bound is the server's, here, never later.
func (s *Store) newLease(req semaphore.Request, k protocol.Keys, id string, token int64, slots semaphore.Slots, deadline clock.Instant, sent clock.Instant, since, now int64) *lease {
	l := &lease{s: s, minReplicas: req.MinReplicas, key: req.Key, keys: k, id: id, ttl: req.TTL, fence: req.RestartFence, token: token, slots: slots,
		deadline: deadline, asked: asked(req), minHold: req.MinHold, coolAfter: req.MinHoldAfter}
	if len(slots.Numbers) != req.Takes() {
		// A reply, or a turn, is anyone's: slots that are not its weight's
		// are none, as a holder record's (protocol's readHolder).
		l.slots = semaphore.Slots{}
	}
	if l.asked > 0 {
		// sent is no later than now, here: the bound is no later than
		// the store's. A permit is granted by the call (since = now), or
		// handed over after the call that put its waiter in line; the
		// reply is bounded either way.
		after := min(max(since-now, -protocol.MaxTTL.Milliseconds()), protocol.MaxWaiterLease.Milliseconds())
		l.bound = sent.Add(l.asked + time.Duration(after-1)*time.Millisecond)
		if l.deadline.After(l.bound) {
			l.deadline = l.bound
		}
	}
	l.countReplicas.Store(s.verbose && req.MinReplicas > 0)
	return l
}

// asked is how long after its grant the store renews req's permit at
// most; 0 for no bound.
func asked(req semaphore.Request) time.Duration {
	if req.MaxRuntime <= 0 {
		return 0
	}
	return req.MaxRuntime + semaphore.Overrun(req.KillAfter, req.TTL)
}

func (l *lease) Token() int64 { return l.token }

func (l *lease) Deadline() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *lease) Bound() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bound
}

func (l *lease) Renew(ctx context.Context) error {
	sent := clock.Now()
	var renewed bool
	var left, hard int64
	var err error
	if l.minReplicas > 0 {
		renewed, left, hard, err = l.renewReplicated(ctx)
	} else {
		var res any
		if res, err = protocol.Run(ctx, l.s.client, l.keys, l.renewArgs()); err == nil {
			renewed, left, hard, err = l.renewed(res)
		}
	}
	var ended *semaphore.HoldEndedError
	var revoked *semaphore.RevokedError
	if errors.As(err, &ended) || errors.As(err, &revoked) {
		return err // the store's own word, which says the key
	}
	if err != nil {
		return fmt.Errorf("renew key %q on %s: %w", l.key, l.s.addr, err)
	}
	if !renewed {
		return fmt.Errorf("renew key %q: %w", l.key, semaphore.ErrLost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The script's expiry is its clock's reading, rounded down, plus what
	// it left: the ttl, or less at the bound.
	if d := sent.Add(serverSpan(min(left, l.ttl.Milliseconds()))); d.After(l.deadline) {
		l.deadline = d
	}
	if hard > 0 {
		// The store's word, after a step of its clock say, or a hold's,
		// which its keeper asked for: the earlier holds.
		if b := sent.Add(time.Duration(hard-1) * time.Millisecond); l.bound.IsZero() || b.Before(l.bound) {
			l.bound = b
		}
	}
	// Both are the store's bound, seen from two calls: the earlier holds.
	if !l.bound.IsZero() && l.deadline.After(l.bound) {
		l.deadline = l.bound
	}
	return nil
}

// renewReplicated renews the lease and waits, on the same connection, for
// minReplicas replicas to have the renewal, and so every write before it,
// the grant included. A renewal they do not all have in time does not
// count: a failover could lose it.
func (l *lease) renewReplicated(ctx context.Context) (renewed bool, left, hard int64, err error) {
	res, wait, err := l.replicated(ctx, l.renewArgs(), l.countReplicas.Load())
	if err != nil {
		return false, 0, 0, err
	}
	if renewed, left, hard, err = l.renewed(res); err != nil || !renewed {
		return false, 0, 0, err
	}
	if err := wait(); err != nil {
		return false, 0, 0, err
	}
	return true, left, hard, nil
}

// replicated runs the script of args on the node that serves the key and,
// on the same connection, WAITs for the lease's min replicas to have it,
// and so every write before it; with count, it reads the master's
// replicas too (sayMajority). It returns the script's reply and wait,
// which says whether the replicas had it in time.
func (l *lease) replicated(ctx context.Context, args protocol.Args, count bool) (res any, wait func() error, err error) {
	node, err := l.s.client.Node(ctx, l.keys.Holders)
	if err != nil {
		return nil, nil, fmt.Errorf("find the node that serves key %q: %w", l.key, err)
	}
	var script, waited, info *redis.Cmd
	timeout := replicaWait(l.ttl)
	if d, ok := ctx.Deadline(); ok {
		// WAIT must answer before the call's deadline cuts the connection.
		timeout = max(min(timeout, time.Until(d)/2), time.Millisecond)
	}
	_, err = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		// The whole script: a NOSCRIPT reply to EVALSHA could not be
		// answered with a load in time, in a pipeline.
		script = protocol.Eval(ctx, pipe, l.keys, args)
		waited = pipe.Do(ctx, "WAIT", l.minReplicas, timeout.Milliseconds())
		if count {
			// In the same round trip: --verbose costs no wait of its own.
			info = pipe.Do(ctx, "INFO", "replication")
		}
		return nil
	})
	if err != nil && info != nil && script.Err() == nil && waited.Err() == nil {
		err = nil // INFO refused (an ACL user without +info): the count only informs
	}
	if info != nil {
		l.sayMajority(info)
	}
	if err != nil {
		if redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ") {
			// The slot moved: the next try asks the node that serves it now.
			l.s.client.Moved(ctx)
		}
		return nil, nil, protocol.Wrap(args, err)
	}
	if res, err = script.Result(); err != nil {
		return nil, nil, protocol.Wrap(args, err)
	}
	return res, func() error {
		acked, err := waited.Int64()
		if err != nil {
			return err
		}
		if acked < int64(l.minReplicas) {
			return fmt.Errorf("%d of %d replicas had it within %v (%s)", acked, l.minReplicas, timeout, l.s.names.Name(semaphore.MinReplicasSetting))
		}
		return nil
	}, nil
}

// sayMajority warns, once, when the lease's min replicas is no majority of
// the replicas the master's INFO replication counts.
func (l *lease) sayMajority(info *redis.Cmd) {
	text, err := info.Text()
	var refused redis.Error
	if err != nil && !errors.As(err, &refused) {
		return // no answer: asked again with the next renewal
	}
	if !l.countReplicas.CompareAndSwap(true, false) || err != nil {
		return // said already, or refused (an ACL user without +info)
	}
	replicas, err := strconv.Atoi(parseInfo(text)["connected_slaves"])
	if err != nil {
		return
	}
	if why, fix := l.s.noMajority(l.minReplicas, replicas); why != "" {
		l.s.warnf("key %q: %s; use %s", l.key, why, fix)
	}
}

// majority is the least min replicas that survives a partition which
// leaves the master with some of its replicas: more than half of them.
// Two sides can then never both have their WAITs answered, the old master
// by the replicas it kept and a promoted one by the others, and so never
// both grant the same permit.
func majority(replicas int) int { return replicas/2 + 1 }

// noMajority says why minReplicas does not survive such a partition of a
// master with replicas, and the setting that does; empty when it does, or
// when it asks for none.
func (s *Store) noMajority(minReplicas, replicas int) (why, fix string) {
	if minReplicas <= 0 || minReplicas >= majority(replicas) {
		return "", ""
	}
	return fmt.Sprintf("%s %d is not more than half of the master's %d replicas: a partition can leave the old master and a promoted replica with %d each, and both grant the same permit",
			s.names.Name(semaphore.MinReplicasSetting), minReplicas, replicas, minReplicas),
		s.names.Ways(semaphore.MinReplicasSetting, strconv.Itoa(majority(replicas)))
}

// renewArgs are the lease's renewal: renew.lua's, or hold.lua's for a
// share of a hold, which renews with the hold's own lease and fence.
func (l *lease) renewArgs() protocol.Args {
	if l.share != "" {
		return l.shareArgs()
	}
	return protocol.RenewArgs{ID: l.id, TTL: l.ttl, Fence: l.fence, Bound: l.asked, Cool: l.minHold}
}

// shareArgs are the renewal of a share of a hold, as hold.lua takes it.
func (l *lease) shareArgs() protocol.HoldArgs {
	return protocol.HoldArgs{Op: "renew", ID: l.id, Share: l.share}
}

// renewed reads the reply to renewArgs: whether the lease was extended,
// the ms it has left, for a hold's share the ms until the hold's bound
// (0: none), and a *semaphore.HoldEndedError once the hold ended.
func (l *lease) renewed(res any) (renewed bool, left, hard int64, err error) {
	if l.share == "" {
		r, err := protocol.DecodeRenew(res)
		if err == nil && r.Revoked {
			return false, 0, 0, &semaphore.RevokedError{Key: l.key, Reason: r.Reason}
		}
		return r.Renewed, r.Left, r.Hard, err
	}
	r, err := protocol.DecodeHold(res)
	if err != nil {
		return false, 0, 0, err
	}
	if r.State != string(semaphore.HoldHeld) {
		return false, 0, 0, holdEnded(l.key, r)
	}
	if r.Left <= 0 || r.Hard < 0 {
		return false, 0, 0, fmt.Errorf("%s: unexpected reply: %d ms left, %d to the bound", "hold.lua", r.Left, r.Hard)
	}
	return true, r.Left, r.Hard, nil
}

// replicaWait bounds a WAIT for replicas: a tenth of the lease, from 100ms
// to 1s.
func replicaWait(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

// Files is nil: the permit lives in Redis.
func (l *lease) Files() []*os.File { return nil }

// Release gives the permit back at once: no command ran under it.
func (l *lease) Release(ctx context.Context) error { return l.release(ctx, 0, -1) }

// Finish gives the permit back, cooling for what is left of its min
// hold when exitStatus is one that cools (Request.MinHoldAfter).
func (l *lease) Finish(ctx context.Context, exitStatus int) error {
	cool := l.minHold
	if !l.coolAfter.Cools(exitStatus) {
		cool = 0
	}
	return l.release(ctx, cool, exitStatus)
}

// release gives the permit back, cooling for what is left of cool.
func (l *lease) release(ctx context.Context, cool time.Duration, exitStatus int) error {
	if l.share != "" {
		// A share lets go of its hold, which gives the permit back only
		// once the hold ended and no one else is attached.
		_, err := l.s.runHold(ctx, l.key, l.keys, "leave the hold", protocol.HoldArgs{Op: "end", ID: l.id, Share: l.share})
		return err
	}
	// Retried within ctx, as a release is safe to repeat: a failover or a
	// dropped connection need not leave the permit held for a whole TTL.
	args := protocol.ReleaseArgs{ID: l.id, Cool: cool, Exit: exitStatus, Quiet: l.s.noEvents}
	if cool > 0 && l.minReplicas > 0 {
		// A cooling counts, as a grant does, once replicas have it: a
		// failover must not lose it and run the job again.
		return l.releaseReplicated(ctx, args)
	}
	res, err := l.s.call(ctx, l.keys, args)
	if err != nil {
		return fmt.Errorf("release key %q: %w", l.key, err)
	}
	_, err = l.released(ctx, res)
	return err
}

// released reads release.lua's reply, res, and hands on the permits it
// gave back; it returns how long the permit cools.
func (l *lease) released(ctx context.Context, res any) (time.Duration, error) {
	r, err := protocol.DecodeRelease(res)
	if err != nil {
		return 0, fmt.Errorf("release key %q: %w", l.key, err)
	}
	l.s.followUp(ctx, l.key, l.keys, r.Bad, r.Handed, r.Fresh)
	return time.Duration(max(r.Cooling, 0)) * time.Millisecond, nil
}

// releaseReplicated gives the permit back as cooling (args) and waits for
// the min replicas to have it; once, since a release that lost its
// connection may have run: one that is not known to be replicated is an
// error, and the permit at worst lapses, and then cools (see terms in
// lib.lua).
func (l *lease) releaseReplicated(ctx context.Context, args protocol.ReleaseArgs) error {
	res, wait, err := l.replicated(ctx, args, false)
	if err == nil {
		_, err = l.released(ctx, res)
	}
	if err == nil {
		err = wait()
	}
	if err != nil {
		return fmt.Errorf("release key %q into its cooling: %w", l.key, err)
	}
	return nil
}

func (l *lease) Slots() semaphore.Slots { return l.slots }
