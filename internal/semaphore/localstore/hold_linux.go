package localstore

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A hold's permits are bytes of the permits file, as a run's; its mark is
// one more byte, far past them (hold.go). Every lock is a read lock
// through the one open file of a process attached, so its mark and
// permits go at once, when that file is closed for the last time or
// released.

// markHold locks mark through the file h holds its permits by, which must
// be k's permits file: the permits become a hold's.
func (k *keyDir) markHold(h *heldPermits, mark int64) error {
	var mine, theirs unix.Stat_t
	if err := unix.Fstat(int(h.f.Fd()), &mine); err != nil {
		return fmt.Errorf("lock file %s: %w", h.f.Name(), err)
	}
	if err := unix.Fstatat(int(k.dir.Fd()), permitsFile, &theirs, unix.AT_SYMLINK_NOFOLLOW); err != nil || mine.Dev != theirs.Dev || mine.Ino != theirs.Ino {
		return fmt.Errorf("key directory %s: its %s file is not the one the permit holds", k.path, permitsFile)
	}
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: mark, Len: 1}
	return fcntlLock(h.f, unix.F_OFD_SETLK, &lk)
}

// holdAlive tells whether other open files hold the mark and every permit
// of a hold, with read locks: the processes attached to it, or the
// permit it was made of.
func (k *keyDir) holdAlive(spans []span, mark int64) (bool, error) {
	f, err := k.openLock(permitsFile, false)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return heldByOthers(f, spans, mark)
}

// joinHold locks the permits and the mark of a hold through a permits file
// of the caller's own, under the grant lock, when others hold them all:
// the hold is alive. It returns nil, without error, when it is not.
func (k *keyDir) joinHold(taken []span, mark int64) (*heldPermits, error) {
	f, err := k.openLock(permitsFile, false)
	if err != nil {
		return nil, err
	}
	alive, err := heldByOthers(f, taken, mark)
	if err != nil || !alive {
		f.Close()
		return nil, err
	}
	for _, sp := range append([]span{{mark, 1}}, taken...) {
		lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: sp.start, Len: sp.n}
		if err := fcntlLock(f, unix.F_OFD_SETLK, &lk); err != nil {
			_ = (&keyPermits{f: f}).unlock()
			f.Close()
			return nil, err
		}
	}
	return &heldPermits{f: f, spans: taken}, nil
}

// heldByOthers tells whether open files other than f hold every byte of
// the mark and of permits, with read locks: a write lock, which semrun
// never takes, is no hold's.
func heldByOthers(f *os.File, spans []span, mark int64) (bool, error) {
	for _, sp := range append([]span{{mark, 1}}, spans...) {
		free := false
		_, foreign, err := scan(f, sp.start, sp.start+sp.n, func(int64, int64) bool {
			free = true
			return false
		})
		if err != nil {
			return false, err
		}
		if free || foreign > 0 {
			return false, nil
		}
	}
	return true, nil
}
