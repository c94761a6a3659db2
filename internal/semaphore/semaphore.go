// Package semaphore keeps counting semaphores whose permits are leases: at
// most N holders of a key at once, and a holder that vanishes frees its permit
// when its lease lapses.
package semaphore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/clock"
)

// Errors callers tell apart with errors.Is.
var (
	// ErrBusy means no permit was obtained: every permit was held when the
	// caller would not wait. A wait cut short returns its context's error.
	ErrBusy = errors.New("no permit available")
	// ErrLost means the permit is no longer held: it lapsed or was removed.
	ErrLost = errors.New("permit lost")
	// ErrUnreachable means the store could not be reached for longer than
	// the connect timeout.
	ErrUnreachable = errors.New("unreachable")
	// ErrFenced means no permit was obtained because the store restarted
	// or failed over less than the restart fence ago; it wraps ErrBusy.
	ErrFenced = fmt.Errorf("store restarted or failed over recently (restart fence): %w", ErrBusy)
)

// FenceError is ErrFenced with how long the fence still holds.
type FenceError struct{ Left time.Duration }

func (e *FenceError) Error() string {
	return fmt.Sprintf("no grant for %v more: %v", e.Left.Round(time.Second), ErrFenced)
}
func (e *FenceError) Unwrap() error { return ErrFenced }

// MaxKeyLen bounds a key so that every store can name it.
const MaxKeyLen = 200

// Request asks for one permit of a key.
type Request struct {
	Key string
	// Permits is the capacity N: at most N holders of Key at once.
	Permits int
	// TTL is the lease: a holder that stops renewing loses its permit after it.
	TTL time.Duration
	// NoWait makes Acquire return ErrBusy instead of waiting in line. A
	// store with a restart fence (RestartFence) cannot tell busy from free
	// until the fence ends: it waits the fence out, saying so through
	// OnWait, and then tries once.
	NoWait bool
	// Holder describes the holder for status output (host, pid, command).
	Holder HolderInfo
	// Weight is how many of the N permits the holder takes, at once; 0 is
	// 1 (see Takes).
	Weight int
	// OnWait, when set, is called when the caller starts to wait and
	// whenever what it waits for changes.
	OnWait func(WaitState)
	// RestartFence: while the store has been up for less than this since it
	// last started, it grants no permit, so that holders from before a
	// restart that lost their permits have stopped first. It should be the
	// longest TTL any caller of the store uses; 0 is no fence. Stores that
	// cannot lose their data while holders run (the local one) ignore it.
	RestartFence time.Duration
	// MinReplicas: a grant, and each renewal, counts only once this many
	// replicas have it (Redis WAIT, bounded), so that a failover does not
	// lose it; 0 does not wait. Stores without replicas ignore it.
	MinReplicas int
	// MaxRuntime, when positive, bounds the permit: its holder stops its
	// command once it has run this long, and a store whose permits are
	// leases renews it no further than Overrun(KillAfter, TTL) past that
	// (Lease.Bound), so that a holder that stopped, hung or is old frees
	// it by then. Status shows it (HolderInfo.MaxRuntime).
	MaxRuntime time.Duration
	// KillAfter is how long after SIGTERM its holder sends SIGKILL.
	KillAfter time.Duration
	// MinHold keeps the permit taken until this long after its grant
	// when Lease.Finish gives it back sooner: cooling, with no process
	// left. 0: none.
	MinHold time.Duration
	// MinHoldAfter says after which of its command's ends the permit
	// cools; the zero value is CoolAfterAny.
	MinHoldAfter CoolAfter
	// Priority orders the line: a waiter of higher priority is served
	// before every waiter of lower priority, equal ones in arrival order
	// (MinPriority to MaxPriority; 0 is everyone's). It never pre-empts a
	// holder.
	Priority int
	// PriorityAge raises a waiter's priority by one for every PriorityAge
	// it has waited, so that nothing starves; 0: none. A key's stored one
	// (Operator.SetPriorityAge) wins.
	PriorityAge time.Duration
	// Supersede: joining the line sends away every waiter of the key that
	// also asked to supersede, with a *SupersededError (a deploy queue
	// where only the newest waits). Holders are untouched.
	Supersede bool
}

// CoolAfter says after which ends of its command a permit with a
// Request.MinHold cools (Request.MinHoldAfter).
type CoolAfter string

const (
	// CoolAfterAny cools whatever the command's status.
	CoolAfterAny CoolAfter = "any"
	// CoolAfterSuccess cools only after status 0, so that a failed job
	// may run again at once; a status unknown (-1: its holder crashed,
	// or its release never came) cools too, since the job may have
	// succeeded.
	CoolAfterSuccess CoolAfter = "success"
)

