//go:build unix

package localstore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func dirError(what, shown, full string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK): // EMLINK: FreeBSD's O_NOFOLLOW
		return fmt.Errorf("%s %s: is a symbolic link", what, shown)
	case errors.Is(err, unix.ENOTDIR):
		// O_NOFOLLOW|O_DIRECTORY on a symbolic link to a directory also
		// says ENOTDIR on some systems.
		if fi, lerr := os.Lstat(full); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s %s: is a symbolic link", what, shown)
		}
		return fmt.Errorf("%s %s: is not a directory", what, shown)
	}
	return fmt.Errorf("%s %s: %w", what, shown, err)
}

// checkedDir stats the directory f is open on and has fault judge it.
func checkedDir(f *os.File, shown string, fault func(*unix.Stat_t) error) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("%s: %w", shown, err)
	}
	return &st, fault(&st)
}

// writable checks that the caller may add files to the directory f.
func writable(f *os.File, shown string) error {
	err := unix.Faccessat(int(f.Fd()), ".", unix.W_OK|unix.X_OK, unix.AT_EACCESS)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) { // no AT_EACCESS here
		err = unix.Faccessat(int(f.Fd()), ".", unix.W_OK|unix.X_OK, 0)
	}
	if err != nil {
		return fmt.Errorf("lock directory %s: %w", shown, err)
	}
	return nil
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
	name      string // in the lock directory
	lockDir   int    // the lock directory's descriptor, the store's
	owner     uint32 // the directory's
	dev, ino  uint64 // the directory's, to tell it is still the key's
	groupMode bool   // the lock directory is shared by a group: so are our files
	noEvents  bool   // write no event in its log (Options.NoEvents)
}

// maxPublish bounds the tries to open a key's directory that others keep
// removing (status removes a key's directory unused for long).
const maxPublish = 8

