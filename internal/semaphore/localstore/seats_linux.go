package localstore

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// On Linux a key's seats are one file, "seats", made with the key's
// directory and so its owner's: seat i is a lock on byte i of it, an open
// file description (OFD) lock, which like flock(2) belongs to the open
// file, so that a child that inherits the descriptor keeps the seat. No
// seat has a file of its own that a member could make first, or rename
// while holding it to free its number: a caller asking for more seats
// needs no new file, and only the directory's owner could move this one
// (the directory is sticky), as it could move the directory itself.
//
// The locks are read locks, taken through a read-only descriptor, the one
// the child inherits. Read locks do not exclude each other, so seats are
// counted and taken only under the key's grant lock; a probe for a write
// lock (F_OFD_GETLK) finds the read locks of every other open file.

const seatsFile = "seats"

// firstSeat is the file a key's first seat is in.
const firstSeat = seatsFile

// seatFiles are the files a key's directory is made with for its seats.
func seatFiles(int) []string { return []string{seatsFile} }

// seats are a key's seats as one caller sees them: the seats file, open.
type seats struct{ f *os.File }

// openSeats opens k's seats file. Only the directory's owner makes it
// when missing (a directory an older semrun made): one another member
// made could be renamed by that member.
func (k *keyDir) openSeats() (*seats, error) {
	f, err := k.openLock(seatsFile, k.owner == me())
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("key directory %s: has no %s file (made by an older semrun?); when no one holds the key, its owner, %s, or root can remove it", k.path, seatsFile, userName(k.owner))
	}
	if err != nil {
		return nil, err
	}
	return &seats{f: f}, nil
}

func (s *seats) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// take locks weight free seats among the first permits, under the grant
// lock. It returns them, or nil and how many of those seats are held.
func (s *seats) take(permits, weight int) (*heldSeats, int, error) {
	type span struct{ start, n int64 }
	var free []span
	found, want := int64(0), int64(weight)
	_, err := scan(s.f, 0, int64(permits), func(start, n int64) bool {
		n = min(n, want-found)
		free = append(free, span{start, n})
		found += n
		return found < want
	})
	if err != nil {
		return nil, 0, err
	}
	if found < want {
		return nil, permits - int(found), nil
	}
	for _, sp := range free {
		lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: sp.start, Len: sp.n}
		if err := fcntlLock(s.f, unix.F_OFD_SETLK, &lk); err != nil {
			s.unlock()
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				// A write lock came meanwhile: not semrun's, which takes
				// none, but held all the same.
				return nil, permits, nil
			}
			return nil, 0, err
		}
	}
	h := &heldSeats{f: s.f}
	s.f = nil // the lease's now
	return h, 0, nil
}

// unlock drops every seat this open file holds.
func (s *seats) unlock() error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart}
	return fcntlLock(s.f, unix.F_OFD_SETLK, &lk)
}

// heldSeats are the seats a lease holds, in its open seats file.
type heldSeats struct{ f *os.File }

func (h *heldSeats) files() []*os.File { return []*os.File{h.f} }

// release drops the seats, wakes the first waiter and closes the file.
func (h *heldSeats) release() error {
	// Unlocked here, not by the close: processes the child left may still
	// have the file open.
	err := (&seats{f: h.f}).unlock()
	ring(h.f)
	return errors.Join(err, h.f.Close())
}

// countHeld counts the seats of k held, whatever the N their holders
// asked for. A seats file semrun will not use is said to warnf.
func (k *keyDir) countHeld(warnf func(string, ...any)) int {
	f, err := k.openLock(seatsFile, false)
	var bad *badFileError
	if errors.As(err, &bad) && warnf != nil {
		warnf("skipped %s", err)
	}
	if err != nil {
		return 0
	}
	defer f.Close()
	// Seats are the bytes a caller may ask for: locks past them are not
	// semrun's.
	held, err := scan(f, 0, semaphore.MaxPermits, func(int64, int64) bool { return true })
	if err != nil {
		return 0
	}
	return int(held)
}

// scan finds the bytes of [start, end) of f that no other open file holds
// locked, and calls free with each run of them, lowest first, while it
// returns true. It returns how many bytes it found held. A probe names one
// lock in its range, any of them, not the first: the bytes on either side
// are probed again, so a scan costs a probe for each lock and run found.
func scan(f *os.File, start, end int64, free func(start, n int64) bool) (int64, error) {
	held := int64(0)
	todo := [][2]int64{{start, end}} // the lowest range last
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if r[0] >= r[1] {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: r[0], Len: r[1] - r[0]}
		if err := fcntlLock(f, unix.F_OFD_GETLK, &lk); err != nil {
			return held, err
		}
		if lk.Type == unix.F_UNLCK {
			if !free(r[0], r[1]-r[0]) {
				break
			}
			continue
		}
		from, to := max(lk.Start, r[0]), r[1]
		if lk.Len != 0 { // 0: to the end of the file, whatever its size
			to = min(lk.Start+lk.Len, r[1])
		}
		held += to - from
		todo = append(todo, [2]int64{to, r[1]}, [2]int64{r[0], from})
	}
	return held, nil
}

// fcntlLock applies an OFD lock command to f.
func fcntlLock(f *os.File, cmd int, lk *unix.Flock_t) error {
	var err error
	for {
		if err = unix.FcntlFlock(f.Fd(), cmd, lk); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return nil
}
