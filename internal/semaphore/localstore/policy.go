//go:build unix

package localstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// An operator's settings of a key (semaphore.Operator) are one file of
// its directory, "policy", a JSON object on one line:
//
//	{"v":1,"capacity":3,"slot_names":["gpu0","gpu1","gpu2"],"pause":{"reason":"db upgrade","until_ms":1764662743123}}
//
// "capacity" is the stored capacity, "slot_names" the names of its slots
// (SetSlots), as many as it, "pause" the pause, "until_ms" its end on the
// wall clock (absent: until resumed); each is absent when not set, and a
// key with none has no file. Names that are not one a slot, or that
// semaphore.CheckSlotNames refuses, are dropped as they are read: the
// capacity stands, its slots unnamed. The settings stay until unset,
// however long the key is unused (removeUnused keeps its directory).
// Every try for a permit reads the file under the key's grant lock: where
// there is none, that costs one failed open.
//
// Who may set them: whoever may use the key. In a lock directory a group
// shares, that is every member, as every member may hold the key or
// leave a cooling in it: a member's pause holds for the other members
// and root, and a member who raises the capacity lets more hold the key
// than its callers ask for (each caller is told, and status shows the
// capacity in force). The group is trusted with its keys' settings as it
// is with their permits.
//
// The file is written under the grant lock, so that two operators
// changing different settings do not undo each other: whole under a draft
// name, "policy-draft.*", then renamed over the old one. In a sticky
// directory a member cannot replace another member's file (root can), and
// then writes it in place, as the end of a hold is written: readers take
// the grant lock first, or, when a stopped process holds it (status), may
// read a write half done, which they skip as they skip garbage. What is
// read is untrusted: bounded and checked; a file that is no policy is
// skipped with a line, never fatal, and the key then has no settings.
const (
	policyFile        = "policy"
	policyDraftPrefix = "policy-draft."
	policyVersion     = 1
	// maxPolicy bounds the file: a reason is at most semaphore.MaxReason
	// bytes, and a slot's name, written without HTML escapes, at most 4
	// bytes a character, in quotes and a comma.
	maxPolicy = 4<<10 + semaphore.MaxSlots*(4*semaphore.MaxSlotName+3)
)

// policy is a key's settings, as its file says them.
type policy struct {
	Version int `json:"v"`
	// Capacity is the stored capacity; 0: none.
	Capacity  int          `json:"capacity,omitempty"`
	SlotNames []string     `json:"slot_names,omitempty"`
	Pause     *policyPause `json:"pause,omitempty"`
}

type policyPause struct {
	Reason  string `json:"reason,omitempty"`
	UntilMS int64  `json:"until_ms,omitempty"` // 0: until resumed
}

// empty: no setting is kept.
func (p policy) empty() bool { return p.Capacity == 0 && p.Pause == nil }

// check says what is wrong with settings read back at nowMS, if anything.
func (p policy) check(nowMS int64) error {
	switch {
	case p.Version != policyVersion:
		return fmt.Errorf("version %d, not %d", p.Version, policyVersion)
	case p.Capacity < 0 || p.Capacity > semaphore.MaxPermits:
		return fmt.Errorf("capacity %d", p.Capacity)
	case p.Pause == nil:
		return nil
	case semaphore.CheckReason(p.Pause.Reason) != nil:
		return fmt.Errorf("its pause's %v", semaphore.CheckReason(p.Pause.Reason))
	case p.Pause.UntilMS < 0 || p.Pause.UntilMS > nowMS+semaphore.MaxPause.Milliseconds():
		return fmt.Errorf("a pause that ends more than %v from now", semaphore.MaxPause)
	}
	return nil
}

// slotNames are the names of the key's slots, nil when it has none or
// they are not names of its slots.
func (p policy) slotNames() []string { return checkedNames(p.SlotNames, p.Capacity) }

// checkedNames are names read back as those of the slots of a key of
// capacity, or nil when they cannot be: not one a slot, or names
// semaphore.CheckSlotNames refuses. It checks them as that does, but
// once each: a grant checks them.
func checkedNames(names []string, capacity int) []string {
	if len(names) != capacity || capacity == 0 {
		return nil
	}
	seen := make(map[string]bool, len(names))
	all := make([]int, len(names))
	for i, name := range names {
		if seen[name] {
			return nil
		}
		seen[name], all[i] = true, i
	}
	return semaphore.NamedSlots(all, names).Names
}