// Cools tells whether a permit whose command ended with exitStatus (-1:
// unknown) cools, given its min hold.
func (a CoolAfter) Cools(exitStatus int) bool { return a != CoolAfterSuccess || exitStatus <= 0 }

// checkCoolAfter refuses what is no CoolAfter.
func checkCoolAfter(a CoolAfter) error {
	switch a {
	case "", CoolAfterAny, CoolAfterSuccess:
		return nil
	}
	return fmt.Errorf("must be %s or %s", CoolAfterSuccess, CoolAfterAny)
}

// BoundMargin is the room a bounded permit of lease ttl leaves, past its
// MaxRuntime and its kill-after, for the SIGKILL to land and for a clock
// that steps or ticks at another rate than the holder's: a tenth of the
// TTL, as a renewal's margin, and at least a second. The holder learns of
// a step at its next renewal, within a third of the TTL.
func BoundMargin(ttl time.Duration) time.Duration { return max(time.Second, ttl/10) }

// Overrun is how long past its MaxRuntime a store renews a permit of
// lease ttl at most: the kill-after and BoundMargin.
func Overrun(killAfter, ttl time.Duration) time.Duration { return killAfter + BoundMargin(ttl) }

// WaitState is what a waiting caller waits for.
type WaitState struct {
	// Key is the key waited for, of a caller of several keys (the first,
	// in its order, that would not grant it); empty for a caller of one.
	Key string
	// Held is how many of the Capacity permits are taken.
	Held, Capacity int
	// Position is the caller's place in line, 1 for the first; 0 when the
	// store does not know it.
	Position int
	// Waiting is how many callers wait, this one included; 0 when the
	// store does not know.
	Waiting int
	// Fenced is how long the store's restart fence still holds every
	// grant back; 0 when there is none.
	Fenced time.Duration
	// Paused says that the key is paused, which holds every grant back,
	// with Pause (its end rounded to the second).
	Paused bool
	Pause  Pause
	// RecentHold is how long the key's recent holds lasted
	// (Counts.RecentHold), for an estimate of the wait; 0 when unknown.
	RecentHold time.Duration
	// Priority is the caller's priority as the line counts it now
	// (Request.Priority raised by its age); PriorityAge the key's age in
	// effect for it, 0 for none.
	Priority    int
	PriorityAge time.Duration
}

// Takes is how many permits the holder takes: Weight, or 1 when it is 0.
func (r Request) Takes() int { return max(r.Weight, 1) }

// HolderInfo is what status shows about a holder. It must hold no secret.
type HolderInfo struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// Hold marks a hold's keeper (see Holds), whose PID is the keeper's.
	Hold bool `json:"hold,omitempty"`
	// MaxRuntime is the holder's Request.MaxRuntime, counted from its
	// grant; 0: none.
	MaxRuntime time.Duration `json:"max_runtime_ns,omitempty"`
	// Label tells people which job holds or waits (a CI job's address,
	// say); never the command's arguments. At most MaxLabel bytes of
	// text (CheckLabel).
	Label string `json:"label,omitempty"`
	// With are the other keys a caller of several holds or waits for
	// beside this one; Request is that call's id, the same under each of
	// its keys, so that its grants and releases can be matched up.
	With    []string `json:"with,omitempty"`
	Request string   `json:"request,omitempty"`
}

// MaxLabel bounds a HolderInfo.Label, in bytes, as MaxKeyLen a key: room
// for a CI job's address, and a record of bounded size.
const MaxLabel = 200

// CheckLabel refuses a label no store should keep: too long, not UTF-8,
// or with control characters. Empty is no label.
func CheckLabel(label string) error {
	if len(label) > MaxLabel {
		return fmt.Errorf("is %d bytes long, at most %d allowed", len(label), MaxLabel)
	}
	return checkText(label)
}

// Store hands out permits. Every store obeys the same rules, so the runner
// and commands never need to know which one they talk to.
type Store interface {
	// Acquire returns a held permit. It waits until one is free, ctx is done
	// (returning ctx's error) or, with NoWait, returns ErrBusy without
	// joining the line. The lease it returns is Fresh: a grant whose answer
	// came back late is renewed first, and one that stays late is given
	// back and the wait goes on.
	Acquire(ctx context.Context, req Request) (Lease, error)
	// Status reports on each key; with no keys, on every key the store
	// knows.
	Status(ctx context.Context, keys []string) ([]KeyStatus, error)
	// Doctor checks that the store can keep these rules where it is: one
	// Check each, problems with their fix. It writes only what it removes.
	Doctor(ctx context.Context) []Check
	// Holds keeps permits across processes (semrun acquire).
	Holds
	// Operator is an operator's hand on its keys.
	Operator
	// Events is what happened to its keys.
	Events
	// Close releases the store's connections.
	Close() error
	// String says where the store keeps its permits, in the user's words
	// and with no secret: "Redis at 127.0.0.1:6379", "the lock directory
	// /run/lock/semrun-1000".
	String() string
}