// openKey opens key's directory, making it, with its files, when missing;
// permits is the N of the caller that makes it, 0 for an operator.
func (s *Store) openKey(key string, permits int) (*keyDir, error) {
	name := keyDirName(key)
	for range maxPublish {
		k, err := s.openKeyDir(name)
		if !errors.Is(err, unix.ENOENT) {
			return k, err
		}
		if err := s.publishKey(name, key, permits); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("key directory %s: removed each time it was made", filepath.Join(s.path, name))
}

// openKeyDir opens the key directory name, if it can be trusted. A missing
// one is unix.ENOENT, unwrapped.
func (s *Store) openKeyDir(name string) (*keyDir, error) {
	path := filepath.Join(s.path, name)
	fd, err := s.openDirAt(name)
	if errors.Is(err, unix.ENOENT) {
		return nil, err
	}
	if err != nil {
		return nil, dirError("key directory", path, path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	st, err := checkedDir(dir, path, func(st *unix.Stat_t) error { return s.keyDirFault(st, path) })
	if err != nil {
		dir.Close()
		return nil, err
	}
	if mode := uint32(st.Mode); st.Uid == me() && writableByOthers(mode) && !sticky(mode) {
		// Made by an older semrun: only the sticky bit keeps members from
		// renaming each other's files.
		if err := unix.Fchmod(fd, mode&0o7777|unix.S_ISVTX); err != nil {
			dir.Close()
			return nil, fmt.Errorf("key directory %s: %w", path, err)
		}
	}
	return &keyDir{
		dir: dir, path: path, name: name, lockDir: s.fd(), owner: st.Uid,
		dev: uint64(st.Dev), ino: uint64(st.Ino), groupMode: s.shared, noEvents: s.noEvents,
	}, nil
}

// publishKey makes key's directory with every file its first caller
// needs, under a hidden name, then renames it into place unless another
// caller's came first: so a key's files all belong to whoever made its
// directory, and no caller ever sees it half made.
func (s *Store) publishKey(name, key string, permits int) error {
	tmp := hiddenNew + rand.Text()[:16]
	dirMode, fileMode, making := uint32(0o700), filesMode(s.shared), uint32(0o700)
	if s.shared {
		// Private while it is made, so that no one plants a name in it,
		// but setgid, so that its files get the lock directory's group.
		dirMode, making = 0o3770, 0o2700
	}
	if err := unix.Mkdirat(s.fd(), tmp, making); err != nil {
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	published := false
	defer func() {
		if !published {
			s.removeHidden(tmp)
		}
	}()
	// Past the umask, by name: no one else can replace what the caller
	// just made in a lock directory checked.
	if err := unix.Fchmodat(s.fd(), tmp, making, 0); err != nil {
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	fd, err := s.openDirAt(tmp)
	if err != nil {
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	dir := os.NewFile(uintptr(fd), filepath.Join(s.path, tmp))
	defer dir.Close()
	files := []string{grantFile, queueFile, tokenFile, capacityFile, statsFile, eventsFile}
	if strings.HasPrefix(name, "#") {
		files = append(files, keyFile) // a hashed name does not say its key
	}
	for _, file := range append(files, permitFiles(max(permits, 1))...) {
		f, err := createFile(fd, file, dir.Name(), fileMode)
		if err != nil {
			return err
		}
		switch file {
		case keyFile:
			_, err = f.WriteString(key)
		case capacityFile:
			if permits > 0 { // an operator's: no caller has asked yet
				_, err = fmt.Fprintf(f, "%d\n", permits)
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", f.Name(), err)
		}
	}
	if err := makeFence(fd); err != nil {
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	if err := unix.Fchmod(fd, dirMode); err != nil {
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	switch err := renameNoReplace(s.fd(), tmp, name); {
	case err == nil:
		published = true
	case !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENOTEMPTY):
		return fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	return nil
}

// Hidden names in the lock directory: key directories being made, and
// being removed. No key's directory starts with a dot (keyDirName).
const (
	hiddenNew  = ".new-"
	hiddenGone = ".gone-"
)

// createFile creates name in the directory dirfd, exclusively, never
// through a symbolic link, with mode whatever the umask.
func createFile(dirfd int, name, dir string, mode uint32) (*os.File, error) {
	fd, err := createFd(dirfd, name, dir, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, name)), nil
}

// createFd is createFile, as a bare descriptor.
func createFd(dirfd int, name, dir string, mode uint32) (int, error) {
	shown := filepath.Join(dir, name)
	fd, err := unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, fileError(shown, err)
	}
	// The caller's own, just made: its mode may be set.
	if err := unix.Fchmod(fd, mode); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("lock file %s: %w", shown, err)
	}
	return fd, nil
}

func fileError(shown string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) { // EMLINK: FreeBSD's O_NOFOLLOW
		return fmt.Errorf("lock file %s: is a symbolic link", shown)
	}
	return fmt.Errorf("lock file %s: %w", shown, err)
}

// openDirAt opens the directory name of the lock directory, never through
// a symbolic link.
func (s *Store) openDirAt(name string) (int, error) {
	return unix.Openat(s.fd(), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// current tells whether k is still the directory of its key: one removed
// (see removeUnused) or replaced since it was opened is errKeyMoved.
func (k *keyDir) current() error {
	var st unix.Stat_t
	if err := unix.Fstatat(k.lockDir, k.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil ||
		uint64(st.Dev) != k.dev || uint64(st.Ino) != k.ino {
		return errKeyMoved
	}
	return nil
}

// errKeyMoved: the key's directory was removed or replaced while the
// caller had it open; the caller starts again with the one in place.
var errKeyMoved = errors.New("key directory replaced")

func (k *keyDir) close() { k.dir.Close() }

// with is k through dir, another descriptor of its directory, which it
// then owns.
func (k *keyDir) with(dir *os.File) *keyDir {
	c := *k
	c.dir = dir
	return &c
}

// fileMode is the mode of the files the caller makes in k.
func (k *keyDir) fileMode() uint32 { return filesMode(k.groupMode) }

// filesMode is the mode of a key's files: the owner's, and the group's in
// a lock directory a group shares.
func filesMode(shared bool) uint32 {
	if shared {
		return 0o660
	}
	return 0o600
}

// open opens one of the key's files, creating it when flag has os.O_CREATE
// and it is missing. It never follows a symbolic link, never truncates,
// never blocks on a FIFO, and uses only a regular file with one link that,
// to be written, is the caller's or the directory owner's (fileFault).
func (k *keyDir) open(name string, flag int) (*os.File, error) {
	return k.openFile(name, flag, false)
}

// openFile is open; with anyOwner, a file to be written may be anyone's
// the kernel lets the caller write: a hold's record (hold.go), which
// holds no lock, is written by whichever member ends the hold.
func (k *keyDir) openFile(name string, flag int, anyOwner bool) (*os.File, error) {
	shown := filepath.Join(k.path, name)
	fd, err := k.openFd(name, flag, anyOwner, nil)
	if err != nil {
		return nil, err
	}
	// Blocking again: a regular file gains nothing from the runtime's
	// poller. F_SETFL 0 clears O_NONBLOCK, the only flag it may change here,
	// without first reading them (SetNonblock's F_GETFL).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s: %w", shown, err)
	}
	return os.NewFile(uintptr(fd), shown), nil
}

// openFd is openFile as a bare descriptor, left non-blocking (which a
// regular file ignores), for the files every grant and release writes
// (eventlog.go): an os.File costs two fcntl calls more. When st is set,
// it is what fstat says of the file.
func (k *keyDir) openFd(name string, flag int, anyOwner bool, st *unix.Stat_t) (int, error) {
	shown := filepath.Join(k.path, name)
	if st == nil {
		st = new(unix.Stat_t)
	}
	create := flag&os.O_CREATE != 0
	flag &^= os.O_CREATE | os.O_EXCL | os.O_TRUNC
	// Non-blocking, so that a FIFO planted here cannot hang the open. The
	// file is opened as it is first, since it almost always is there: one
	// system call fewer for each file of every run than creating it first.
	fd, err := unix.Openat(int(k.dir.Fd()), name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = createFd(int(k.dir.Fd()), name, k.path, k.fileMode())
		if !errors.Is(err, unix.EEXIST) {
			if err == nil && unix.Fstat(fd, st) != nil {
				*st = unix.Stat_t{} // just made: empty
			}
			return fd, err
		}
		// Made by another caller meanwhile: opened as it is, checked below.
		fd, err = unix.Openat(int(k.dir.Fd()), name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return -1, fileError(shown, err)
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("lock file %s: %w", shown, err)
	}
	if err := fileFault(st, shown, k.owner, !anyOwner && flag&(os.O_WRONLY|os.O_RDWR) != 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// openLock opens one of the key's files read-only, to be locked: the
// lock is what matters, and a child given the descriptor gets no way to
// write the file. A missing file is made when create is set. Like open,
// it uses only a regular file with one link, and, since whoever owns a
// file can rename it from under the locks on it, only one that is the
// caller's or the directory owner's.
func (k *keyDir) openLock(name string, create bool) (*os.File, error) {
	shown := filepath.Join(k.path, name)
	fd, err := unix.Openat(int(k.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) && create {
		f, cerr := createFile(int(k.dir.Fd()), name, k.path, k.fileMode())
		if cerr != nil && !errors.Is(cerr, unix.EEXIST) {
			return nil, cerr
		}
		if f != nil {
			f.Close()
		}
		fd, err = unix.Openat(int(k.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	}
	if err != nil {
		return nil, fileError(shown, err)
	}
	f := os.NewFile(uintptr(fd), shown)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock file %s: %w", shown, err)
	}
	if err := fileFault(&st, shown, k.owner, true); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock file %s: %w", shown, err)
	}
	return f, nil
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
