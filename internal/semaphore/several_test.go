package semaphore_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
)

// fakeLease is one key's lease as Several sees it: what it answers, and
// what was asked of it.
type fakeLease struct {
	token           int64
	deadline, bound clock.Instant
	renewErr        error
	files           []*os.File

	renewed, released, finished int
	status                      int
}

func (l *fakeLease) Token() int64            { return l.token }
func (l *fakeLease) Deadline() clock.Instant { return l.deadline }
func (l *fakeLease) Bound() clock.Instant    { return l.bound }
func (l *fakeLease) Files() []*os.File       { return l.files }
func (l *fakeLease) Slots() semaphore.Slots  { return semaphore.Slots{} }

func (l *fakeLease) Renew(context.Context) error {
	l.renewed++
	return l.renewErr
}

func (l *fakeLease) Release(context.Context) error {
	l.released++
	return nil
}

func (l *fakeLease) Finish(_ context.Context, status int) error {
	l.finished++
	l.status = status
	return nil
}

func join(keys []string, leases ...*fakeLease) *semaphore.Several {
	ls := make([]semaphore.Lease, len(leases))
	for i, l := range leases {
		ls[i] = l
	}
	return semaphore.Join(keys, ls)
}

// TakeOrder is one order of the keys, whatever order a caller lists them
// in: every permutation of a set of keys takes them in the same sequence,
// so that no two callers can each hold a key the other waits for.
func TestTakeOrderIsOneOrderForEveryPermutation(t *testing.T) {
	for _, keys := range [][]string{
		{"a", "b"},
		{"render", "render@host", "exports"},
		{"k1", "k2", "k3", "k10"},
		{"b", "a=1", "a", "\u00e9", "A"},
	} {
		var want []string
		permute(keys, func(p []string) {
			order := semaphore.TakeOrder(p)
			if len(order) != len(p) {
				t.Fatalf("TakeOrder(%q) = %v: want one index a key", p, order)
			}
			seen := map[int]bool{}
			taken := make([]string, len(order))
			for i, j := range order {
				if j < 0 || j >= len(p) || seen[j] {
					t.Fatalf("TakeOrder(%q) = %v: not a permutation of the indexes", p, order)
				}
				seen[j] = true
				taken[i] = p[j]
			}
			if want == nil {
				want = taken
			} else if !slices.Equal(taken, want) {
				t.Errorf("TakeOrder(%q) takes %q; another order of the same keys takes %q", p, taken, want)
			}
		})
		// Reverse byte order: a key that extends another comes first.
		sorted := slices.Clone(keys)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		if !slices.Equal(want, sorted) {
			t.Errorf("keys %q are taken as %q; want reverse byte order %q", keys, want, sorted)
		}
	}
}

// permute calls f with every permutation of keys.
func permute(keys []string, f func([]string)) {
	var rec func(int)
	p := slices.Clone(keys)
	rec = func(i int) {
		if i == len(p) {
			f(slices.Clone(p))
			return
		}
		for j := i; j < len(p); j++ {
			p[i], p[j] = p[j], p[i]
			rec(i + 1)
			p[i], p[j] = p[j], p[i]
		}
	}
	rec(0)
}

