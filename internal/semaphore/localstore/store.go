//go:build unix

package localstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// A key's directory holds one file a role. Seats are "seat.0" to
// "seat.N-1"; waiters each have a "wait.*" file while they wait.
const (
	grantFile    = "grant"    // held while seats are counted or taken: microseconds
	queueFile    = "queue"    // held by the first waiter in line while it waits for a seat
	tokenFile    = "token"    // the last fencing token handed out
	capacityFile = "capacity" // the N the last caller asked for
	seatPrefix   = "seat."
	waitPrefix   = "wait."
)

// How long a waiter at the head of the line sleeps without a wake-up from
// the kernel before it looks at the seats again anyway. Followups cover the
// instant between a dying holder's close event and the kernel dropping its
// lock; the slow re-check covers a missed event.
const (
	firstFollowup = 2 * time.Millisecond
	slowRecheck   = 2 * time.Second
)

// Options configure a local store.
type Options struct {
	// Dir is the lock directory; created (mode 0755) when missing, provided
	// its parent exists.
	Dir string
	// Warnf, when set, receives warnings (callers asking different capacities).
	Warnf func(format string, args ...any)
	// Names name the settings in messages; semaphore.OwnNames when nil.
	Names semaphore.Names
}

// Store is a semaphore.Store whose permits are kernel file locks in a lock
// directory on this host: seat i of a key is an exclusive flock(2) on its
// file, so the kernel frees a seat the moment its holder is gone and no
// lease is needed.
type Store struct {
	dir   *os.File // the lock directory, opened without following a symlink
	path  string
	warnf func(format string, args ...any)
	names semaphore.Names
}

var _ semaphore.Store = (*Store)(nil)

// DefaultDir is the lock directory used when none is given. It depends
// only on the user and the host, never on the environment, so that a
// user's cron jobs and shells always meet in the same place: root's is
// SystemDir; another user's is SystemDir when root made it and this user
// may write it (set up to be shared), else a directory of the user's own
// beside it, "semrun-UID" in /run/lock (or in /tmp where there is no
// /run/lock).
func DefaultDir() string {
	uid := os.Geteuid()
	if uid == 0 {
		return SystemDir
	}
	var st unix.Stat_t
	if unix.Lstat(SystemDir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 &&
		unix.Access(SystemDir, unix.W_OK|unix.X_OK) == nil {
		return SystemDir
	}
	parent := filepath.Dir(SystemDir)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = "/tmp"
	}
	return filepath.Join(parent, "semrun-"+strconv.Itoa(uid))
}

// New opens the lock directory o.Dir, creating it when missing. A
// directory someone else could tamper with is refused (see checkDir).
func New(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, &semaphore.SettingError{Setting: DirSetting, Err: errors.New("must not be empty")}
	}
	path := filepath.Clean(o.Dir)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("lock directory %s: %w", path, unwrapPath(err))
	}
	dir, err := openDir(unix.AT_FDCWD, path, path)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, path: path, warnf: o.Warnf, names: o.Names}
	if s.warnf == nil {
		s.warnf = func(string, ...any) {}
	}
	if s.names == nil {
		s.names = semaphore.OwnNames{}
	}
	return s, nil
}

// Dir is the lock directory's path.
func (s *Store) Dir() string { return s.path }

// Close closes the lock directory.
func (s *Store) Close() error { return s.dir.Close() }
