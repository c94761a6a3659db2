//go:build unix && !linux

package localstore

import (
	"errors"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Without open file description locks (macOS, the BSDs), permit i of a key
// is an exclusive flock(2) on its own file, "seat.i", through a read-only
// descriptor, the one the child inherits. Permits beyond the first
// precreated, made when first needed, belong to whoever needed them: a
// permit file another user made is one the caller cannot use, counted as
// held, since its owner could rename it while holding it and so free its
// number for another holder (see docs/shared-hosts.md).

// The locks semrun needs, and takes for a permit, as doctor names them.
const (
	locksNeeded = "flock(2)"
	locksTaken  = "flock"
)

// firstPermit is the file a key's first permit is in.
const firstPermit = permitFilePrefix + "0"

// precreated bounds the permit files made with a key's directory.
const precreated = 4096

// permitFiles are the files a key's directory is made with for its permits.
func permitFiles(capacity int) []string {
	var files []string
	for i := range min(capacity, precreated) {
		files = append(files, permitFilePrefix+strconv.Itoa(i))
	}
	return files
}

// keyPermits are a key's permit files as one caller sees them, opened as
// looked at.
type keyPermits struct {
	k     *keyDir
	files map[int]*os.File
}

func (k *keyDir) openPermits() (*keyPermits, error) {
	return &keyPermits{k: k, files: map[int]*os.File{}}, nil
}

func (s *keyPermits) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// take locks weight free permits below capacity, under the grant
// lock, besides those the coolings take, which cooling counts once the
// permits were looked at, and never those it keeps (cool.go); the queue
// lock matters only on Linux. It returns them, or nil and how many of
// those permits are held or cooling.
func (s *keyPermits) take(capacity, weight int, _ *os.File, _ bool, cooling func(anyFreeFunc) coolCount) (*heldPermits, int, error) {
	held, i := 0, 0
	var taken []int
	unlock := func(nums []int) {
		for _, i := range nums {
			_, _ = flock(s.files[i], unix.LOCK_UN)
		}
	}
	// As many free permits as the caller takes, then, when some cool, as
	// many more as they take: a cooling that comes meanwhile is busy.
	want := weight
	for pass := 0; ; pass++ {
		for ; i < capacity && len(taken) < want; i++ {
			f := s.files[i]
			if f == nil {
				var err error
				f, err = s.k.openLock(permitFilePrefix+strconv.Itoa(i), true)
				var bad *badFileError
				if errors.As(err, &bad) && bad.foreign {
					held++ // another user's: not the caller's to trust
					continue
				}
				if err != nil {
					unlock(taken)
					return nil, held, err
				}
				s.files[i] = f
			}
			ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
			if err != nil {
				unlock(taken)
				return nil, held, err
			}
			if !ok {
				held++
				continue
			}
			taken = append(taken, i)
		}
		// The permits locked here were free.
		c := cooling(func(spans []span) bool {
			for _, sp := range spans {
				if slices.ContainsFunc(taken, func(i int) bool { return int64(i) >= sp.start && int64(i) < sp.start+sp.n }) {
					return true
				}
			}
			return s.anyFree(spans)
		})
		cool := c.n
		// The coolings keep at most as many of the free permits as they
		// take: the others are there.
		var usable []int
		for _, i := range taken {
			if len(without([]span{{int64(i), 1}}, c.kept)) > 0 {
				usable = append(usable, i)
			}
		}
		switch {
		case len(taken)-cool >= weight && len(usable) >= weight:
			h := &heldPermits{}
			for _, i := range usable[:weight] {
				h.locked = append(h.locked, s.files[i])
				h.spans = append(h.spans, span{int64(i), 1})
				delete(s.files, i)
			}
			unlock(slices.DeleteFunc(taken, func(i int) bool { return s.files[i] == nil }))
			return h, held, nil
		case i == capacity || pass > 0:
			unlock(taken)
			return nil, min(held+cool, capacity), nil
		}
		want = weight + cool
	}
}

// heldPermits are the permit files a lease holds locked, and their
// numbers, one a span.
type heldPermits struct {
	locked []*os.File
	spans  []span
}

func (h *heldPermits) files() []*os.File { return h.locked }

// permitSpans are the permits h holds.
func (h *heldPermits) permitSpans() []span { return h.spans }

// anyFree tells whether any permit of spans is free: nobody holds its
// file locked. One that cannot be looked at is free (see anyFreeFunc).
// It opens each file anew: a lock s holds through its own would be
// changed by another lock through it.
func (s *keyPermits) anyFree(spans []span) bool {
	for _, sp := range spans {
		for i := sp.start; i < sp.start+sp.n; i++ {
			f, err := s.k.openLock(permitFilePrefix+strconv.FormatInt(i, 10), false)
			if err != nil {
				return true // missing, or not one semrun uses: no one's lock
			}
			free, err := flock(f, unix.LOCK_SH|unix.LOCK_NB)
			f.Close() // and drops the lock taken
			if err != nil || free {
				return true
			}
		}
	}
	return false
}

// release drops the permits and closes their files.
func (h *heldPermits) release() error {
	var errs []error
	for _, f := range h.locked {
		// Unlocked here, not by the close: processes the child left may
		// still have the file open.
		_, err := flock(f, unix.LOCK_UN)
		ring(f)
		errs = append(errs, err, f.Close())
	}
	return errors.Join(errs...)
}

// countHeld counts the permit files of k someone holds locked. Files semrun
// will not use are said to warnf.
func (k *keyDir) countHeld(warnf func(string, ...any), _ int) (int, error) {
	held := 0
	k.eachLocked(permitFilePrefix, warnf, func(*os.File) bool {
		held++
		return true
	})
	return held, nil
}

// held is countHeld: no waiter here is woken by a file closed.
func (s *keyPermits) held(capacity int) (int, error) { return s.k.countHeld(nil, capacity) }

// makeFence does nothing: permits have always been files here, so there is
// no older semrun to fence off.
func makeFence(int) error { return nil }

// olderHolders: there is no older layout here.
func (k *keyDir) olderHolders() (int, []record) { return 0, nil }
