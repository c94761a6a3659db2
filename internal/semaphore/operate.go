package semaphore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Operator is an operator's hand on a key: settings that persist until
// unset and win over each caller's, and revokes. Every store has it.
type Operator interface {
	// SetCapacity keeps n as key's capacity, which every caller is
	// admitted against instead of its own; 0 unsets it. Lowering it stops
	// no holder: nobody is granted until the holders are below it. A
	// caller whose weight is more than n is refused, waiting or not, with
	// a *SettingError naming its weight and n: first in line, it would
	// keep everyone behind it waiting for a grant that cannot come.
	SetCapacity(ctx context.Context, key string, n int) error
	// SetSlots names key's slots, slot 0 first, and keeps their number as
	// its capacity, as SetCapacity does (which, as unsetting, drops the
	// names). Grants then carry their slots' names (Slots.Names). names
	// must pass CheckSlotNames.
	SetSlots(ctx context.Context, key string, names []string) error
	// SetPriorityAge keeps d as key's priority age (Request.PriorityAge),
	// which wins over each caller's; 0 unsets it.
	SetPriorityAge(ctx context.Context, key string, d time.Duration) error
	// Pause stops every grant of key until Resume, or for d when d is
	// positive; holders run on, waiters keep their places. reason is
	// shown to waiters and to callers found busy.
	Pause(ctx context.Context, key, reason string, d time.Duration) error
	// Resume ends a pause.
	Resume(ctx context.Context, key string) error
	// Revoke tells the holder of key whose public id (Holder.ID) is id
	// to stop: it learns of it at its next renewal, stops its command and
	// lets go, and its permit is free only then or once its lease lapsed.
	// force frees the permit at once, for a holder known to be dead. A
	// cooling with that id (Cooling.ID) ends at once: no process holds
	// it. It returns ErrNoHolder when no holder nor cooling has that id.
	Revoke(ctx context.Context, key, id, reason string, force bool) error
}

// Pause is a pause of a key (Operator.Pause).
type Pause struct {
	Reason string `json:"reason"`
	// EndsIn is how long the pause has left; 0 until resumed.
	EndsIn time.Duration `json:"ends_in_ns,omitempty"`
}

// Bounds of what an operator sets.
const (
	// MaxReason bounds a pause's or a revoke's reason, in bytes.
	MaxReason = 200
	// MaxPause bounds a pause with an end.
	MaxPause = 31 * 24 * time.Hour
)

// ErrNoHolder means no holder of the key has the public id given.
var ErrNoHolder = errors.New("no holder has that id")

// PausedError means a key is paused: no permit was obtained. It wraps
// ErrBusy.
type PausedError struct {
	Key   string
	Pause Pause
}

func (e *PausedError) Error() string {
	s := fmt.Sprintf("key %q is paused", e.Key)
	if e.Pause.Reason != "" {
		s += fmt.Sprintf(" (%s)", Clip(e.Pause.Reason, MaxReason))
	}
	if e.Pause.EndsIn > 0 {
		s += fmt.Sprintf(" for %v more", e.Pause.EndsIn.Round(time.Second))
	}
	return s + ": " + ErrBusy.Error()
}
func (e *PausedError) Unwrap() error { return ErrBusy }

// RevokedError means an operator revoked the permit: its holder must
// stop as on a lost permit. It wraps ErrLost.
type RevokedError struct {
	Key, Reason string
}

func (e *RevokedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("key %q: an operator revoked the permit", e.Key)
	}
	return fmt.Sprintf("key %q: an operator revoked the permit: %s", e.Key, Clip(e.Reason, MaxReason))
}
func (e *RevokedError) Unwrap() error { return ErrLost }

// The settings of an operator's call, as messages name them (see Names);
// a stored capacity is a PermitsSetting.
const (
	ReasonSetting Setting = "reason"
	PauseSetting  Setting = "pause"
)

// CheckReason refuses a reason no store should keep, with a
// *SettingError: too long, not UTF-8, or with control characters.
func CheckReason(reason string) error {
	err := checkText(reason)
	if len(reason) > MaxReason {
		err = fmt.Errorf("is %d bytes long, at most %d allowed", len(reason), MaxReason)
	}
	if err != nil {
		return &SettingError{Setting: ReasonSetting, Value: fmt.Sprintf("%q", reason), Err: err}
	}
	return nil
}

// CheckPause refuses a pause's length (Operator.Pause) no store should
// keep, with a *SettingError.
func CheckPause(d time.Duration) error {
	if d < 0 || d > MaxPause {
		return &SettingError{Setting: PauseSetting, Value: d, Err: fmt.Errorf("must be from 0 (until resumed) to %v", MaxPause)}
	}
	return nil
}

// CheckCapacity refuses a capacity to store (Operator.SetCapacity; 0
// unsets it), with a *SettingError.
func CheckCapacity(n int) error {
	if n < 0 || n > MaxPermits {
		return &SettingError{Setting: PermitsSetting, Value: n, Err: fmt.Errorf("must be from 0 (unset) to %d", MaxPermits)}
	}
	return nil
}
