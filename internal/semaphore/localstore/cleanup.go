//go:build unix

package localstore

import (
	"crypto/rand"
	"os"
	"strings"
	"time"

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
// for it and nothing happened in it for idle, and tells whether it did.
// It holds every lock of the key while it moves the directory aside, and
// a caller checks, once it holds the grant lock, that its directory is
// still the key's (keyDir.current): so no one ever takes a seat in a
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
	// No seat can be taken without the grant lock.
	if k.countHeld(nil) > 0 {
		return false
	}
	for _, name := range k.names("") {
		if strings.HasPrefix(name, heldPrefix) || strings.HasPrefix(name, waitPrefix) {
			if !lock(name, os.O_RDONLY) {
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

// lastUse is when something last happened in k: a file made or removed
// (a waiter came or went), a grant (the token), a release (a seat).
func (k *keyDir) lastUse() time.Time {
	var st unix.Stat_t
	if unix.Fstat(int(k.dir.Fd()), &st) != nil {
		return time.Now()
	}
	last := st.Mtim
	for _, name := range k.names("") {
		if unix.Fstatat(int(k.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mtim.Nano() > last.Nano() {
			last = st.Mtim
		}
	}
	return time.Unix(last.Unix())
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
