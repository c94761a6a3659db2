//go:build unix

package semaphore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/clock"
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

// Local is a Store whose permits are kernel file locks in a lock directory
// on this host: seat i of a key is an exclusive flock(2) on its file, so the
// kernel frees a seat the moment its holder is gone and no lease is needed.
type Local struct {
	dir   *os.File // the lock directory, opened without following a symlink
	path  string
	warnf func(format string, args ...any)
}

// DefaultLockDir is the lock directory used when none is given. It depends
// only on the user and the host, never on the environment, so that a
// user's cron jobs and shells always meet in the same place: root's is
// SystemLockDir; another user's is SystemLockDir when root made it and this
// user may write it (set up to be shared), else a directory of the user's
// own beside it, "semrun-UID" in /run/lock (or in /tmp where there is no
// /run/lock).
func DefaultLockDir() string {
	uid := os.Geteuid()
	if uid == 0 {
		return SystemLockDir
	}
	var st unix.Stat_t
	if unix.Lstat(SystemLockDir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == 0 &&
		unix.Access(SystemLockDir, unix.W_OK|unix.X_OK) == nil {
		return SystemLockDir
	}
	parent := filepath.Dir(SystemLockDir)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = "/tmp"
	}
	return filepath.Join(parent, "semrun-"+strconv.Itoa(uid))
}

// NewLocal opens the lock directory o.Dir, creating it when missing. A
// directory someone else could tamper with is refused (see checkDir).
func NewLocal(o LocalOptions) (*Local, error) {
	if o.Dir == "" {
		return nil, errors.New("no lock directory")
	}
	path := filepath.Clean(o.Dir)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("lock directory %s: %w", path, unwrapPath(err))
	}
	dir, err := openDir(unix.AT_FDCWD, path, path)
	if err != nil {
		return nil, err
	}
	warnf := o.Warnf
	if warnf == nil {
		warnf = func(string, ...any) {}
	}
	return &Local{dir: dir, path: path, warnf: warnf}, nil
}

// Dir is the lock directory's path.
func (s *Local) Dir() string { return s.path }

// Close closes the lock directory.
func (s *Local) Close() error { return s.dir.Close() }

// openDir opens name, relative to the directory at, as a directory, never
// through a symbolic link, and checks that it is safe to keep locks in.
func openDir(at int, name, shown string) (*os.File, error) {
	fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dirError(shown, err)
	}
	f := os.NewFile(uintptr(fd), shown)
	if err := checkDir(f, shown); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func dirError(shown string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("lock directory %s: is a symbolic link", shown)
	case errors.Is(err, unix.ENOTDIR):
		// O_NOFOLLOW|O_DIRECTORY on a symbolic link to a directory also
		// says ENOTDIR on some systems.
		if fi, lerr := os.Lstat(shown); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("lock directory %s: is a symbolic link", shown)
		}
		return fmt.Errorf("lock directory %s: is not a directory", shown)
	}
	return fmt.Errorf("lock directory %s: %w", shown, err)
}

