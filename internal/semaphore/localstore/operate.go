//go:build unix

package localstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// An operator's hand on a key of the lock directory: its settings are its
// policy file (policy.go); a revoke is a mark its holder looks for.
//
// A holder's lock is its permit, and no other process can take it away:
// a revoke tells the holder to let go. It leaves a file, "revoke." and
// the holder's public id, saying why, written whole under a draft name,
// "revoke-draft.*", then renamed in place; the holder's Renew, which its
// semrun calls every second, finds it with one stat. The permit stays
// held until the holder lets go, and the holder removes the mark then;
// status removes those whose holder is gone. A hold is revoked by ending
// it, as release does (HoldRevoked): each process attached learns of it
// at its next renewal. In a lock directory a group shares, any member
// may revoke, as it may set a key's settings.
//
// force cannot free a permit here: a holder that is dead let go of its lock
// as it died, and is no holder any more (ErrNoHolder), and a live one's
// lock is its own. So a revoke with force of a live holder is a revoke,
// with a line to Warnf saying that its permit is free only once it let go.
const (
	revokePrefix      = "revoke."
	revokeDraftPrefix = "revoke-draft."
	// maxRevoke bounds a revoke's file.
	maxRevoke = 4 << 10
	// operateWait bounds the wait for the grant lock settings are written
	// and holders are revoked under.
	operateWait = holdGrantWait
)

// revokeMark is what a revoke's file says.
type revokeMark struct {
	Reason string `json:"reason,omitempty"`
	AtMS   int64  `json:"at_ms"`
}

// SetCapacity implements semaphore.Operator.
func (s *Store) SetCapacity(ctx context.Context, key string, n int) error {
	if err := semaphore.CheckCapacity(n); err != nil {
		return err
	}
	// Slots' names go with the capacity they were set with (SetSlots).
	return s.setPolicy(ctx, key, n > 0, func(p *policy) { p.Capacity, p.SlotNames = n, nil }, semaphore.Event{Kind: semaphore.EventCapacity, Capacity: n})
}

// SetSlots implements semaphore.Operator: the names are kept with the
// capacity, their number, in the key's policy file.
func (s *Store) SetSlots(ctx context.Context, key string, names []string) error {
	if err := semaphore.CheckSlotNames(names); err != nil {
		return err
	}
	names = slices.Clone(names)
	return s.setPolicy(ctx, key, true, func(p *policy) { p.Capacity, p.SlotNames = len(names), names }, semaphore.Event{Kind: semaphore.EventCapacity, Capacity: len(names), Reason: clipBytes(strings.Join(names, ","), semaphore.MaxReason)})
}

// Pause implements semaphore.Operator. The end is on the wall clock, as
// a cooling's.
func (s *Store) Pause(ctx context.Context, key, reason string, d time.Duration) error {
	if err := errors.Join(semaphore.CheckReason(reason), semaphore.CheckPause(d)); err != nil {
		return err
	}
	pause := &policyPause{Reason: reason}
	if d > 0 {
		pause.UntilMS = time.Now().Add(d).UnixMilli()
	}
	return s.setPolicy(ctx, key, true, func(p *policy) { p.Pause = pause }, semaphore.Event{Kind: semaphore.EventPause, Reason: reason, Until: d})
}

// Resume implements semaphore.Operator.
func (s *Store) Resume(ctx context.Context, key string) error {
	return s.setPolicy(ctx, key, false, func(p *policy) { p.Pause = nil }, semaphore.Event{Kind: semaphore.EventResume})
}

// setPolicy changes key's settings with change, under its grant lock,
// wakes its first waiter and notes the event e. A key never used is made
// when keep is set (a setting to keep), and left alone otherwise.
func (s *Store) setPolicy(ctx context.Context, key string, keep bool, change func(*policy), e semaphore.Event) error {
	if err := semaphore.CheckKey(key); err != nil {
		return &semaphore.SettingError{Setting: semaphore.KeySetting, Value: fmt.Sprintf("%q", key), Err: err}
	}
	for range maxPublish {
		err := s.setPolicyOnce(ctx, key, keep, change, e)
		if !errors.Is(err, errKeyMoved) {
			return err
		}
	}
	return fmt.Errorf("key %q: its directory in %s was replaced each time semrun looked", key, s.path)
}

func (s *Store) setPolicyOnce(ctx context.Context, key string, keep bool, change func(*policy), e semaphore.Event) error {
	var k *keyDir
	var err error
	if keep {
		// Made with no capacity of its callers', which it has not had yet.
		k, err = s.openKey(key, 0)
	} else if k, err = s.openKeyDir(keyDirName(key)); errors.Is(err, unix.ENOENT) {
		return nil // never used: nothing to unset
	}
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	defer k.close()
	if err := s.setPolicyIn(ctx, k, key, change); err != nil {
		return err
	}
	k.note(e) // once the grant lock is dropped
	return nil
}

// setPolicyIn is setPolicyOnce in k, under its grant lock.
func (s *Store) setPolicyIn(ctx context.Context, k *keyDir, key string, change func(*policy)) error {
	unlock, err := k.lockGrant(ctx, operateWait)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	defer unlock()
	if err := k.current(); err != nil {
		return err // removed meanwhile (removeUnused): set in the one in place
	}
	p := k.policyOrNone(key, time.Now(), s.warnf)
	change(&p)
	if err := k.writePolicy(p); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	k.wake()
	return nil
}

