package semaphore

import (
	"fmt"
	"time"
)

// Bounds of the order of the line.
const (
	MinPriority = -100
	MaxPriority = 100
	// MaxPriorityAge bounds Request.PriorityAge: a day a step.
	MaxPriorityAge = 24 * time.Hour
)

// The settings of the order of the line, as messages name them.
const (
	PrioritySetting    Setting = "priority"
	PriorityAgeSetting Setting = "priority age"
	SupersedeSetting   Setting = "supersede"
)

// checkOrder refuses a priority or an age no store should keep.
func checkOrder(r Request) error {
	switch {
	case r.Priority < MinPriority || r.Priority > MaxPriority:
		return &SettingError{Setting: PrioritySetting, Value: r.Priority, Err: fmt.Errorf("must be from %d to %d", MinPriority, MaxPriority)}
	case r.PriorityAge < 0 || r.PriorityAge > MaxPriorityAge || r.PriorityAge%time.Millisecond != 0:
		return &SettingError{Setting: PriorityAgeSetting, Value: r.PriorityAge, Err: fmt.Errorf("must be whole milliseconds from 0 (none) to %v", MaxPriorityAge)}
	case r.Supersede && len(r.Holder.With) > 0:
		// Sent away from one key's line, a caller of several would have to
		// leave every other's at once: not kept.
		return &SettingError{Setting: SupersedeSetting, Value: true, Err: fmt.Errorf("takes one key, not %d", len(r.Holder.With)+1)}
	}
	return nil
}

// CheckPriorityAge refuses an age to store (Operator.SetPriorityAge; 0
// unsets it), with a *SettingError.
func CheckPriorityAge(d time.Duration) error {
	return checkOrder(Request{PriorityAge: d})
}

// SupersededError means a newer caller that also asked to supersede
// joined the line: this waiter left it, holding nothing. It wraps ErrBusy.
type SupersededError struct {
	Key string
	// By is the newer caller: its host, pid and label.
	By HolderInfo
}

func (e *SupersededError) Error() string {
	by := fmt.Sprintf("%s, pid %d", e.By.Host, e.By.PID)
	if e.By.Label != "" {
		by += ", label " + e.By.Label
	}
	return fmt.Sprintf("key %q: superseded by a newer caller (%s): %v", e.Key, by, ErrBusy)
}
func (e *SupersededError) Unwrap() error { return ErrBusy }

// Effective is the priority of a waiter that asked for priority and has
// waited for waited, on a key whose age is age (0: none).
func Effective(priority int, age, waited time.Duration) int {
	if age <= 0 || waited <= 0 {
		return priority
	}
	return priority + int(min(waited/age, 1<<20))
}