// Lease is one held permit.
type Lease interface {
	// Token is the fencing token of this grant: it strictly increases with
	// every grant of the key.
	Token() int64
	// Deadline is the instant, on this host's clock that counts a suspend
	// (package clock), at which the store may give the permit to someone else
	// unless the lease is renewed first. It is computed from when the last
	// successful renewal was sent, never from when its answer arrived. The
	// zero Instant means the lease never lapses.
	Deadline() clock.Instant
	// Renew extends the lease by its TTL. It returns an error wrapping
	// ErrLost when the permit is gone (a *RevokedError when an operator
	// revoked it); other errors leave it in doubt. A lease that never
	// lapses has nothing to extend, but can be revoked: its holder still
	// calls Renew, every second, and only an error wrapping ErrLost
	// counts.
	Renew(ctx context.Context) error
	// Release gives the permit back. Releasing twice is harmless.
	Release(ctx context.Context) error
	// Finish gives the permit back as Release does, saying how its command
	// ended; a permit whose Request.MinHold has not passed since its grant
	// stays taken, as cooling, until it has (KeyStatus.Cooling).
	Finish(ctx context.Context, exitStatus int) error
	// Bound is the instant past which the store renews the permit no
	// further (see Request.MaxRuntime), on the clock of Deadline and never
	// later than on the store's; the zero Instant without one. Deadline
	// is never later.
	Bound() clock.Instant
	// Files are open files that hold the permit, if any. A child that
	// inherits them keeps the permit held until the last process of its
	// job has exited, even when its parent is killed.
	Files() []*os.File
	// Slots are the key's permits this grant holds (see Slots).
	Slots() Slots
}

// Fresh reports whether a command may start, at now, on a lease of ttl
// that lapses at deadline (a Lease's Deadline): it never lapses, or more
// than half its TTL is left. A runner that gives renewals TTL/2 (the next
// one, its retries, the grace and a margin) then never presumes it lost
// the moment it starts. A lease that lasts to its bound (Capped) needs no
// renewal: some of its MaxRuntime must be left (RunsOut).
func Fresh(deadline, bound, now clock.Instant, ttl, killAfter time.Duration) bool {
	if Capped(deadline, bound, ttl) {
		return now.Before(RunsOut(bound, killAfter, ttl))
	}
	return deadline.IsZero() || deadline.Sub(now) > ttl/2
}

// Capped tells whether a lease of ttl that lapses at deadline lasts to its
// bound (a Lease's), within half the BoundMargin: it is renewed no
// further, and its holder's SIGKILL at RunsOut and the kill-after lands
// before it lapses. False without a bound.
func Capped(deadline, bound clock.Instant, ttl time.Duration) bool {
	return !bound.IsZero() && !deadline.IsZero() && !deadline.Before(bound.Add(-BoundMargin(ttl)/2))
}

// RunsOut is when a holder whose lease of ttl has bound (a Lease's) and
// who kills after killAfter must tell its command to stop: its
// MaxRuntime.
func RunsOut(bound clock.Instant, killAfter, ttl time.Duration) clock.Instant {
	return bound.Add(-Overrun(killAfter, ttl))
}

// KeyStatus describes one semaphore.
type KeyStatus struct {
	Key string `json:"key"`
	// Capacity is the N the latest caller asked for; 0 when unknown.
	Capacity int `json:"capacity"`
	// Held is how many permits the holders take.
	Held    int      `json:"held"`
	Holders []Holder `json:"holders"`
	// Waiters are the callers waiting for a permit, longest waiting first,
	// where the store keeps track of them.
	Waiters []Waiter `json:"waiters"`
	// Cooling are the permits given back before their MinHold passed,
	// which stay taken until it has; Held counts them.
	Cooling []Cooling `json:"cooling"`
	// Unlisted is how many holders and waiters are not listed: a store
	// lists the first ones of a long line only.
	Unlisted int `json:"unlisted,omitempty"`
	// Fenced is how long the store grants nothing more on this key: the
	// restart fence of a server that started or failed over recently.
	Fenced time.Duration `json:"fenced_ns,omitempty"`
	// StoredCapacity is the capacity an operator set (Operator), which
	// wins over each caller's; 0: none.
	StoredCapacity int `json:"stored_capacity,omitempty"`
	// PriorityAge is the priority age an operator stored
	// (Operator.SetPriorityAge); 0: none.
	PriorityAge time.Duration `json:"priority_age_ns,omitempty"`
	// SlotNames are the names an operator gave the key's slots
	// (Operator.SetSlots), slot 0's first; nil: none.
	SlotNames []string `json:"slot_names,omitempty"`
	// Paused is the key's pause; nil when it is not paused.
	Paused *Pause `json:"paused,omitempty"`
	// Counts are the key's counters since the store first counted them;
	// nil when the store has none.
	Counts *Counts `json:"counts,omitempty"`
	// Error says why the key could not be read; nothing else is known of it.
	Error string `json:"error,omitempty"`
}