// checkDir refuses a directory in which someone else could replace the
// lock files: a directory trusted must be this user's or root's, or one a
// group shares on purpose (setgid and group-writable); one anyone may write
// must have the sticky bit; and this user must be able to write it.
func checkDir(f *os.File, shown string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("lock directory %s: %w", shown, err)
	}
	me := uint32(os.Geteuid())
	ours := st.Uid == me || st.Uid == 0
	groupShared := st.Mode&unix.S_ISGID != 0 && st.Mode&0o020 != 0
	switch {
	case st.Mode&0o002 != 0 && !ours:
		return fmt.Errorf("lock directory %s: owned by %s and writable by others", shown, userName(st.Uid))
	case st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0:
		return fmt.Errorf("lock directory %s: writable by others without the sticky bit", shown)
	case !ours && !groupShared:
		return fmt.Errorf("lock directory %s: owned by %s, who could replace its lock files (share one between users with a setgid, group-writable directory)", shown, userName(st.Uid))
	}
	if err := unix.Faccessat(int(f.Fd()), ".", unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // no AT_EACCESS here
			err = unix.Faccessat(int(f.Fd()), ".", unix.W_OK|unix.X_OK, 0)
		}
		if err != nil {
			return fmt.Errorf("lock directory %s: %w", shown, err)
		}
	}
	return nil
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(int(uid))
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// keyDirName names a key's directory: the key with every byte but
// [A-Za-z0-9_-] and inner dots escaped as %XX, so that no key can name
// another path; a name too long for a file system becomes "#" and a hash.
func keyDirName(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	if b.Len() > 240 {
		sum := sha256.Sum256([]byte(key))
		return "#" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// keyFromDirName inverts keyDirName; ok is false for hashed and foreign names.
func keyFromDirName(name string) (string, bool) {
	if name == "" || name[0] == '#' || name[0] == '.' {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b.WriteByte(name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		n, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	key := b.String()
	return key, keyDirName(key) == name
}

// keyDir is one key's directory, open.
type keyDir struct {
	dir       *os.File
	path      string
	groupMode bool // the lock directory is shared by a group: so are our files
}

// openKey opens key's directory, creating it when missing.
func (s *Local) openKey(key string) (*keyDir, error) {
	name := keyDirName(key)
	path := filepath.Join(s.path, name)
	var st unix.Stat_t
	if err := unix.Fstat(int(s.dir.Fd()), &st); err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	// A lock directory that hands its group to new entries (setgid) and
	// lets the group write is shared by that group on purpose; anywhere
	// else only this user needs to get in.
	group := st.Mode&unix.S_ISGID != 0 && st.Mode&0o020 != 0
	mode := uint32(0o700)
	if group {
		mode = 0o2770
	}
	created := false
	if err := unix.Mkdirat(int(s.dir.Fd()), name, mode); err == nil {
		created = true
	} else if !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("lock directory %s: %w", path, err)
	}
	dir, err := openDir(int(s.dir.Fd()), name, path)
	if err != nil {
		return nil, err
	}
	if created {
		// Past the umask; through the descriptor, so never through a
		// symbolic link swapped in since the mkdir.
		_ = unix.Fchmod(int(dir.Fd()), mode)
	}
	k := &keyDir{dir: dir, path: path, groupMode: group}
	if created && strings.HasPrefix(name, "#") {
		// A hashed name does not say its key: status reads it here.
		if f, err := k.open(keyFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC); err == nil {
			_, _ = f.WriteString(key)
			f.Close()
		}
	}
	return k, nil
}

func (k *keyDir) close() { k.dir.Close() }

// open opens or creates one of the key's files, never through a symbolic
// link, readable and writable by its owner (and group, in a group-shared
// directory) only.
func (k *keyDir) open(name string, flag int) (*os.File, error) {
	mode := uint32(0o600)
	if k.groupMode {
		mode = 0o660
	}
	// Non-blocking, so that a FIFO planted here cannot hang the open.
	fd, err := unix.Openat(int(k.dir.Fd()), name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, mode)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("lock file %s: is a symbolic link", filepath.Join(k.path, name))
		}
		return nil, fmt.Errorf("lock file %s: %w", filepath.Join(k.path, name), err)
	}
	shown := filepath.Join(k.path, name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s: %w", shown, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s: is not a regular file", shown)
	}
	if st.Uid == uint32(os.Geteuid()) && uint32(st.Mode)&0o7777 != mode && flag&os.O_CREATE != 0 {
		_ = unix.Fchmod(fd, mode) // past the umask
	}
	// Blocking again: a regular file gains nothing from the runtime's poller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s: %w", shown, err)
	}
	return os.NewFile(uintptr(fd), shown), nil
}