// The composite lapses as soon as its first key may: Deadline and Bound
// are the earliest of the keys', whichever key it is; a key that never
// lapses (zero) does not count; Lapsing names the key that lapses first.
func TestSeveralIsAsShortAsItsShortestKey(t *testing.T) {
	now := clock.Now()
	at := func(d time.Duration) clock.Instant { return now.Add(d) }
	for _, tc := range []struct {
		name              string
		deadlines, bounds []clock.Instant
		deadline, bound   clock.Instant
		lapsing           string
	}{
		{"the first key's first", []clock.Instant{at(1 * time.Second), at(5 * time.Second), at(9 * time.Second)},
			[]clock.Instant{at(20 * time.Second), at(10 * time.Second), at(30 * time.Second)}, at(1 * time.Second), at(10 * time.Second), "a"},
		{"the last key's first", []clock.Instant{at(9 * time.Second), at(5 * time.Second), at(1 * time.Second)},
			[]clock.Instant{at(30 * time.Second), at(20 * time.Second), at(10 * time.Second)}, at(1 * time.Second), at(10 * time.Second), "c"},
		{"a middle key's first", []clock.Instant{at(9 * time.Second), at(2 * time.Second), at(5 * time.Second)},
			[]clock.Instant{{}, at(15 * time.Second), {}}, at(2 * time.Second), at(15 * time.Second), "b"},
		{"a key that never lapses does not count", []clock.Instant{{}, at(7 * time.Second), {}},
			[]clock.Instant{{}, {}, {}}, at(7 * time.Second), clock.Instant{}, "b"},
		{"none lapses", []clock.Instant{{}, {}, {}}, []clock.Instant{{}, {}, {}}, clock.Instant{}, clock.Instant{}, "a"},
	} {
		leases := make([]*fakeLease, 3)
		for i := range leases {
			leases[i] = &fakeLease{deadline: tc.deadlines[i], bound: tc.bounds[i]}
		}
		s := join([]string{"a", "b", "c"}, leases...)
		if got := s.Deadline(); got != tc.deadline {
			t.Errorf("%s: Deadline is %v from now; want %v", tc.name, got.Sub(now), tc.deadline.Sub(now))
		}
		if got := s.Bound(); got != tc.bound {
			t.Errorf("%s: Bound is %v from now; want %v", tc.name, got.Sub(now), tc.bound.Sub(now))
		}
		if got := s.Lapsing(); got != tc.lapsing {
			t.Errorf("%s: Lapsing is %q; want %q", tc.name, got, tc.lapsing)
		}
	}
}

// Renew renews every key even after one failed, so that one key in doubt
// does not let the others lapse; a loss wins over a doubt, whichever key
// came first, and names its key; all well, nil.
func TestSeveralRenewsEveryKeyAndALossWins(t *testing.T) {
	doubt := errors.New("i/o timeout")
	revoked := &semaphore.RevokedError{Key: "c", Reason: "maintenance"}
	for _, tc := range []struct {
		name    string
		errs    []error
		key     string // the key the error names; "" for nil
		lost    bool
		revoked bool
	}{
		{"all well", []error{nil, nil, nil}, "", false, false},
		{"one in doubt", []error{nil, doubt, nil}, "b", false, false},
		{"a doubt, then a loss", []error{doubt, semaphore.ErrLost, nil}, "b", true, false},
		{"a doubt, then a revoke", []error{doubt, nil, revoked}, "c", true, true},
		{"a loss, then a doubt", []error{semaphore.ErrLost, doubt, nil}, "a", true, false},
		{"two losses: the first", []error{nil, semaphore.ErrLost, revoked}, "b", true, false},
	} {
		leases := make([]*fakeLease, len(tc.errs))
		for i, err := range tc.errs {
			leases[i] = &fakeLease{renewErr: err}
		}
		err := join([]string{"a", "b", "c"}, leases...).Renew(context.Background())
		for i, l := range leases {
			if l.renewed != 1 {
				t.Errorf("%s: key %d renewed %d times; want once, whatever the others said", tc.name, i, l.renewed)
			}
		}
		if tc.key == "" {
			if err != nil {
				t.Errorf("%s: Renew: %v; want nil", tc.name, err)
			}
			continue
		}
		var ke *semaphore.KeyError
		if !errors.As(err, &ke) || ke.Key != tc.key {
			t.Errorf("%s: Renew: %v; want a *KeyError naming key %q", tc.name, err, tc.key)
		}
		if errors.Is(err, semaphore.ErrLost) != tc.lost {
			t.Errorf("%s: Renew: %v; want a loss: %v", tc.name, err, tc.lost)
		}
		var re *semaphore.RevokedError
		if errors.As(err, &re) != tc.revoked {
			t.Errorf("%s: Renew: %v; want a *RevokedError: %v", tc.name, err, tc.revoked)
		}
		if !tc.lost && !errors.Is(err, doubt) {
			t.Errorf("%s: Renew: %v; want the doubt wrapped", tc.name, err)
		}
	}
}