// Waiter describes one caller waiting for a permit.
type Waiter struct {
	HolderInfo
	// Permits is the capacity this waiter asked for.
	Permits int `json:"permits"`
	// Weight is how many permits it asks for.
	Weight int `json:"weight"`
	// Position is its place in line, 1 for the first; 0 when unknown.
	Position int           `json:"position"`
	Waited   time.Duration `json:"waited_ns"`
	// Priority is its priority as the line counts it now: the one it
	// asked, raised by its waiting (Request.PriorityAge).
	Priority int `json:"priority"`
}

// Holder describes one live permit; permit ids are never shown.
type Holder struct {
	// ID is its public id, which an operator revokes it by: short, and
	// telling nothing of the permit's own id.
	ID string `json:"id"`
	HolderInfo
	// Permits is the capacity this holder asked for.
	Permits int `json:"permits"`
	// Weight is how many permits it takes.
	Weight int           `json:"weight"`
	Token  int64         `json:"token"`
	Age    time.Duration `json:"age_ns"`
	// ExpiresIn is how long the lease has left; 0 for a permit that does
	// not expire while its holder lives (a local lock).
	ExpiresIn time.Duration `json:"expires_in_ns"`
	// DeadlineIn is how long until its MaxRuntime runs out (negative once
	// it has); 0 without one. Status fills it in (Deadlines).
	DeadlineIn time.Duration `json:"deadline_in_ns,omitempty"`
	// Slots are the permits it holds.
	Slots
}

// Cooling is a permit given back before its Request.MinHold passed: it
// stays taken, with no process, until then.
type Cooling struct {
	// ID is its holder's public id: an operator's revoke ends the cooling
	// at once (no process holds it).
	ID string `json:"id,omitempty"`
	HolderInfo
	// Permits is the capacity its holder asked for.
	Permits int `json:"permits"`
	// Weight is how many permits it takes.
	Weight int           `json:"weight"`
	EndsIn time.Duration `json:"ends_in_ns"`
	// ExitStatus is how its command ended (128+N for a signal N).
	ExitStatus int `json:"exit_status"`
	// Slots are the permits it keeps.
	Slots
}

// Deadlines fills in the holders' DeadlineIn from their MaxRuntime and
// age, the same for every store.
func Deadlines(keys []KeyStatus) {
	for i := range keys {
		for j := range keys[i].Holders {
			if h := &keys[i].Holders[j]; h.MaxRuntime > 0 {
				h.DeadlineIn = h.MaxRuntime - h.Age
				if h.DeadlineIn == 0 {
					h.DeadlineIn = -1 // ran out this very moment: not "none"
				}
			}
		}
	}
}

// Bounds of a request, beyond which it is a mistake.
const (
	MaxPermits  = 1_000_000
	MinTTL      = time.Second
	MaxTTL      = 24 * time.Hour
	MaxReplicas = 1000
	// MaxRuntime bounds Request.MaxRuntime; MaxMinHold, Request.MinHold:
	// a month, for a monthly job.
	MaxMaxRuntime = 31 * 24 * time.Hour
	MaxMinHold    = 31 * 24 * time.Hour
)

