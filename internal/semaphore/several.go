package semaphore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/semrun/semrun/internal/clock"
)

// MaxKeys bounds the keys one caller holds at once: a holder's record
// names the others (HolderInfo.With), and stays of bounded size.
const MaxKeys = 8

// TakeOrder is the order in which a caller of several keys takes them:
// reverse byte order, the same for every caller whatever order it listed
// them in, so that no two callers can each hold a key the other waits for.
// Reverse, so that a key that extends another ("render@host" beside
// "render") comes first: a waiter then holds the narrower permit, which
// only its own host's callers want, while it waits for the wider one.
func TakeOrder(keys []string) []int {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(keys[b], keys[a]) })
	return order
}

// KeyError is what happened to one key of several.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %q: %v", e.Key, e.Err) }
func (e *KeyError) Unwrap() error { return e.Err }

// Several is the permits of several keys held as one Lease: renewed,
// given back and lost together. A loss of any one is a loss of all,
// wrapped in a *KeyError that names its key.
type Several struct {
	keys   []string
	leases []Lease
	// gone are the keys lost while others are kept (KeepOthers).
	gone []bool
	warn func(*KeyError)
}

// KeepOthers makes a loss of one key no loss of the others, for a command
// that runs on without a lost permit (--on-lost continue): Renew says it
// through warn, once, and renews the other keys from then on, which stay
// held. The loss of the last key held is Renew's, as for one key.
func (s *Several) KeepOthers(warn func(*KeyError)) {
	s.gone, s.warn = make([]bool, len(s.leases)), warn
}

// held tells whether the i-th key is still held, as far as Renew knows.
func (s *Several) held(i int) bool { return s.gone == nil || !s.gone[i] }

// Join makes one lease of the leases of keys, in the caller's order: the
// first is the one whose token Token returns.
func Join(keys []string, leases []Lease) *Several {
	return &Several{keys: slices.Clone(keys), leases: slices.Clone(leases)}
}

// Keys are the keys held, in the caller's order.
func (s *Several) Keys() []string { return slices.Clone(s.keys) }

// Leases are the keys' own, in the caller's order.
func (s *Several) Leases() []Lease { return slices.Clone(s.leases) }

// Tokens are the fencing tokens of the keys, in the caller's order.
func (s *Several) Tokens() []int64 {
	t := make([]int64, len(s.leases))
	for i, l := range s.leases {
		t[i] = l.Token()
	}
	return t
}

// TokensOf are the fencing tokens of what l holds: each key's of a
// *Several, in the caller's order, else l's own.
func TokensOf(l Lease) []int64 {
	if s, ok := l.(*Several); ok {
		return s.Tokens()
	}
	return []int64{l.Token()}
}

// Token is the first key's.
func (s *Several) Token() int64 { return s.leases[0].Token() }

// Deadline is the earliest of the keys': past it, one may be someone else's.
func (s *Several) Deadline() clock.Instant {
	var first clock.Instant
	for i, l := range s.leases {
		if d := l.Deadline(); s.held(i) && !d.IsZero() && (first.IsZero() || d.Before(first)) {
			first = d
		}
	}
	return first
}

// Lapsing is the key whose lease lapses first: the one a presumed loss
// is of.
func (s *Several) Lapsing() string {
	key, first := s.keys[0], clock.Instant{}
	for i, l := range s.leases {
		if d := l.Deadline(); s.held(i) && !d.IsZero() && (first.IsZero() || d.Before(first)) {
			key, first = s.keys[i], d
		}
	}
	return key
}

// Bound is the earliest of the keys' bounds.
func (s *Several) Bound() clock.Instant {
	var first clock.Instant
	for _, l := range s.leases {
		if b := l.Bound(); !b.IsZero() && (first.IsZero() || b.Before(first)) {
			first = b
		}
	}
	return first
}

// Renew renews every key's lease, all of them even after a failure, so
// that one key in doubt does not let the others lapse. A loss comes
// first among the errors: it ends the command whatever the others say.
func (s *Several) Renew(ctx context.Context) error {
	var lost, doubt error
	for i, l := range s.leases {
		if !s.held(i) {
			continue
		}
		err := l.Renew(ctx)
		switch {
		case err == nil:
		case errors.Is(err, ErrLost) && s.gone != nil && s.left() > 1:
			s.gone[i] = true
			s.warn(&KeyError{Key: s.keys[i], Err: err})
		case errors.Is(err, ErrLost) && lost == nil:
			lost = &KeyError{Key: s.keys[i], Err: err}
		case doubt == nil:
			doubt = &KeyError{Key: s.keys[i], Err: err}
		}
	}
	if lost != nil {
		return lost
	}
	return doubt
}

// left is how many keys are still held.
func (s *Several) left() int {
	n := 0
	for i := range s.leases {
		if s.held(i) {
			n++
		}
	}
	return n
}

// Release gives every key's permit back.
func (s *Several) Release(ctx context.Context) error {
	return s.each(func(l Lease) error { return l.Release(ctx) })
}

// Finish gives every key's permit back, saying how the command ended.
func (s *Several) Finish(ctx context.Context, exitStatus int) error {
	return s.each(func(l Lease) error { return l.Finish(ctx, exitStatus) })
}

// Files are every key's.
func (s *Several) Files() []*os.File {
	var files []*os.File
	for _, l := range s.leases {
		files = append(files, l.Files()...)
	}
	return files
}

// Slots are the first key's; Leases tell every key's.
func (s *Several) Slots() Slots { return s.leases[0].Slots() }

func (s *Several) each(f func(Lease) error) error {
	var errs []error
	for i, l := range s.leases {
		if err := f(l); err != nil {
			errs = append(errs, &KeyError{Key: s.keys[i], Err: err})
		}
	}
	return errors.Join(errs...)
}

// AllAtOnce is a store that grants several keys in one step, all or none:
// its caller holds nothing while it waits, and keeps a place in every
// key's line, which orders every two callers alike.
type AllAtOnce interface {
	// AcquireAll returns one lease of a permit of each request's key (a
	// *Several, in their order), as Acquire does for one; the requests
	// share all but their key, capacity, weight and holder info. It
	// returns ErrNotAtOnce, holding nothing, where the store cannot.
	AcquireAll(ctx context.Context, reqs []Request) (Lease, error)
}

// ErrNotAtOnce: this store cannot grant several keys in one step (a
// Redis Cluster, whose keys live on different masters).
var ErrNotAtOnce = errors.New("several keys cannot be granted in one step here")

// SlotsOf are the slots of what l holds: each key's of a *Several, in the
// caller's order, else l's own.
func SlotsOf(l Lease) []Slots {
	if s, ok := l.(*Several); ok {
		out := make([]Slots, len(s.leases))
		for i, one := range s.leases {
			out[i] = one.Slots()
		}
		return out
	}
	return []Slots{l.Slots()}
}