// Revoke implements semaphore.Operator, under the key's grant lock, where
// holders are granted and holds ended.
func (s *Store) Revoke(ctx context.Context, key, id, reason string, force bool) error {
	if err := semaphore.CheckKey(key); err != nil {
		return &semaphore.SettingError{Setting: semaphore.KeySetting, Value: fmt.Sprintf("%q", key), Err: err}
	}
	if err := semaphore.CheckReason(reason); err != nil {
		return err
	}
	noHolder := fmt.Errorf("key %q: holder %q: %w", key, id, semaphore.ErrNoHolder)
	if !validID(id) {
		return noHolder
	}
	k, err := s.openKeyDir(keyDirName(key))
	if errors.Is(err, unix.ENOENT) {
		return noHolder
	}
	if err != nil {
		return fmt.Errorf("revoke a holder of key %q: %w", key, err)
	}
	defer k.close()
	unlock, err := k.lockGrant(ctx, operateWait)
	if err != nil {
		return fmt.Errorf("revoke a holder of key %q: %w", key, err)
	}
	who, slots, cooled, again, err := k.revoke(key, id, reason)
	unlock()
	if who != nil && err == nil && !again {
		k.note(semaphore.Event{Kind: semaphore.EventRevoke, Holder: id, HolderInfo: *who, Reason: reason, Forced: cooled, Slots: slots})
	}
	switch {
	case err != nil:
		return fmt.Errorf("revoke a holder of key %q: %w", key, err)
	case who == nil:
		return noHolder
	case force && !cooled:
		s.warnf("key %q: holder %s (pid %d on %s) is alive, and a lock directory cannot take a live process's lock: revoked as without force, it learns of it within a second, and its permit is free once it has let go",
			key, id, who.PID, who.Host)
	}
	return nil
}

// revoke revokes k's holder id, under the grant lock, and says who it
// is and its slots; nil when no live holder has that id. cooled: it was
// a cooling, ended at once; again: it was revoked before, which stands,
// and is the one event and count of its revoke.
func (k *keyDir) revoke(key, id, reason string) (who *semaphore.HolderInfo, slots semaphore.Slots, cooled, again bool, err error) {
	var holder *record
	k.eachLocked(heldPrefix, nil, func(f *os.File) bool {
		if r, err := readRecord(f); err == nil && r.ID == id {
			holder = &r
		}
		return holder == nil
	})
	if holder != nil {
		b, err := json.Marshal(revokeMark{Reason: reason, AtMS: time.Now().UnixMilli()})
		if err != nil {
			return nil, slots, false, false, err
		}
		// Revoked twice: the first reason stands.
		err = k.writeWhole(revokePrefix+id, revokeDraftPrefix, append(b, '\n'), renameNoReplace)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, slots, false, false, fmt.Errorf("revoke file in %s: %w", k.path, err)
		}
		return &holder.HolderInfo, holder.slots(), false, err != nil, nil
	}
	for _, name := range k.names(holdPrefix) {
		r, err := k.readHold(name)
		if err != nil || r.Key != key || r.ID != id || r.State != semaphore.HoldHeld {
			continue
		}
		spans := r.spans()
		if alive, err := k.holdAlive(spans, markOf(name, spans)); err != nil || !alive {
			continue
		}
		if _, err := k.endHoldRecord(name, r, semaphore.HoldEnd{State: semaphore.HoldRevoked, Why: boundWhy(reason), At: time.Now()}); err != nil {
			return nil, slots, false, false, err
		}
		keeper := r.keeper()
		return &keeper, r.slots(), false, false, nil
	}
	// A cooling: no process holds it, so it ends at once. One pending is
	// its holder's, who holds its permits.
	probe, _ := k.openPermits()
	defer probe.close()
	for _, r := range k.coolings(time.Now(), false, nil, probe.anyFree) {
		if r.ID == id {
			if err := unix.Unlinkat(int(k.dir.Fd()), r.name, 0); err != nil {
				return nil, slots, false, false, fmt.Errorf("end the cooling %s in %s: %w", r.name, k.path, err)
			}
			return &r.HolderInfo, r.slots(), true, false, nil
		}
	}
	return nil, slots, false, false, nil
}

// revoked is a *semaphore.RevokedError when k's holder id was revoked.
// A mark that cannot be read still is one; its reason is then unknown.
func (k *keyDir) revoked(key, id string) error {
	var st unix.Stat_t
	if unix.Fstatat(int(k.dir.Fd()), revokePrefix+id, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		// Missing, the usual case. Any other failure leaves the lock
		// held all the same: the next look may see it.
		return nil
	}
	return &semaphore.RevokedError{Key: key, Reason: k.revokeReason(id)}
}

// revokeReason reads why k's holder id was revoked, bounded: "" when
// the mark says nothing that can be shown.
func (k *keyDir) revokeReason(id string) string {
	f, err := k.open(revokePrefix+id, os.O_RDONLY)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRevoke+1))
	var m revokeMark
	if err != nil || len(b) > maxRevoke || json.Unmarshal(b, &m) != nil || semaphore.CheckReason(m.Reason) != nil {
		return ""
	}
	return m.Reason
}

// sweepRevokes removes k's revokes of holders that are gone, live being
// the ids of those that are not; under the grant lock, where revokes are
// made. In a directory a group shares, only a revoke's maker (or the
// directory's owner) can.
func (k *keyDir) sweepRevokes(live map[string]bool) {
	for _, name := range k.names(revokePrefix) {
		if !live[name[len(revokePrefix):]] {
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
		}
	}
}

// clipBytes is s cut to at most max bytes on a rune boundary, as key.lua
// cuts a capacity's slot names.
func clipBytes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// SetPriorityAge is refused: a lock directory keeps no strict line.
func (s *Store) SetPriorityAge(_ context.Context, _ string, d time.Duration) error {
	if err := semaphore.CheckPriorityAge(d); err != nil {
		return err
	}
	return &semaphore.SettingError{Setting: semaphore.PriorityAgeSetting, Value: d, Err: errNoLine}
}