// flock applies how (unix.LOCK_*) to f. It reports false, without error,
// when LOCK_NB was asked and the lock is held elsewhere.
func flock(f *os.File, how int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lockErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lockErr = unix.Flock(int(fd), how)
			if !errors.Is(lockErr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if errors.Is(lockErr, unix.EWOULDBLOCK) {
		return false, nil
	}
	if lockErr != nil {
		return false, fmt.Errorf("lock %s: %w", f.Name(), lockErr)
	}
	return true, nil
}

// lockWait takes an exclusive lock on f, waiting in the kernel, which wakes
// the waiter when the lock is dropped. It gives up when ctx ends, and then
// owns f: it closes f, dropping a lock obtained after that at once.
func lockWait(ctx context.Context, f *os.File) error {
	if ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB); ok || err != nil {
		return err // the usual case, without a goroutine
	}
	got := make(chan error, 1)
	go func() {
		_, err := flock(f, unix.LOCK_EX)
		got <- err
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		go func() {
			if <-got == nil {
				_, _ = flock(f, unix.LOCK_UN)
			}
			f.Close()
		}()
		return ctx.Err()
	}
}

// record is what a seat's or a waiter's file says about who holds or waits.
type record struct {
	HolderInfo
	Permits int   `json:"permits"`
	Weight  int   `json:"weight,omitempty"`
	Token   int64 `json:"token,omitempty"`
	SinceMS int64 `json:"since_ms"`
}

func (r record) write(f *os.File) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
}

func readRecord(f *os.File) (record, error) {
	var r record
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 64<<10))
	if err != nil {
		return r, err
	}
	if len(b) == 0 {
		return r, io.EOF // taken an instant ago, or by an older semrun
	}
	return r, json.Unmarshal(b, &r)
}

