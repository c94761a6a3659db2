package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// Holds are hold.lua's: a hold's record lives beside its key's, under the
// same hash tag, and its permit id is the handle's secret, which Redis
// keeps only as a hash (protocol.Member). A hold whose request had a
// MinHold cools when it ends, or lapses, until then, as a run's permit.

func (s *Store) Hold(ctx context.Context, l semaphore.Lease, keeper semaphore.HolderInfo) (semaphore.Handle, error) {
	held, ok := l.(*lease)
	if !ok || held.s != s || held.share != "" {
		return semaphore.Handle{}, errors.New("hold: not a lease this store granted")
	}
	keeper.Hold = true
	meta, err := json.Marshal(keeper)
	if err != nil {
		return semaphore.Handle{}, fmt.Errorf("encode keeper info: %w", err)
	}
	r, err := s.runHold(ctx, held.key, held.keys, "keep the permit",
		protocol.HoldArgs{Op: "begin", ID: held.id, TTL: held.ttl, Fence: held.fence, Replicas: held.minReplicas, Meta: meta, Bound: held.asked,
			Cool: held.minHold})
	if err != nil {
		return semaphore.Handle{}, err
	}
	if r.State != string(semaphore.HoldHeld) {
		return semaphore.Handle{}, holdEnded(held.key, r)
	}
	return semaphore.Handle{Store: semaphore.RedisStore, Key: held.key, Secret: held.id}, nil
}

func (s *Store) Attach(ctx context.Context, h semaphore.Handle, keeper bool) (semaphore.Lease, semaphore.HoldInfo, error) {
	if err := s.ours(h); err != nil {
		return nil, semaphore.HoldInfo{}, err
	}
	k := protocol.NewKeys(s.prefix, h.Key)
	share := "r." + semaphore.NewSecret()
	if keeper {
		share = "k." + semaphore.NewSecret() // hold.lua lets an ended hold go without it
	}
	l := &lease{s: s, key: h.Key, keys: k, id: h.Secret, share: share}
	sent := clock.Now()
	r, err := s.runHold(ctx, h.Key, k, "attach to the hold", l.shareArgs())
	if err != nil {
		return nil, semaphore.HoldInfo{}, err
	}
	if r.State != string(semaphore.HoldHeld) {
		return nil, semaphore.HoldInfo{}, holdEnded(h.Key, r)
	}
	info := semaphore.HoldInfo{Key: h.Key, Permits: int(r.Permits), Weight: int(r.Weight), Token: r.Token, TTL: protocol.Span(r.TTL), Slots: r.Slots}
	if len(r.Meta) <= maxMeta {
		_ = json.Unmarshal([]byte(r.Meta), &info.Keeper) // what status shows only
	}
	if info.TTL < semaphore.MinTTL || info.Permits < 1 || info.Weight < 1 || info.Token < 1 || r.Left <= 0 || r.Hard < 0 {
		return nil, semaphore.HoldInfo{}, fmt.Errorf("key %q: attach to the hold: %s: unexpected hold %+v", h.Key, s.addr, r)
	}
	l.ttl, l.token, l.slots = info.TTL, info.Token, info.Slots
	// As a renewal: the script's expiry is its clock's reading, rounded
	// down, plus the hold's lease, or less at its bound.
	l.deadline = sent.Add(serverSpan(min(r.Left, r.TTL)))
	if r.Hard > 0 {
		l.bound = sent.Add(time.Duration(r.Hard-1) * time.Millisecond)
	}
	if r.Replicas > 0 {
		// Renewals count once replicas have them, as the grant did: the
		// attach too, so that a failover cannot bring back an older lease.
		l.minReplicas = int(min(r.Replicas, semaphore.MaxReplicas))
		l.deadline = clock.Instant{}.Add(1) // not before the renewal below
		if err := l.Renew(ctx); err != nil {
			return nil, semaphore.HoldInfo{}, err
		}
	}
	return l, info, nil
}

func (s *Store) EndHold(ctx context.Context, h semaphore.Handle, end semaphore.HoldEnd) (semaphore.HoldEnd, bool, error) {
	if err := s.ours(h); err != nil {
		return semaphore.HoldEnd{}, false, err
	}
	if end.State == "" || end.State == semaphore.HoldHeld {
		return semaphore.HoldEnd{}, false, fmt.Errorf("end a hold as %q: not an end", end.State)
	}
	why := end.Why
	if len(why) > semaphore.MaxHoldWhy {
		why = why[:semaphore.MaxHoldWhy]
	}
	r, err := s.runHold(ctx, h.Key, protocol.NewKeys(s.prefix, h.Key), "end the hold",
		protocol.HoldArgs{Op: "end", ID: h.Secret, State: string(end.State), Why: why})
	if err != nil {
		return semaphore.HoldEnd{}, false, err
	}
	return holdEnd(r), r.Now, nil
}

// runHold runs hold.lua with args, what saying what for in an error, and
// hands on the permits an end gave back. Retried within ctx, as a release
// is: each op is safe to repeat.
func (s *Store) runHold(ctx context.Context, key string, k protocol.Keys, what string, args protocol.HoldArgs) (protocol.HoldReply, error) {
	args.Quiet = s.noEvents
	res, err := s.call(ctx, k, args)
	if err != nil {
		return protocol.HoldReply{}, fmt.Errorf("key %q: %s: %w", key, what, err)
	}
	r, err := protocol.DecodeHold(res)
	if err != nil {
		return protocol.HoldReply{}, fmt.Errorf("key %q: %s: %w", key, what, err)
	}
	s.followUp(ctx, key, k, r.Bad, r.Handed, r.Fresh)
	return r, nil
}

// ours refuses a handle of another kind of store.
func (s *Store) ours(h semaphore.Handle) error {
	if h.Store != semaphore.RedisStore {
		return fmt.Errorf("key %q: the handle is one of a hold in a lock directory (--local), not in Redis", h.Key)
	}
	return nil
}

// maxMeta bounds the keeper's record a hold's reply may carry: a host
// name and a label of MaxLabel bytes fit, each byte escaped in JSON as
// six (\u003c).
const maxMeta = 4096

// holdEnd is the end hold.lua answered.
func holdEnd(r protocol.HoldReply) semaphore.HoldEnd {
	end := semaphore.HoldEnd{State: semaphore.HoldState(r.State), Why: r.Why}
	if r.At > 0 {
		end.At = time.UnixMilli(r.At)
	}
	return end
}

// holdEnded is the error of a hold that has ended.
func holdEnded(key string, r protocol.HoldReply) error {
	return &semaphore.HoldEndedError{Key: key, End: holdEnd(r)}
}
