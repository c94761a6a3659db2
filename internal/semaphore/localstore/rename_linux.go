package localstore

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to in the directory dirfd, failing with
// EEXIST when to exists.
func renameNoReplace(dirfd int, from, to string) error {
	err := unix.Renameat2(dirfd, from, dirfd, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE: rename(2) itself fails
		// on a directory with entries, which every key's has.
		return unix.Renameat(dirfd, from, dirfd, to)
	}
	return err
}
