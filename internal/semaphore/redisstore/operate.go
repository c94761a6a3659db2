package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// An operator's hand on a key is key.lua's: the key's policy, which never
// expires and which only operators write (an ACL can let runs read it
// only), and its revokes.

func (s *Store) SetCapacity(ctx context.Context, key string, n int) error {
	op := protocol.KeyArgs{Op: "set", Cap: n}
	if n == 0 {
		op.Op = "unset"
	}
	_, err := s.operate(ctx, key, "set the capacity", op)
	return err
}

func (s *Store) Pause(ctx context.Context, key, reason string, d time.Duration) error {
	_, err := s.operate(ctx, key, "pause", protocol.KeyArgs{Op: "pause", Reason: reason, For: d})
	return err
}

func (s *Store) Resume(ctx context.Context, key string) error {
	_, err := s.operate(ctx, key, "resume", protocol.KeyArgs{Op: "resume"})
	return err
}

func (s *Store) Revoke(ctx context.Context, key, id, reason string, force bool) error {
	if !protocol.IsPublicID(id) {
		return fmt.Errorf("key %q: holder %q: %w", key, id, semaphore.ErrNoHolder)
	}
	r, err := s.operate(ctx, key, "revoke", protocol.KeyArgs{Op: "revoke", Holder: id, Reason: reason, Force: force})
	if err != nil {
		return err
	}
	if !r.Found {
		return fmt.Errorf("key %q: holder %q: %w", key, id, semaphore.ErrNoHolder)
	}
	return nil
}

// operate runs key.lua with args, checked first, and hands on the permits
// it freed. Retried within ctx: each op is safe to repeat.
func (s *Store) operate(ctx context.Context, key, what string, args protocol.KeyArgs) (protocol.KeyReply, error) {
	switch {
	case semaphore.CheckKey(key) != nil:
		return protocol.KeyReply{}, &semaphore.SettingError{Setting: semaphore.KeySetting, Value: fmt.Sprintf("%q", key), Err: semaphore.CheckKey(key)}
	}
	if err := errors.Join(semaphore.CheckCapacity(args.Cap), semaphore.CheckReason(args.Reason), semaphore.CheckPause(args.For)); err != nil {
		return protocol.KeyReply{}, err
	}
	k := protocol.NewKeys(s.prefix, key)
	args.Quiet = s.noEvents
	res, err := s.call(ctx, k, args)
	if _, _, perm := refusal(err); perm {
		return protocol.KeyReply{}, fmt.Errorf("key %q: %s: this Redis user may not change key %q's settings: an operator's needs to write %s, which a run's may only read (%w)",
			key, what, key, protocol.SuffixPattern(s.prefix, "policy"), err)
	}
	if err != nil {
		return protocol.KeyReply{}, fmt.Errorf("key %q: %s: %w", key, what, err)
	}
	r, err := protocol.DecodeKey(res)
	if err != nil {
		return protocol.KeyReply{}, fmt.Errorf("key %q: %s: %w", key, what, err)
	}
	s.followUp(ctx, key, k, r.Bad, r.Handed, r.Fresh)
	return r, nil
}

// SetSlots names key's slots, and stores their number as its capacity.
func (s *Store) SetSlots(ctx context.Context, key string, names []string) error {
	if err := semaphore.CheckSlotNames(names); err != nil {
		return err
	}
	_, err := s.operate(ctx, key, "name the slots", protocol.KeyArgs{Op: "slots", Names: names})
	return err
}

// SetPriorityAge keeps d as key's priority age; 0 unsets it.
func (s *Store) SetPriorityAge(ctx context.Context, key string, d time.Duration) error {
	if err := semaphore.CheckPriorityAge(d); err != nil {
		return err
	}
	_, err := s.operate(ctx, key, "set the priority age", protocol.KeyArgs{Op: "age", For: d})
	return err
}
