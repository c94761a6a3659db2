//go:build unix && !linux

package localstore

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Without open file description locks (macOS, the BSDs), seat i of a key
// is an exclusive flock(2) on its own file, "seat.i", through a read-only
// descriptor, the one the child inherits. Seats beyond the first
// precreated, made when first needed, belong to whoever needed them: a
// seat file another user made is one the caller cannot use, counted as
// held, since its owner could rename it while holding it and so free its
// number for another holder (see docs/shared-hosts.md).

// The locks semrun needs, and takes for a seat, as doctor names them.
const (
	locksNeeded = "flock(2)"
	locksTaken  = "flock"
)

// firstSeat is the file a key's first seat is in.
const firstSeat = seatFilePrefix + "0"

// precreated bounds the seat files made with a key's directory.
const precreated = 4096

// seatFiles are the files a key's directory is made with for its seats.
func seatFiles(permits int) []string {
	var files []string
	for i := range min(permits, precreated) {
		files = append(files, seatFilePrefix+strconv.Itoa(i))
	}
	return files
}

// seats are a key's seat files as one caller sees them, opened as looked at.
type seats struct {
	k     *keyDir
	files map[int]*os.File
}

func (k *keyDir) openSeats() (*seats, error) {
	return &seats{k: k, files: map[int]*os.File{}}, nil
}

func (s *seats) close() {
	for _, f := range s.files {
		f.Close()
	}
}

// take locks weight free seats among the first permits, under the grant
// lock, besides those the coolings take, which cooling counts once the
// seats were looked at (cool.go); the queue lock matters only on Linux.
// It returns them, or nil and how many of those seats are held or
// cooling.
func (s *seats) take(permits, weight int, _ *os.File, _ bool, cooling func() int) (*heldSeats, int, error) {
	held, i := 0, 0
	var taken []int
	unlock := func(seats []int) {
		for _, i := range seats {
			_, _ = flock(s.files[i], unix.LOCK_UN)
		}
	}
	// As many free seats as the caller takes, then, when some cool, as
	// many more as they take: a cooling that comes meanwhile is busy.
	want := weight
	for pass := 0; ; pass++ {
		for ; i < permits && len(taken) < want; i++ {
			f := s.files[i]
			if f == nil {
				var err error
				f, err = s.k.openLock(seatFilePrefix+strconv.Itoa(i), true)
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
		cool := cooling()
		switch {
		case len(taken)-cool >= weight:
			unlock(taken[weight:])
			h := &heldSeats{}
			for _, i := range taken[:weight] {
				h.seats = append(h.seats, s.files[i])
				delete(s.files, i)
			}
			return h, held, nil
		case i == permits || pass > 0:
			unlock(taken)
			return nil, min(held+cool, permits), nil
		}
		want = weight + cool
	}
}

// heldSeats are the seat files a lease holds locked.
type heldSeats struct{ seats []*os.File }

func (h *heldSeats) files() []*os.File { return h.seats }

// release drops the seats and closes their files.
func (h *heldSeats) release() error {
	var errs []error
	for _, f := range h.seats {
		// Unlocked here, not by the close: processes the child left may
		// still have the file open.
		_, err := flock(f, unix.LOCK_UN)
		ring(f)
		errs = append(errs, err, f.Close())
	}
	return errors.Join(errs...)
}

// countHeld counts the seat files of k someone holds locked. Files semrun
// will not use are said to warnf.
func (k *keyDir) countHeld(warnf func(string, ...any), _ int) (int, error) {
	held := 0
	k.eachLocked(seatFilePrefix, warnf, func(*os.File) bool {
		held++
		return true
	})
	return held, nil
}

// held is countHeld: no waiter here is woken by a file closed.
func (s *seats) held(capacity int) (int, error) { return s.k.countHeld(nil, capacity) }

// makeFence does nothing: seats have always been files here, so there is
// no older semrun to fence off.
func makeFence(int) error { return nil }

// olderHolders: there is no older layout here.
func (k *keyDir) olderHolders() (int, []record) { return 0, nil }
