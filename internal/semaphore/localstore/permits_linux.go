package localstore

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// On Linux a key's permits are one file, "seats", made with the key's
// directory and so its owner's: permit i is a lock on byte i of it, an open
// file description (OFD) lock, which like flock(2) belongs to the open
// file, so that a child that inherits the descriptor keeps the permit. No
// permit has a file of its own that a member could make first, or rename
// while holding it to free its number: a caller asking for more permits
// needs no new file, and only the directory's owner could move this one
// (the directory is sticky), as it could move the directory itself.
//
// The locks are read locks, taken through a read-only descriptor, the one
// the child inherits. Read locks do not exclude each other, so permits are
// counted and taken only under the key's grant lock; a probe for a write
// lock (F_OFD_GETLK) finds the read locks of every other open file.

const permitsFile = "seats"

// The locks semrun needs, and takes for a permit, as doctor names them.
const (
	locksNeeded = "flock(2) and open file description byte locks (F_OFD_SETLK)"
	locksTaken  = "flock, and an F_OFD_SETLK byte lock"
)

// firstPermit is the file a key's first permit is in.
const firstPermit = permitsFile

// permitFiles are the files a key's directory is made with for its permits.
func permitFiles(int) []string { return []string{permitsFile} }

// A semrun from before this layout took permit i as a flock(2) on its own
// file, "seat.i", which it made when missing, and sees nothing of the
// permits file; this one sees nothing of its flocks unless it looks. So a
// key's directory is made with a fence, "seat.0" a symbolic link to
// nowhere: an older semrun refuses a key whose first permit file is one
// (status 125, naming it), and its status keeps the directory. In a
// directory an older semrun made, permits are taken only once its owner
// has put the fence up, which it does under the grant lock when no
// seat.* file is held and no one is first in line (an older waiter first
// in line keeps its permit files open across tries); until then the
// seat.* files held count as held.
const (
	fenceFile   = permitFilePrefix + "0"
	fenceTarget = "seats (this key needs a newer semrun)"
)

// makeFence puts the fence up in the directory dirfd.
func makeFence(dirfd int) error {
	return unix.Symlinkat(fenceTarget, dirfd, fenceFile)
}