// Release and Finish give every key back, Finish with the command's
// status; Files are every key's, in order; Token is the first key's, and
// Tokens and Keys are in the caller's order.
func TestSeveralGivesEveryKeyBack(t *testing.T) {
	f1, f2, f3 := tempFile(t), tempFile(t), tempFile(t)
	a := &fakeLease{token: 7, files: []*os.File{f1}}
	b := &fakeLease{token: 3}
	c := &fakeLease{token: 12, files: []*os.File{f2, f3}}
	s := join([]string{"a", "b", "c"}, a, b, c)
	if got := s.Files(); !slices.Equal(got, []*os.File{f1, f2, f3}) {
		t.Errorf("Files: %v; want every key's, in order", got)
	}
	if s.Token() != 7 || !slices.Equal(s.Tokens(), []int64{7, 3, 12}) || !slices.Equal(s.Keys(), []string{"a", "b", "c"}) {
		t.Errorf("Token %d, Tokens %v, Keys %q; want 7, [7 3 12], [a b c]", s.Token(), s.Tokens(), s.Keys())
	}
	if err := s.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := s.Finish(context.Background(), 3); err != nil {
		t.Errorf("Finish: %v", err)
	}
	for i, l := range []*fakeLease{a, b, c} {
		if l.released != 1 || l.finished != 1 || l.status != 3 {
			t.Errorf("key %d: released %d, finished %d with status %d; want each once, with 3", i, l.released, l.finished, l.status)
		}
	}
}

// A key that cannot be given back does not keep the others: each is
// given back, and the error names the keys that failed.
func TestSeveralReleasesTheRestAfterAFailure(t *testing.T) {
	a, c := &fakeLease{}, &fakeLease{}
	b := &failingRelease{}
	s := semaphore.Join([]string{"a", "b", "c"}, []semaphore.Lease{a, b, c})
	err := s.Release(context.Background())
	var ke *semaphore.KeyError
	if a.released != 1 || c.released != 1 || !errors.As(err, &ke) || ke.Key != "b" {
		t.Errorf("Release with key b failing: a released %d, c %d, error %v; want each once, a *KeyError naming b", a.released, c.released, err)
	}
	err = s.Finish(context.Background(), 0)
	if a.finished != 1 || c.finished != 1 || !errors.As(err, &ke) || ke.Key != "b" {
		t.Errorf("Finish with key b failing: a finished %d, c %d, error %v; want each once, a *KeyError naming b", a.finished, c.finished, err)
	}
}

// tempFile is an open file of the test's own, closed as it ends.
func tempFile(t *testing.T) *os.File {
	f, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

type failingRelease struct{ fakeLease }

func (*failingRelease) Release(context.Context) error     { return errors.New("connection refused") }
func (*failingRelease) Finish(context.Context, int) error { return errors.New("connection refused") }

// Join keeps its own copies: a caller that reuses its slices changes
// nothing of the lease.
func TestJoinCopies(t *testing.T) {
	keys := []string{"a", "b"}
	leases := []semaphore.Lease{&fakeLease{token: 1}, &fakeLease{token: 2}}
	s := semaphore.Join(keys, leases)
	keys[0], leases[0] = "x", &fakeLease{token: 9}
	if !slices.Equal(s.Keys(), []string{"a", "b"}) || s.Token() != 1 {
		t.Errorf("after the caller's slices changed: Keys %q, Token %d; want [a b], 1", s.Keys(), s.Token())
	}
}

// Under KeepOthers (--on-lost continue), a lost key is said once and
// renewed no more, the others are renewed on and count for the deadline;
// the loss of the last key held is Renew's.
func TestSeveralKeepOthersAfterALoss(t *testing.T) {
	t.Parallel()
	now := clock.Now()
	a := &fakeLease{token: 1, deadline: now.Add(time.Second), renewErr: semaphore.ErrLost}
	b := &fakeLease{token: 2, deadline: now.Add(time.Minute)}
	s := join([]string{"a", "b"}, a, b)
	var said []string
	s.KeepOthers(func(e *semaphore.KeyError) { said = append(said, e.Key) })
	for range 2 {
		if err := s.Renew(context.Background()); err != nil {
			t.Fatalf("Renew with a lost and b kept: got %v, want nil", err)
		}
	}
	if len(said) != 1 || said[0] != "a" || a.renewed != 1 || b.renewed != 2 {
		t.Fatalf("said %v, a renewed %d, b %d; want a said once, renewed once, b twice", said, a.renewed, b.renewed)
	}
	if d := s.Deadline(); d != b.deadline {
		t.Fatalf("deadline: got %v, want b's %v: a lost no longer counts", d, b.deadline)
	}
	b.renewErr = semaphore.ErrLost
	var ke *semaphore.KeyError
	if err := s.Renew(context.Background()); !errors.As(err, &ke) || ke.Key != "b" || !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("Renew once b is lost too: got %v, want b's loss", err)
	}
}
