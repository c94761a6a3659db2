//go:build unix

package localstore

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The kernel locks inodes, but callers find them by name: whoever can
// rename a key's directory or its files can send the next caller to other
// inodes, next to the holders. So semrun keeps locks only where no one but
// the caller and root can change a name on the way: every directory from
// / to the lock directory, the lock directory, and each key's directory.
// The one exception is a lock directory root shares with a group, whose
// members share its keys (see keyDirFault).

// me is the caller's user, asked once: semrun never changes it, and each
// file a run opens would ask again.
var me = sync.OnceValue(func() uint32 { return uint32(os.Geteuid()) })

// modeOf is st's mode, whatever its width on this system.
func modeOf(st *unix.Stat_t) uint32 { return uint32(st.Mode) }

// writableByOthers: the group or everyone may add, remove and rename entries.
func writableByOthers(mode uint32) bool { return mode&0o022 != 0 }

// sticky: only an entry's owner (and the directory's, and root) may remove
// or rename it.
func sticky(mode uint32) bool { return mode&unix.S_ISVTX != 0 }

// groupShared: new entries get the directory's group, which may write it.
func groupShared(mode uint32) bool { return mode&unix.S_ISGID != 0 && mode&0o020 != 0 }

// maxLinks bounds the symbolic links followed on the way to a lock
// directory, as the kernel's MAXSYMLINKS does.
const maxLinks = 40

// resolveParents resolves dir, the lock directory's parent, to a path
// without symbolic links. Each directory on the way must be root's or the
// caller's, and writable by others only when sticky; each symbolic link
// followed must be root's or the caller's (its directory was checked, so
// no one else can replace it).
func resolveParents(dir string) (string, error) {
	if err := parentFault("/"); err != nil {
		return "", err
	}
	resolved, rest, links := "/", pathParts(dir), 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return "", fmt.Errorf("%s: %w", next, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if st.Uid != 0 && st.Uid != me() {
				return "", &parentError{fmt.Sprintf("%s on its path is a symbolic link of %s, who could point it elsewhere", next, userName(st.Uid))}
			}
			if links++; links > maxLinks {
				return "", fmt.Errorf("%s: %w", next, unix.ELOOP)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			rest = append(pathParts(target), rest...)
			continue
		case unix.S_IFDIR:
		default:
			return "", fmt.Errorf("%s: %w", next, unix.ENOTDIR)
		}
		if err := parentFault(next); err != nil {
			return "", err
		}
		resolved = next
	}
	return resolved, nil
}

func pathParts(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}

// parentFault says why a directory on the way to the lock directory could
// be replaced, or renamed, by someone else.
func parentFault(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	switch {
	case st.Uid != 0 && st.Uid != me():
		return &parentError{fmt.Sprintf("%s on its path is owned by %s, who could replace what is in it", dir, userName(st.Uid))}
	case writableByOthers(modeOf(&st)) && !sticky(modeOf(&st)):
		return &parentError{fmt.Sprintf("%s on its path is writable by others without the sticky bit", dir)}
	}
	return nil
}

// parentError is a directory or link on the way to the lock directory
// that someone else could change.
type parentError struct{ msg string }

func (e *parentError) Error() string { return e.msg }

// lockDirFault says why the lock directory st, shown as shown, cannot be
// used, with the fix; flag names the setting that chooses it.
func lockDirFault(st *unix.Stat_t, shown, flag string) error {
	switch {
	case st.Uid == me() && !(st.Uid == 0 && groupShared(modeOf(st))):
		if writableByOthers(modeOf(st)) && !sticky(modeOf(st)) {
			return fmt.Errorf("lock directory %s: writable by others without the sticky bit (fix: chmod go-w %s)", shown, shown)
		}
		return nil
	case st.Uid == 0 && groupShared(modeOf(st)):
		switch {
		case st.Mode&0o002 != 0:
			return fmt.Errorf("lock directory %s: shared by %s but writable by everyone (fix, as root: chmod o-w %s)", shown, groupName(st.Gid), shown)
		case !sticky(modeOf(st)):
			return fmt.Errorf("lock directory %s: shared by %s without the sticky bit, so any member could move another's keys aside (fix, as root: chmod +t %s)", shown, groupName(st.Gid), shown)
		}
		return nil
	case st.Uid == 0:
		return fmt.Errorf("lock directory %s: root's, and not shared with a group (root can share one: install -d -m 3770 -g GROUP %s; or choose another with %s)", shown, shown, flag)
	}
	return fmt.Errorf("lock directory %s: owned by %s, who could replace its lock files (remove it, or choose another with %s)", shown, userName(st.Uid), flag)
}

// keyDirFault says why a key's directory st cannot be used. In a lock
// directory root shares with a group, a member uses the directories other
// members made, when they are shared the same way: setgid, group-writable
// and sticky, in the lock directory's group. root uses only its own.
func (s *Store) keyDirFault(st *unix.Stat_t, shown string) error {
	if st.Uid == me() {
		return nil // writable by others and not sticky: mended by openKeyDir
	}
	if s.sharedByRoot && me() != 0 && groupShared(modeOf(st)) && sticky(modeOf(st)) && st.Mode&0o002 == 0 && st.Gid == s.gid {
		return nil
	}
	who := "you"
	if s.sharedByRoot && me() != 0 {
		who = "you, root or another member of " + groupName(s.gid) + " (setgid, group-writable and sticky)"
	}
	return fmt.Errorf("key directory %s: owned by %s, not by %s (remove it when no one holds the key, or use another key)", shown, userName(st.Uid), who)
}

// fileFault says why a key's file st cannot be used: it is not a regular
// file, has other names (a hard link could be to any file), or, to be
// written or locked as a permit, belongs to neither the caller nor the key
// directory's owner.
func fileFault(st *unix.Stat_t, shown string, dirOwner uint32, writing bool) error {
	if kind := fileKind(modeOf(st)); kind != "" {
		return &badFileError{msg: fmt.Sprintf("lock file %s: is %s, not a regular file", shown, kind)}
	}
	if st.Nlink != 1 {
		return &badFileError{msg: fmt.Sprintf("lock file %s: has %d links, and semrun uses a lock file only with one (a hard link could be to any file)", shown, st.Nlink)}
	}
	if writing && st.Uid != me() && st.Uid != dirOwner {
		return &badFileError{foreign: true, msg: fmt.Sprintf("lock file %s: owned by %s, not by you or the key directory's owner, %s (remove it when no one holds the key)", shown, userName(st.Uid), userName(dirOwner))}
	}
	return nil
}

// badFileError is a lock file semrun will not use; status skips it, with
// a line naming it.
type badFileError struct {
	msg string
	// foreign: the file is fine but another user's, who could rename it.
	foreign bool
}

func (e *badFileError) Error() string { return e.msg }

// fileKind names what a file that is not regular is; "" for a regular one.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "of an unknown kind"
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return "group " + g.Name
	}
	return "gid " + strconv.Itoa(int(gid))
}