// paused is the pause in force at now, or nil.
func (p policy) paused(now time.Time) *semaphore.Pause {
	if p.Pause == nil {
		return nil
	}
	pause := &semaphore.Pause{Reason: p.Pause.Reason}
	if p.Pause.UntilMS > 0 {
		if pause.EndsIn = time.UnixMilli(p.Pause.UntilMS).Sub(now); pause.EndsIn <= 0 {
			return nil
		}
	}
	return pause
}

// pauseEnd is when the pause in force ends by itself; zero when it does
// not, or there is none.
func (p policy) pauseEnd() time.Time {
	if p.Pause == nil || p.Pause.UntilMS == 0 {
		return time.Time{}
	}
	return time.UnixMilli(p.Pause.UntilMS)
}

// readPolicy reads k's settings at now: none when k has no file, a pause
// that ended dropped. A file that is no policy is an error.
func (k *keyDir) readPolicy(now time.Time) (policy, error) {
	f, err := k.open(policyFile, os.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return policy{Version: policyVersion}, nil
	}
	if err != nil {
		return policy{Version: policyVersion}, err
	}
	defer f.Close()
	p, err := decodePolicy(f, now)
	if err != nil {
		return policy{Version: policyVersion}, fmt.Errorf("settings file %s: %w", f.Name(), err)
	}
	if p.paused(now) == nil {
		p.Pause = nil
	}
	return p, nil
}

func decodePolicy(f *os.File, now time.Time) (policy, error) {
	var p policy
	b, err := io.ReadAll(io.LimitReader(f, maxPolicy+1))
	switch {
	case err != nil:
		return p, err
	case len(b) > maxPolicy:
		return p, fmt.Errorf("longer than %d bytes", maxPolicy)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, err
	}
	return p, p.check(now.UnixMilli())
}

// policyOrNone is k's settings at now; a file that is no policy is
// skipped, said to warnf, and the key has none.
func (k *keyDir) policyOrNone(key string, now time.Time, warnf func(string, ...any)) policy {
	p, err := k.readPolicy(now)
	if err != nil && warnf != nil {
		warnf("key %q: skipped its settings: %v", key, err)
	}
	return p
}

// writePolicy makes p k's settings, under the grant lock: the file is
// removed when p keeps nothing, else replaced whole, or, when it is
// another member's in a sticky directory, written in place.
func (k *keyDir) writePolicy(p policy) error {
	p.Version = policyVersion
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a name's < is one byte, not six: see maxPolicy
	if err := enc.Encode(p); err != nil {
		return err
	}
	b := buf.Bytes()
	var err error
	if p.empty() {
		err = unix.Unlinkat(int(k.dir.Fd()), policyFile, 0)
		if errors.Is(err, unix.ENOENT) {
			err = nil
		}
	} else {
		err = k.writeWhole(policyFile, policyDraftPrefix, b, renameOver)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		err = k.writeInPlace(policyFile, b)
	}
	if err != nil {
		return fmt.Errorf("settings file in %s: %w", k.path, err)
	}
	return nil
}

// writeInPlace writes b into k's file name, whoever's it is, and cuts
// what followed.
func (k *keyDir) writeInPlace(name string, b []byte) error {
	f, err := k.openFile(name, os.O_RDWR, true)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}

// wake wakes the first waiter in line after a change of settings, as a
// release does: by the times of the file of the key's first permit.
func (k *keyDir) wake() {
	if f, err := k.openLock(firstPermit, false); err == nil {
		ring(f)
		f.Close()
	}
}

// sweepDrafts removes, of a few of k's drafts named prefix*, picked at
// random, those that a caller that died while writing them left for
// abandonedAfter.
func (k *keyDir) sweepDrafts(prefix string, few int) {
	for _, name := range pick(k.names(prefix), few) {
		if !k.changedWithin(name, abandonedAfter) {
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
		}
	}
}