// Validate refuses a request no store should serve, with a *SettingError
// naming the setting at fault. Every store's Acquire calls it first; a
// caller calls it too to refuse bad input before it opens a store.
func (r Request) Validate() error {
	switch {
	case CheckKey(r.Key) != nil:
		return &SettingError{Setting: KeySetting, Value: fmt.Sprintf("%q", r.Key), Err: CheckKey(r.Key)}
	case r.Permits < 1 || r.Permits > MaxPermits:
		return &SettingError{Setting: PermitsSetting, Value: r.Permits, Err: fmt.Errorf("must be from 1 to %d", MaxPermits)}
	case r.Weight < 0 || r.Weight > r.Permits:
		return &SettingError{Setting: WeightSetting, Value: r.Weight, Err: fmt.Errorf("must be from 1 to %s", Count(r.Permits, "permit"))}
	case r.TTL < MinTTL || r.TTL > MaxTTL:
		return &SettingError{Setting: TTLSetting, Value: r.TTL, Err: fmt.Errorf("must be from %v to %v", MinTTL, MaxTTL)}
	case r.TTL%time.Millisecond != 0:
		// The store's clock counts whole milliseconds.
		return &SettingError{Setting: TTLSetting, Value: r.TTL, Err: errors.New("must be whole milliseconds")}
	case r.RestartFence < 0 || r.RestartFence > MaxTTL:
		return &SettingError{Setting: RestartFenceSetting, Value: r.RestartFence, Err: fmt.Errorf("must be from 0 to %v", MaxTTL)}
	case r.MinReplicas < 0 || r.MinReplicas > MaxReplicas:
		return &SettingError{Setting: MinReplicasSetting, Value: r.MinReplicas, Err: fmt.Errorf("must be from 0 to %d", MaxReplicas)}
	case r.MaxRuntime < 0 || r.MaxRuntime > MaxMaxRuntime:
		return &SettingError{Setting: MaxRuntimeSetting, Value: r.MaxRuntime, Err: fmt.Errorf("must be from 0 to %v", MaxMaxRuntime)}
	case r.MinHold < 0 || r.MinHold > MaxMinHold:
		return &SettingError{Setting: MinHoldSetting, Value: r.MinHold, Err: fmt.Errorf("must be from 0 to %v", MaxMinHold)}
	case checkCoolAfter(r.MinHoldAfter) != nil:
		return &SettingError{Setting: MinHoldAfterSetting, Value: quoteShort(string(r.MinHoldAfter)), Err: checkCoolAfter(r.MinHoldAfter)}
	case checkOrder(r) != nil:
		return checkOrder(r)
	case CheckLabel(r.Holder.Label) != nil:
		return &SettingError{Setting: LabelSetting, Value: quoteShort(r.Holder.Label), Err: CheckLabel(r.Holder.Label)}
	case len(r.Holder.With) > MaxKeys-1:
		return &SettingError{Setting: KeySetting, Value: fmt.Sprintf("%q", r.Key), Err: fmt.Errorf("with %d other keys: at most %d keys at once", len(r.Holder.With), MaxKeys)}
	case len(r.Holder.Request) > MaxRequestID || checkText(r.Holder.Request) != nil:
		return fmt.Errorf("request id %s: at most %d bytes of text", quoteShort(r.Holder.Request), MaxRequestID)
	}
	for _, k := range r.Holder.With {
		if err := CheckKey(k); err != nil || k == r.Key {
			return &SettingError{Setting: KeySetting, Value: fmt.Sprintf("%q", k), Err: cmp.Or(err, errors.New("named twice"))}
		}
	}
	return nil
}

// MaxRequestID bounds HolderInfo.Request.
const MaxRequestID = 64

// Count says "1 permit" or "3 permits".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// CheckKey tells whether key can name a semaphore.
func CheckKey(key string) error {
	switch {
	case key == "":
		return errors.New("must not be empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("is %d bytes long, at most %d allowed", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return errors.New("is not valid UTF-8")
	}
	return checkText(key)
}

// quoteShort is s quoted as Go does, escapes and all, its first 40
// characters only, for a message that stays one short line.
func quoteShort(s string) string {
	const most = 40
	if utf8.RuneCountInString(s) <= most {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%.*q...", most, s)
}

// checkText refuses text that is not UTF-8 or has control characters.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains the control character %U", r)
		}
	}
	return nil
}

// BusyError is ErrBusy with what the store found: Held of the Capacity
// permits the caller was admitted against (a stored one, when an
// operator set it) were taken.
type BusyError struct {
	Key            string
	Held, Capacity int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("key %q: %d of %d permits held: %v", e.Key, e.Held, e.Capacity, ErrBusy)
}
func (e *BusyError) Unwrap() error { return ErrBusy }

// LineError means the caller was refused a place in line: Waiting callers
// wait already, and the store takes at most Max. It wraps ErrBusy.
type LineError struct{ Waiting, Max int }

func (e *LineError) Error() string {
	return fmt.Sprintf("the line is full (%d waiting, at most %d): %v", e.Waiting, e.Max, ErrBusy)
}
func (e *LineError) Unwrap() error { return ErrBusy }
