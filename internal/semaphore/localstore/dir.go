//go:build unix

package localstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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
func (s *Store) openKey(key string) (*keyDir, error) {
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