// fenced tells whether k's fence is up: its seat.0 is a symbolic link
// its owner made, which no one else can remove (the directory is sticky
// when shared).
func (k *keyDir) fenced() bool {
	var st unix.Stat_t
	return unix.Fstatat(int(k.dir.Fd()), fenceFile, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFLNK && st.Uid == k.owner
}

// keyPermits are a key's permits as one caller sees them: the permits
// file, open under the grant lock, then kept while it is still the one of
// that name.
type keyPermits struct {
	k        *keyDir
	f        *os.File
	dev, ino uint64
}

func (k *keyDir) openPermits() (*keyPermits, error) { return &keyPermits{k: k}, nil }

func (s *keyPermits) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// open makes s.f the permits file, under the grant lock. A missing one
// is made only where no one holds the key: one removed from under its
// holders, made anew, would let others hold beside them.
func (s *keyPermits) open() error {
	var st unix.Stat_t
	err := unix.Fstatat(int(s.k.dir.Fd()), permitsFile, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && s.f != nil && uint64(st.Dev) == s.dev && uint64(st.Ino) == s.ino {
		return nil
	}
	s.close()
	s.f = nil
	if errors.Is(err, unix.ENOENT) {
		if err := s.k.makePermitsFile(); err != nil {
			return err
		}
	}
	f, err := s.k.openLock(permitsFile, false)
	if err != nil {
		return err
	}
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return fmt.Errorf("lock file %s: %w", f.Name(), err)
	}
	s.f, s.dev, s.ino = f, uint64(st.Dev), uint64(st.Ino)
	return nil
}

// makePermitsFile makes k's missing permits file, under the grant lock.
// Only the directory's owner does: one another member made could be
// renamed by that member.
func (k *keyDir) makePermitsFile() error {
	if k.anyLocked(heldPrefix) {
		return fmt.Errorf("key directory %s: %w", k.path, errPermitsGone)
	}
	if k.owner != me() {
		return fmt.Errorf("key directory %s: has no %s file (made by an older semrun?); its owner, %s, makes it on its next run, or, when no one holds the key, it or root can remove the directory", k.path, permitsFile, userName(k.owner))
	}
	f, err := createFile(int(k.dir.Fd()), permitsFile, k.path, k.fileMode())
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if f != nil {
		f.Close()
	}
	return nil
}

// fence puts the fence up in k, under the grant lock, when it is not. It
// tells whether the fence is up, else how many permits an older semrun
// holds (0: someone else is first in line); it is an error when the
// caller never could put it up.
func (k *keyDir) fence(queue *os.File, inLine bool) (bool, int, error) {
	if k.fenced() {
		return true, 0, nil
	}
	old := 0
	k.eachOldPermit(func(f *os.File) {
		if free, err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil || !free {
			old++
		}
	})
	if old > 0 {
		return false, old, nil
	}
	if k.owner != me() {
		return false, 0, fmt.Errorf("key directory %s: has no %s fence against an older semrun (made by one, or by a semrun before the fence); its owner, %s, puts it up on its next run, or, when no one holds the key, it or root can remove the directory", k.path, fenceFile, userName(k.owner))
	}
	if !inLine {
		// Someone first in line may be an older semrun, with permit files
		// open that it would lock once unlinked: the fence waits for it.
		if ok, err := flock(queue, unix.LOCK_EX|unix.LOCK_NB); err != nil || !ok {
			return false, 0, err
		}
		defer func() { _, _ = flock(queue, unix.LOCK_UN) }()
	}
	for _, name := range k.names(permitFilePrefix) {
		if err := unix.Unlinkat(int(k.dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return false, 0, fmt.Errorf("key directory %s: remove %s for the fence against an older semrun: %w", k.path, name, err)
		}
	}
	if err := makeFence(int(k.dir.Fd())); err != nil {
		return false, 0, fmt.Errorf("key directory %s: fence against an older semrun: %w", k.path, err)
	}
	return true, 0, nil
}

// eachOldPermit calls fn with each seat.* regular file of k, opened
// read-only: an older semrun's permits. The fence and anything else that is
// not a regular file are no permit.
func (k *keyDir) eachOldPermit(fn func(*os.File)) {
	for _, name := range k.names(permitFilePrefix) {
		if f := k.openRegular(name); f != nil {
			fn(f)
			f.Close()
		}
	}
}

// olderHolders counts the permits an older semrun holds in k, and reads
// what its holders wrote in them (the same record in each of its permits).
func (k *keyDir) olderHolders() (int, []record) {
	if k.fenced() {
		return 0, nil
	}
	held := 0
	var recs []record
	seen := map[int64]bool{}
	k.eachOldPermit(func(f *os.File) {
		if free, err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err != nil || free {
			return
		}
		held++
		if r, err := readRecord(f); err == nil && !seen[r.Token] {
			seen[r.Token] = true
			recs = append(recs, r)
		}
	})
	return held, recs
}

// take locks weight free permits below capacity, under the grant
// lock, besides those the coolings take, which cooling counts once the
// permits were looked at, and never those it keeps (cool.go); queue is
// the key's queue file, whose lock the caller holds when inLine. It
// returns them, or nil and how many of those permits are held or
// cooling.
func (s *keyPermits) take(capacity, weight int, queue *os.File, inLine bool, cooling func(anyFreeFunc) coolCount) (*heldPermits, int, error) {
	up, old, err := s.k.fence(queue, inLine)
	if err != nil {
		return nil, 0, err
	}
	if !up {
		// Taken now, a permit would be one an older semrun cannot see.
		if old == 0 {
			old = capacity // someone else is in line
		}
		return nil, min(old, capacity), nil
	}
	if err := s.open(); err != nil {
		return nil, 0, err
	}
	// As many free permits as the caller takes, then, when some cool, as
	// many more as they take: a cooling that comes meanwhile is busy.
	want := int64(weight)
	for pass := 0; ; pass++ {
		var free []span
		found := int64(0)
		_, _, err = scan(s.f, 0, int64(capacity), func(start, n int64) bool {
			n = min(n, want-found)
			free = append(free, span{start, n})
			found += n
			return found < want
		})
		if err != nil {
			return nil, 0, err
		}
		c := cooling(s.anyFree)
		cool := int64(c.n)
		// The coolings keep at most as many of the free permits as they
		// take: the others are there.
		free = without(free, c.kept)
		switch {
		case found-cool >= int64(weight) && permitCount(free) >= int64(weight):
			return s.lock(capacity, firstPermits(free, int64(weight)))
		case found < want || pass > 0: // found < want: every permit looked at
			return nil, int(min(int64(capacity)-found+cool, int64(capacity))), nil
		}
		want = int64(weight) + cool
	}
}

// firstPermits are the first n permits of spans.
func firstPermits(spans []span, n int64) []span {
	var out []span
	for _, sp := range spans {
		if n <= 0 {
			break
		}
		sp.n = min(sp.n, n)
		out = append(out, sp)
		n -= sp.n
	}
	return out
}

// lock locks the free permits, spans, as take found them.
func (s *keyPermits) lock(capacity int, free []span) (*heldPermits, int, error) {
	for _, sp := range free {
		lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: sp.start, Len: sp.n}
		if err := fcntlLock(s.f, unix.F_OFD_SETLK, &lk); err != nil {
			s.unlock()
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
				// A write lock came meanwhile: not semrun's, which takes
				// none, but held all the same.
				return nil, capacity, nil
			}
			return nil, 0, err
		}
	}
	h := &heldPermits{f: s.f, spans: free}
	s.f = nil // the lease's now
	return h, 0, nil
}

