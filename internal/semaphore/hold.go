package semaphore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A hold is a permit kept across processes: semrun acquire takes it and
// leaves a keeper that renews it; runs under its handle attach to it; the
// first end (a release, its keeper's max runtime, owner or signal, a loss)
// is remembered for a day, so that whoever asks later learns whether
// their steps ran without it. Its permit is given back once the hold has
// ended and no process is attached any more: an end never makes two
// holders.
type Holds interface {
	// Hold makes the permit of lease, just granted, a hold whose keeper
	// is keeper (status shows it), and returns its handle. The lease
	// keeps the permit until a first process attached, or its TTL.
	Hold(ctx context.Context, lease Lease, keeper HolderInfo) (Handle, error)
	// Attach joins the hold h names, renewing its permit: the lease it
	// returns is this process's share, renewed as any lease; its Renew
	// fails with a *HoldEndedError once the hold ended, and its Release
	// leaves the hold, giving the permit back when the hold has ended and
	// no one else is attached. A hold that has ended, or lapsed because
	// no one renewed it, is a *HoldEndedError. keeper attaches the hold's
	// keeper, which runs no command: an end does not wait for it to let go.
	Attach(ctx context.Context, h Handle, keeper bool) (Lease, HoldInfo, error)
	// EndHold ends the hold h names with end, unless it had ended before:
	// it returns the end that counts (this one, or the earlier one) and
	// whether it was this one. The permit is given back at once when no
	// one is attached, else when the last attached process lets go.
	EndHold(ctx context.Context, h Handle, end HoldEnd) (HoldEnd, bool, error)
}

// HoldState is how a hold stands.
type HoldState string

const (
	HoldHeld HoldState = "held"
	// HoldReleased: given back on purpose: semrun release, its keeper's
	// owner exited, or its keeper was told to stop.
	HoldReleased HoldState = "released"
	// HoldLost: its lease lapsed, or the store no longer had it.
	HoldLost HoldState = "lost"
	// HoldMaxRuntime: its keeper ended it at --max-runtime.
	HoldMaxRuntime HoldState = "max-runtime"
	// HoldRevoked: an operator revoked it.
	HoldRevoked HoldState = "revoked"
	// HoldUnknown: the store has no record of the hold: not a handle
	// semrun acquire printed for this store (a forged or mistyped one,
	// one of another store), or its hold ended longer ago than the store
	// remembers, or the store lost its data. It wraps ErrLost as any end:
	// a run whose hold's record vanished stops its command.
	HoldUnknown HoldState = "unknown"
)

// said is the state in words, after "the hold of key K": one a store
// wrote that semrun does not know is said as such, never as another.
func (s HoldState) said() string {
	switch s {
	case HoldHeld:
		return "is held"
	case HoldReleased:
		return "was released"
	case HoldLost:
		return "was lost"
	case HoldMaxRuntime:
		return "timed out"
	case HoldRevoked:
		return "was revoked"
	case HoldUnknown:
		return "is unknown to the store"
	}
	return fmt.Sprintf("ended in a state semrun does not know (%q)", Clip(string(s), 40))
}

// HoldEnd is how a hold ended, as the store remembers it.
type HoldEnd struct {
	State HoldState
	// Why says it in plain words: "semrun release", "its owner, pid 42,
	// exited", "its lease lapsed". Bounded, and text from the store: shown
	// escaped.
	Why string
	// At is when, on the store's clock; zero when unknown.
	At time.Time
}

// HoldInfo is what a process attached to a hold needs to know of it.
type HoldInfo struct {
	Key string
	// Permits is the capacity N the hold was granted under; Weight the
	// permits it takes.
	Permits, Weight int
	Token           int64
	// TTL is how often the hold's permit must be renewed, at most: the
	// lease of its grant, or the store's own period for a permit that does
	// not lapse but can be ended from elsewhere.
	TTL    time.Duration
	Keeper HolderInfo
	// Slots are the permits the hold holds.
	Slots Slots
}

// MaxHoldWhy bounds HoldEnd.Why, as a store writes and reads it.
const MaxHoldWhy = 200

// HoldEndedError means the hold has ended: how, and when, is End. It
// wraps ErrLost: whoever runs under the hold must stop.
type HoldEndedError struct {
	Key string
	End HoldEnd
}

