//go:build unix

package localstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// A key's directory holds one file a role. The permits are locks in
// "seats" on Linux, files "seat.0" to "seat.N-1" elsewhere (permits_*.go);
// holders and waiters each have a file of their own, "held.*" and
// "wait.*", locked while they hold or wait, that says who they are; a
// hold has a record, "hold.*", that outlives it by a day (hold.go); a
// permit cooling, one that says until when, "cool.*" (cool.go); what
// happened to the key is "events" and "stats" (eventlog.go).
const (
	grantFile    = "grant"    // held while permits are counted or taken: 0.1ms with 20 holders, 0.3ms with 200
	queueFile    = "queue"    // held by the first waiter in line while it waits for a permit
	tokenFile    = "token"    // the last fencing token handed out
	capacityFile = "capacity" // the N the last caller asked for
	heldPrefix   = "held."
	// seat.* are the permits here but on Linux, where, made by an older
	// semrun, they are what the fence keeps it from (permits_linux.go).
	permitFilePrefix = "seat."
	waitPrefix       = "wait."
)

// How long a waiter at the head of the line sleeps without a wake-up from
// the kernel before it looks at the permits again anyway. Followups cover
// the instant between a dying holder's close event and the kernel
// dropping its lock; the slow re-check covers a missed event.
const (
	firstFollowup = 2 * time.Millisecond
	slowRecheck   = 2 * time.Second
)

// errPermitsGone: a key's permits file is missing while someone holds it.
var errPermitsGone = errors.New("its seats file is gone while the key is held (removed from under its holders?); no grant until they are gone, lest more than N hold it")

// Options configure a local store.
type Options struct {
	// Dir is the lock directory; created (mode 0700) when missing,
	// provided its parent exists.
	Dir string
	// Warnf, when set, receives warnings (callers asking different
	// capacities, files status skips).
	Warnf func(format string, args ...any)
	// Names name the settings in messages; semaphore.OwnNames when nil.
	Names semaphore.Names
	// NoEvents: write nothing in the keys' event logs (eventlog.go),
	// for a caller that wants no file to grow with its runs; the keys'
	// counters are still kept.
	NoEvents bool
}

// Store is a semaphore.Store whose permits are kernel file locks in a
// lock directory on this host (permits_linux.go, permits_other.go), so
// the kernel frees a permit the moment its holder is gone and no lease is
// needed.
type Store struct {
	dir   *os.File // the lock directory, opened without following a symlink
	path  string
	warnf func(format string, args ...any)
	names semaphore.Names
	// shared: the lock directory is shared by a group (setgid,
	// group-writable), and so are the keys this store makes in it.
	shared bool
	// sharedByRoot: root owns the shared lock directory, whose members use
	// each other's keys (see keyDirFault).
	sharedByRoot bool
	gid          uint32 // the lock directory's group
	noEvents     bool   // Options.NoEvents

	// attached counts this store's leases attached to each hold (see
	// holdID), which EndHold need not wait for.
	mu       sync.Mutex
	attached map[string]int
}

var _ semaphore.Store = (*Store)(nil)

// DefaultDir is the lock directory used when none is given. It depends
// only on the user and the host, never on the environment, so that a
// user's cron jobs and shells always meet in the same place: root's is
// SystemDir; another user's is SystemDir when root shares it with a group
// this user may write as, else a directory of the user's own beside it,
// "semrun-UID" in /run/lock (or in /tmp where there is no /run/lock).
func DefaultDir() string {
	uid := os.Geteuid()
	if uid == 0 {
		return SystemDir
	}
	var st unix.Stat_t
	if unix.Lstat(SystemDir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 &&
		groupShared(modeOf(&st)) && unix.Access(SystemDir, unix.W_OK|unix.X_OK) == nil {
		return SystemDir
	}
	parent := filepath.Dir(SystemDir)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = "/tmp"
	}
	return filepath.Join(parent, "semrun-"+strconv.Itoa(uid))
}

// New opens the lock directory o.Dir, creating it when missing. A
// directory someone else could tamper with is refused (see trust.go).
func New(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, &semaphore.SettingError{Setting: DirSetting, Err: errors.New("must not be empty")}
	}
	s := &Store{path: filepath.Clean(o.Dir), warnf: o.Warnf, names: o.Names, noEvents: o.NoEvents}
	if s.warnf == nil {
		s.warnf = func(string, ...any) {}
	}
	if s.names == nil {
		s.names = semaphore.OwnNames{}
	}
	dir, st, err := openLockDir(s.path, s.names.Name(DirSetting))
	if err != nil {
		return nil, err
	}
	s.dir, s.gid = dir, st.Gid
	s.shared = groupShared(modeOf(st))
	s.sharedByRoot = s.shared && st.Uid == 0
	return s, nil
}

// openLockDir opens the lock directory path, creating it when missing,
// after checking every directory on the way (resolveParents). Its owner is
// checked on the descriptor opened, never by name.
func openLockDir(path, flag string) (*os.File, *unix.Stat_t, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("lock directory %s: %w", path, err)
	}
	parent, err := resolveParents(filepath.Dir(abs))
	var fault *parentError
	switch {
	case errors.As(err, &fault):
		return nil, nil, fmt.Errorf("lock directory %s: %w (choose one elsewhere with %s)", path, err, flag)
	case err != nil:
		return nil, nil, fmt.Errorf("lock directory %s: %w", path, unwrapPath(err))
	}
	full := filepath.Join(parent, filepath.Base(abs))
	if unix.Mkdir(full, 0o700) == nil {
		// Past the umask, by name: in a parent checked, no one else can
		// replace what the caller just made.
		_ = unix.Chmod(full, 0o700)
	}
	fd, err := unix.Open(full, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, dirError("lock directory", path, full, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	st, err := checkedDir(dir, path, func(st *unix.Stat_t) error { return lockDirFault(st, path, flag) })
	if err != nil {
		dir.Close()
		return nil, nil, err
	}
	if err := writable(dir, path); err != nil {
		dir.Close()
		return nil, nil, err
	}
	return dir, st, nil
}

// Dir is the lock directory's path.
func (s *Store) Dir() string { return s.path }

// String says where the store keeps its permits.
func (s *Store) String() string { return "the lock directory " + s.path }

// Close closes the lock directory.
func (s *Store) Close() error { return s.dir.Close() }

func (s *Store) fd() int { return int(s.dir.Fd()) }

// entries lists the lock directory, through a descriptor of its own
// (reopenDir).
func (s *Store) entries() ([]os.DirEntry, error) {
	d, err := reopenDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, unwrapPath(err))
	}
	return entries, nil
}
