//go:build unix

package localstore

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// StaleAfter is how long a key's directory stays once no one holds the key,
// waits for it or was granted it: status lists such keys no more, and
// removes their directories.
const StaleAfter = time.Hour

// abandonedAfter is how long a key directory being made may stay hidden
// before it is taken for the leftover of a caller that died making it.
const abandonedAfter = time.Minute

// removeUnused removes k's directory when no one holds the key or waits
// for it, it keeps no settings (they stay until unset) and nothing
// happened in it for idle, and tells whether it did.
// It holds every lock of the key while it moves the directory aside, and
// a caller checks, once it holds the grant lock, that its directory is
// still the key's (keyDir.current): so no one ever takes a permit in a
// directory being removed.
func (s *Store) removeUnused(k *keyDir, idle time.Duration) bool {
	var locked []*os.File
	defer func() {
		for _, f := range locked {
			f.Close()
		}
	}()
	lock := func(name string, flag int) bool {
		f, err := k.open(name, flag)
		if err != nil {
			return false
		}
		locked = append(locked, f)
		ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
		return ok && err == nil
	}
	if k.owner != me() {
		return false // another member's, in a sticky lock directory: not the caller's to move
	}
	if !lock(grantFile, os.O_RDWR|os.O_CREATE) || k.current() != nil || !lock(queueFile, os.O_RDWR|os.O_CREATE) {
		return false
	}
	// No permit can be taken without the grant lock, by this semrun or an
	// older one. A count that fails keeps the directory: but for the
	// permits file of a directory an older semrun made, whose seat.* files
	// are locked below, no permit would be missed.
	held, err := k.countHeld(nil, semaphore.MaxPermits)
	switch {
	case errors.Is(err, unix.ENOENT) && k.anyOldPermit():
	case err != nil || held > 0:
		return false
	}
	// Counted after the permits, as a grant counts them (cool.go): none
	// is pending, no permit being held.
	p, _ := k.openPermits()
	c := k.cooling(time.Now(), p.anyFree)
	p.close()
	if c.n > 0 {
		return false
	}
	if p, err := k.readPolicy(time.Now()); err == nil && !p.empty() {
		return false
	}
	for _, name := range k.names("") {
		switch {
		case strings.HasPrefix(name, holdPrefix) || strings.HasPrefix(name, holdDraftPrefix):
			// A hold's end is kept for a day, for release to learn how
			// it ended (hold.go).
			if k.changedWithin(name, holdKept) {
				return false
			}
		case strings.HasPrefix(name, heldPrefix) || strings.HasPrefix(name, waitPrefix):
			if !lock(name, os.O_RDONLY) {
				return false
			}
		case strings.HasPrefix(name, permitFilePrefix):
			// An older semrun's permit, held until the directory is aside;
			// the fence, no file, is none.
			f := k.openRegular(name)
			if f == nil {
				continue
			}
			locked = append(locked, f)
			if ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB); !ok || err != nil {
				return false
			}
		}
	}
	if time.Since(k.lastUse()) < idle {
		return false
	}
	gone := hiddenGone + rand.Text()[:16]
	if unix.Renameat(s.fd(), k.name, s.fd(), gone) != nil {
		return false // not the caller's to remove, in a sticky lock directory
	}
	s.removeHidden(gone)
	return true
}

// openRegular opens k's file name read-only when it is a regular file,
// never following a symbolic link nor blocking on a FIFO; nil otherwise.
func (k *keyDir) openRegular(name string) *os.File {
	fd, err := unix.Openat(int(k.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), filepath.Join(k.path, name))
}

// anyOldPermit tells whether k has a seat.* regular file.
func (k *keyDir) anyOldPermit() bool {
	for _, name := range k.names(permitFilePrefix) {
		if f := k.openRegular(name); f != nil {
			f.Close()
			return true
		}
	}
	return false
}

// lastUse is when something last happened in k: a file made or removed
// (a waiter came or went), a grant (the token), a release (a permit).
func (k *keyDir) lastUse() time.Time {
	var st unix.Stat_t
	if unix.Fstat(int(k.dir.Fd()), &st) != nil {
		return time.Now()
	}
	last := st.Mtim
	for _, name := range k.names("") {
		// The fence (a symbolic link, permits_linux.go) was made with the
		// directory, or once, and says nothing of use.
		if unix.Fstatat(int(k.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mtim.Nano() > last.Nano() {
			last = st.Mtim
		}
	}
	return time.Unix(last.Unix())
}

// lastEvent is when k's counters were last written (an event), or the
// zero time when it has none.
func (k *keyDir) lastEvent() time.Time {
	var st unix.Stat_t
	if unix.Fstatat(int(k.dir.Fd()), statsFile, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
		return time.Time{}
	}
	return time.Unix(st.Mtim.Unix())
}

// removeHidden removes the hidden directory name of the lock directory
// and the files in it, never following a symbolic link. In a sticky lock
// directory, only the caller's own go.
func (s *Store) removeHidden(name string) {
	fd, err := s.openDirAt(name)
	if err != nil {
		return
	}
	dir := os.NewFile(uintptr(fd), name)
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		_ = unix.Unlinkat(fd, n, 0)
	}
	_ = unix.Unlinkat(s.fd(), name, unix.AT_REMOVEDIR)
}

// sweepHidden removes hidden directories left behind: those being removed
// when their remover died, and those being made for longer than
// abandonedAfter.
func (s *Store) sweepHidden(name string) {
	switch {
	case strings.HasPrefix(name, hiddenGone):
	case strings.HasPrefix(name, hiddenNew):
		var st unix.Stat_t
		if unix.Fstatat(s.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || time.Since(time.Unix(st.Mtim.Unix())) < abandonedAfter {
			return
		}
	default:
		return
	}
	// Moved aside first: a caller stalled while making it may still rename
	// it into place, and must not find it being emptied there.
	gone := hiddenGone + rand.Text()[:16]
	if unix.Renameat(s.fd(), name, s.fd(), gone) == nil {
		s.removeHidden(gone)
	}
}