// unlock drops every permit this open file holds.
func (s *keyPermits) unlock() error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart}
	return fcntlLock(s.f, unix.F_OFD_SETLK, &lk)
}

// heldPermits are the permits a lease holds, the bytes of spans, in its
// open permits file; a hold's also lock its mark there (hold_linux.go).
type heldPermits struct {
	f     *os.File
	spans []span
}

func (h *heldPermits) files() []*os.File { return []*os.File{h.f} }

// permitSpans are the permits h holds.
func (h *heldPermits) permitSpans() []span { return h.spans }

// release drops the permits, wakes the first waiter and closes the file.
// A file the caller closed first, as a process that exits does, has
// dropped them already: that is no error.
func (h *heldPermits) release() error {
	// Unlocked here, not by the close: processes the child left may still
	// have the file open.
	err := (&keyPermits{f: h.f}).unlock()
	ring(h.f)
	cerr := h.f.Close()
	if errors.Is(cerr, os.ErrClosed) {
		return nil
	}
	return errors.Join(err, cerr)
}

// countHeld counts the permits of k held, whatever the N their holders
// asked for. Locks semrun does not take (write locks) count as no more
// than the capacity permits, and are said to warnf. A missing permits
// file is an error wrapping unix.ENOENT: never taken for a key no one
// holds.
func (k *keyDir) countHeld(warnf func(string, ...any), capacity int) (int, error) {
	f, err := k.openLock(permitsFile, false)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countIn(f, warnf, capacity)
}

// anyFree tells whether any permit of spans is free: no open file but
// s's holds it. One that cannot be looked at is free (see anyFreeFunc).
func (s *keyPermits) anyFree(spans []span) bool {
	f := s.f
	if f == nil {
		var err error
		if f, err = s.k.openLock(permitsFile, false); err != nil {
			return true
		}
		defer f.Close()
	}
	for _, sp := range spans {
		free := false
		if _, _, err := scan(f, sp.start, sp.start+sp.n, func(int64, int64) bool {
			free = true
			return false
		}); err != nil || free {
			return true
		}
	}
	return false
}

// held is countHeld through the permits file s keeps open, under the grant
// lock: the first waiter in line must not close it, which would wake
// itself (watch_linux.go).
func (s *keyPermits) held(capacity int) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	return countIn(s.f, nil, capacity)
}

// countIn counts the permits held in the permits file f (see countHeld).
func countIn(f *os.File, warnf func(string, ...any), capacity int) (int, error) {
	// Permits are the bytes a caller may ask for: locks past them are not
	// semrun's.
	held, foreign, err := scan(f, 0, semaphore.MaxPermits, func(int64, int64) bool { return true })
	if err != nil {
		return 0, err
	}
	if foreign > 0 {
		if warnf != nil {
			warnf("%s: a write lock, which semrun never takes, covers %d of its permits", f.Name(), foreign)
		}
		held = held - foreign + min(foreign, max(int64(capacity)-(held-foreign), 0))
	}
	return int(held), nil
}

// scan finds the bytes of [start, end) of f that no other open file holds
// locked, and calls free with each run of them, lowest first, while it
// returns true. It returns how many bytes it found held, and how many of
// them by write locks, which semrun never takes. A probe names one
// lock in its range, any of them, not the first: the bytes on either side
// are probed again, so a scan costs a probe for each lock and run found.
func scan(f *os.File, start, end int64, free func(start, n int64) bool) (held, foreign int64, err error) {
	todo := [][2]int64{{start, end}} // the lowest range last
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if r[0] >= r[1] {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: r[0], Len: r[1] - r[0]}
		if err := fcntlLock(f, unix.F_OFD_GETLK, &lk); err != nil {
			return held, foreign, err
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
		if lk.Type == unix.F_WRLCK {
			foreign += to - from
		}
		todo = append(todo, [2]int64{to, r[1]}, [2]int64{r[0], from})
	}
	return held, foreign, nil
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