func (e *HoldEndedError) Error() string {
	s := fmt.Sprintf("hold of key %q %s", e.Key, e.End.State.said())
	if e.End.Why != "" {
		s += ": " + Clip(e.End.Why, MaxHoldWhy)
	}
	if !e.End.At.IsZero() {
		s += " at " + e.End.At.UTC().Format("2006-01-02 15:04:05 MST")
	}
	return s
}
func (e *HoldEndedError) Unwrap() error { return ErrLost }

// StoreKind names a kind of store in a handle.
type StoreKind string

const (
	RedisStore StoreKind = "r"
	LocalStore StoreKind = "l"
)

// Handle names one hold: a capability, since whoever has it can run under
// the hold's permit and end it. Secret is a permit id (at least 128 bits
// from crypto/rand), bound to the key and the store's kind.
type Handle struct {
	Store  StoreKind
	Key    string
	Secret string
}

// handlePrefix starts every handle; its version says how to read it.
const handlePrefix = "semrun1."

// secretLen is the length of a secret: rand.Text's 26 base32 digits, 130
// bits.
const secretLen = 26

// NewSecret is a new hold's or permit's secret: 130 bits from crypto/rand.
func NewSecret() string { return rand.Text() }

// String is the handle as semrun acquire prints it and --handle reads it:
// only letters, digits, '.', '-' and '_', so that a shell and a CI
// variable file take it as it is.
func (h Handle) String() string {
	return handlePrefix + string(h.Store) + "." + h.Secret + "." + base64.RawURLEncoding.EncodeToString([]byte(h.Key))
}

// ErrBadHandle means a handle is not one semrun acquire printed.
var ErrBadHandle = errors.New("not a handle that semrun acquire printed")

// ParseHandle reads a handle. Whatever it is given is untrusted: nothing
// of it is shown back, but its length.
func ParseHandle(s string) (Handle, error) {
	if len(s) > 512 {
		return Handle{}, fmt.Errorf("%d bytes long: %w", len(s), ErrBadHandle)
	}
	rest, ok := strings.CutPrefix(s, handlePrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 {
		return Handle{}, ErrBadHandle
	}
	h := Handle{Store: StoreKind(parts[0]), Secret: parts[1]}
	if h.Store != RedisStore && h.Store != LocalStore {
		return Handle{}, ErrBadHandle
	}
	if !IsRandText(h.Secret, secretLen) {
		return Handle{}, ErrBadHandle
	}
	key, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil || CheckKey(string(key)) != nil {
		return Handle{}, ErrBadHandle
	}
	h.Key = string(key)
	return h, nil
}

// The holds of one semrun acquire of several keys go by one text: their
// handles joined by handleSep, which no handle holds, and a shell and a
// CI variable file take as it is.
const handleSep = ","

// HandlesText is the text of the handles of one acquire: a single handle's
// own for one key.
func HandlesText(hs []Handle) string {
	texts := make([]string, len(hs))
	for i, h := range hs {
		texts[i] = h.String()
	}
	return strings.Join(texts, handleSep)
}

// ParseHandles reads what HandlesText wrote: at most MaxKeys handles, of
// one kind of store and of as many keys. Whatever it is given is
// untrusted: nothing of it is shown back, but its length.
func ParseHandles(s string) ([]Handle, error) {
	if len(s) > MaxKeys*512 {
		return nil, fmt.Errorf("%d bytes long: %w", len(s), ErrBadHandle)
	}
	texts := strings.Split(s, handleSep)
	if len(texts) > MaxKeys {
		return nil, fmt.Errorf("%d handles, at most %d: %w", len(texts), MaxKeys, ErrBadHandle)
	}
	hs := make([]Handle, len(texts))
	for i, text := range texts {
		h, err := ParseHandle(text)
		if err != nil {
			return nil, err
		}
		for _, o := range hs[:i] {
			if o.Key == h.Key || o.Store != h.Store {
				return nil, ErrBadHandle
			}
		}
		hs[i] = h
	}
	return hs, nil
}

// IsRandText tells whether s could be the first n digits of a
// rand.Text: n base32 digits, A to Z and 2 to 7.
func IsRandText(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '2' && r <= '7') {
			return false
		}
	}
	return true
}