// Acquire implements Store. The first waiter in line holds the key's queue
// lock and is woken by inotify when a seat's file is closed or released;
// the waiters behind it sleep in the kernel on the queue lock.
func (s *Local) Acquire(ctx context.Context, req Request) (Lease, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	k, err := s.openKey(req.Key)
	if err != nil {
		return nil, err
	}
	defer k.close()
	a := &attempt{s: s, k: k, req: req, seats: map[int]*os.File{}}
	defer a.closeSeats()
	queue, err := k.open(queueFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	inLine := false // the queue lock is this caller's
	defer func() {
		if inLine {
			_, _ = flock(queue, unix.LOCK_UN)
		}
		if queue != nil {
			queue.Close()
		}
	}()

	// Nobody in line: take a free seat now, or be first in line.
	lease, held, err := a.try(ctx, func() (bool, error) {
		ok, err := flock(queue, unix.LOCK_EX|unix.LOCK_NB)
		inLine = ok
		return ok, err
	})
	if lease != nil || err != nil {
		return lease, err
	}
	if req.NoWait {
		return nil, fmt.Errorf("key %q: %d of %d permits held: %w", req.Key, held, req.Permits, ErrBusy)
	}
	firstInLine := inLine
	if req.OnWait != nil {
		st := WaitState{Held: held, Capacity: req.Permits}
		if inLine {
			st.Position = 1
		}
		req.OnWait(st)
	}
	stopWaiting, err := a.register()
	if err != nil {
		return nil, err
	}
	defer stopWaiting()
	if !inLine {
		if err := lockWait(ctx, queue); err != nil {
			queue = nil // lockWait closes it
			return nil, fmt.Errorf("wait for key %q: %w", req.Key, err)
		}
		inLine = true
	}

	// First in line: wait for a seat. The watch starts before the seats are
	// looked at, so no release between the two goes unnoticed.
	if req.OnWait != nil && !firstInLine {
		req.OnWait(WaitState{Held: held, Capacity: req.Permits, Position: 1})
	}
	w := watchSeats(k)
	// Dropping the last inotify watch of a directory makes the kernel wait
	// for a grace period (10ms and more measured): not before the child.
	defer func() { go w.close() }()
	recheck := slowRecheck
	for {
		lease, _, err := a.try(ctx, nil)
		if lease != nil || err != nil {
			return lease, err
		}
		woken, err := w.wait(ctx, recheck)
		if err != nil {
			return nil, fmt.Errorf("wait for key %q: %w", req.Key, err)
		}
		switch {
		case woken:
			recheck = firstFollowup
		case recheck < slowRecheck:
			recheck = min(recheck*4, slowRecheck)
		}
	}
}

// attempt is one caller's try for a seat of a key.
type attempt struct {
	s     *Local
	k     *keyDir
	req   Request
	grant *os.File
	seats map[int]*os.File // seat files looked at, kept open while waiting
	told  bool             // the capacity was checked
}

// try takes the key's grant lock and, when gate (if any) lets it, a free
// seat. It returns the lease, or nil and how many seats are held.
func (a *attempt) try(ctx context.Context, gate func() (bool, error)) (Lease, int, error) {
	if a.grant == nil {
		f, err := a.k.open(grantFile, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return nil, 0, err
		}
		a.grant = f
	}
	// Held for microseconds, unless its holder was stopped there: the
	// wait for it can be given up.
	if err := lockWait(ctx, a.grant); err != nil {
		if ctx.Err() != nil {
			a.grant = nil // lockWait closes it
			return nil, 0, fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
		return nil, 0, err
	}
	defer func() { _, _ = flock(a.grant, unix.LOCK_UN) }()
	if !a.told {
		a.told = true
		a.checkCapacity()
	}
	if gate != nil {
		ok, err := gate()
		if err != nil || !ok {
			// Someone is in line: every seat was held when it last looked.
			return nil, a.req.Permits, err
		}
	}
	// A weight of K takes K seats at once, or none.
	held, weight := 0, a.req.weight()
	var taken []int
	unlockTaken := func() {
		for _, i := range taken {
			_, _ = flock(a.seats[i], unix.LOCK_UN)
		}
	}
	for i := 0; i < a.req.Permits && len(taken) < weight; i++ {
		f := a.seats[i]
		if f == nil {
			var err error
			if f, err = a.k.open(seatPrefix+strconv.Itoa(i), os.O_RDWR|os.O_CREATE); err != nil {
				unlockTaken()
				return nil, held, err
			}
			a.seats[i] = f
		}
		ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			unlockTaken()
			return nil, held, err
		}
		if !ok {
			held++
			continue
		}
		taken = append(taken, i)
	}
	if len(taken) < weight {
		unlockTaken()
		return nil, held, nil
	}
	token, err := a.nextToken()
	if err != nil {
		unlockTaken()
		return nil, held, err
	}
	keyDir, err := unix.FcntlInt(a.k.dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unlockTaken()
		return nil, held, fmt.Errorf("lock directory %s: %w", a.k.path, err)
	}
	l := &localLease{keyDir: keyDir, token: token}
	rec := record{HolderInfo: a.req.Holder, Permits: a.req.Permits, Weight: weight, Token: token, SinceMS: time.Now().UnixMilli()}
	for _, i := range taken {
		// The record is for status only: a seat is held by its lock.
		_ = rec.write(a.seats[i])
		l.seats = append(l.seats, a.seats[i])
		l.names = append(l.names, seatPrefix+strconv.Itoa(i))
		delete(a.seats, i)
	}
	return l, held, nil
}

// nextToken hands out the key's next fencing token; the grant lock is held.
// Seeding from the clock keeps tokens rising after the lock directory is
// emptied, as /run is at boot.
func (a *attempt) nextToken() (int64, error) {
	f, err := a.k.open(tokenFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	last, _ := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	token := max(last+1, time.Now().UnixMicro())
	if _, err := f.WriteAt(fmt.Appendf(nil, "%020d\n", token), 0); err != nil {
		return 0, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return token, nil
}

// checkCapacity records the N this call asks for, and warns when the last
// caller asked for another; the grant lock is held.
func (a *attempt) checkCapacity() {
	f, err := a.k.open(capacityFile, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	previous, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err == nil && previous == a.req.Permits {
		return
	}
	if err == nil {
		a.s.warnf("key %q: this call asks for %d permits, the previous caller asked for %d", a.req.Key, a.req.Permits, previous)
	}
	b := fmt.Appendf(nil, "%d\n", a.req.Permits)
	if _, err := f.WriteAt(b, 0); err == nil {
		_ = f.Truncate(int64(len(b)))
	}
}

// register leaves a locked file in the key's directory while the caller
// waits, so that status can count and show waiters. It also removes the
// files of waiters that are gone.
func (a *attempt) register() (func(), error) {
	a.removeStaleWaiters()
	var name string
	var f *os.File
	for f == nil {
		name = waitPrefix + rand.Text()[:16]
		var err error
		if f, err = a.k.open(name, os.O_RDWR|os.O_CREATE|os.O_EXCL); err != nil {
			return nil, err
		}
		if _, err := flock(f, unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		// Between the create and the lock, another waiter may have taken
		// the file for a dead waiter's and removed it: start again.
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink == 0 {
			f.Close()
			f = nil
		}
	}
	_ = record{HolderInfo: a.req.Holder, Permits: a.req.Permits, Weight: a.req.weight(), SinceMS: time.Now().UnixMilli()}.write(f)
	return func() {
		_ = unix.Unlinkat(int(a.k.dir.Fd()), name, 0)
		f.Close()
	}, nil
}

func (a *attempt) removeStaleWaiters() {
	for _, name := range a.k.names(waitPrefix) {
		f, err := a.k.open(name, os.O_RDONLY)
		if err != nil {
			continue
		}
		// Removed only under its lock: a waiter locks its file before it
		// checks that the file is still there.
		if free, _ := flock(f, unix.LOCK_EX|unix.LOCK_NB); free {
			_ = unix.Unlinkat(int(a.k.dir.Fd()), name, 0)
		}
		f.Close()
	}
}

func (a *attempt) closeSeats() {
	for _, f := range a.seats {
		f.Close()
	}
	if a.grant != nil {
		a.grant.Close()
	}
}

// names lists the key's files whose names start with prefix.
func (k *keyDir) names(prefix string) []string {
	d, err := reopenDir(k.dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	all, _ := d.Readdirnames(-1)
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// reopenDir opens the directory dir is open on anew, for listing without
// moving the offset of the descriptor that names files, and without
// going through its path again.
func reopenDir(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir.Name()), nil
}

// localLease is a held permit: exclusive flocks on its seats' files.
type localLease struct {
	seats  []*os.File
	names  []string
	keyDir int // the key's directory, to ring the waiters on release
	token  int64

	once     sync.Once
	released atomic.Bool
	err      error
}

func (l *localLease) Token() int64 { return l.token }

// Deadline is zero: the kernel holds the lock for as long as the holder lives.
func (l *localLease) Deadline() clock.Instant { return clock.Instant{} }

// Renew has nothing to renew: the permit holds until it is released.
func (l *localLease) Renew(context.Context) error {
	if l.released.Load() {
		return fmt.Errorf("renew: released: %w", ErrLost)
	}
	return nil
}

// Files are the seats' files: with them, a child keeps the seats held until
// the last process of its job has exited, even when semrun is killed.
func (l *localLease) Files() []*os.File { return l.seats }

func (l *localLease) Release(context.Context) error {
	l.once.Do(func() {
		l.released.Store(true)
		var errs []error
		for i, seat := range l.seats {
			// The record is cleared before the lock is dropped, never
			// after, when it could be the next holder's.
			_ = seat.Truncate(0)
			_, err := flock(seat, unix.LOCK_UN)
			// The close alone may not wake the first waiter in line:
			// processes the child left may still have the file open.
			ring(l.keyDir, l.names[i])
			errs = append(errs, err, seat.Close())
		}
		l.err = errors.Join(append(errs, unix.Close(l.keyDir))...)
	})
	return l.err
}

// Status implements Store. With no keys, it reports on every key that has
// a directory in the lock directory.
func (s *Local) Status(ctx context.Context, keys []string) ([]KeyStatus, error) {
	all := len(keys) == 0
	if all {
		var err error
		if keys, err = s.keys(); err != nil {
			return nil, err
		}
	}
	out := make([]KeyStatus, 0, len(keys))
	for _, key := range keys {
		st, err := s.status(ctx, key)
		if all && errors.Is(err, os.ErrPermission) {
			continue // another user's private key
		}
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// keys lists the keys that have a directory, in order.
func (s *Local) keys() ([]string, error) {
	d, err := reopenDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, unwrapPath(err))
	}
	var keys []string
	for _, e := range entries {
		if !e.IsDir() {
			continue // not a key's: no symbolic link, no stray file
		}
		name := e.Name()
		if key, ok := keyFromDirName(name); ok {
			keys = append(keys, key)
		} else if strings.HasPrefix(name, "#") {
			if key, err := s.readKeyFile(name); err == nil && keyDirName(key) == name {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// keyFile names the file in which a hashed key directory keeps its key.
const keyFile = "key"

func (s *Local) readKeyFile(name string) (string, error) {
	fd, err := unix.Openat(int(s.dir.Fd()), name+"/"+keyFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), keyFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyLen+1))
	return string(b), err
}

func (s *Local) status(ctx context.Context, key string) (KeyStatus, error) {
	st := KeyStatus{Key: key, Holders: []Holder{}, Waiters: []Waiter{}}
	dir, err := openDir(int(s.dir.Fd()), keyDirName(key), filepath.Join(s.path, keyDirName(key)))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return st, nil // never used
		}
		return st, err
	}
	k := &keyDir{dir: dir, path: dir.Name()}
	defer k.close()
	// Looking at the seats under the grant lock keeps a probe of a free
	// seat from making someone taking it think it held.
	grant, err := k.open(grantFile, os.O_RDONLY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return st, nil
		}
		return st, err
	}
	defer func() {
		if grant != nil {
			grant.Close()
		}
	}()
	if err := lockWait(ctx, grant); err != nil {
		if ctx.Err() != nil {
			grant = nil // lockWait closes it
		}
		return st, err
	}
	if b, err := k.readSmall(capacityFile); err == nil {
		st.Capacity, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	now := time.Now()
	// A holder of weight K has a record in each of its K seats.
	seen := map[int64]bool{}
	for _, r := range k.lockedRecords(seatPrefix) {
		st.Held++
		if seen[r.Token] {
			continue
		}
		seen[r.Token] = true
		st.Holders = append(st.Holders, Holder{
			HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: max(r.Weight, 1), Token: r.Token,
			Age: now.Sub(time.UnixMilli(r.SinceMS)),
		})
	}
	_, _ = flock(grant, unix.LOCK_UN)
	for _, r := range k.lockedRecords(waitPrefix) {
		st.Waiters = append(st.Waiters, Waiter{HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: max(r.Weight, 1), Waited: now.Sub(time.UnixMilli(r.SinceMS))})
	}
	slices.SortStableFunc(st.Holders, func(a, b Holder) int { return int(b.Age - a.Age) })
	slices.SortStableFunc(st.Waiters, func(a, b Waiter) int { return int(b.Waited - a.Waited) })
	return st, nil
}

// lockedRecords reads the records of the files named prefix* that someone
// holds locked: live holders or waiters.
func (k *keyDir) lockedRecords(prefix string) []record {
	var out []record
	for _, name := range k.names(prefix) {
		f, err := k.open(name, os.O_RDONLY)
		if err != nil {
			continue
		}
		free, err := flock(f, unix.LOCK_SH|unix.LOCK_NB)
		if err == nil && !free {
			// No record: taken or given back this instant.
			if r, err := readRecord(f); err == nil {
				out = append(out, r)
			}
		}
		f.Close()
	}
	return out
}

func (k *keyDir) readSmall(name string) ([]byte, error) {
	f, err := k.open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 64))
}
