//go:build unix && !linux

package localstore

import "golang.org/x/sys/unix"

// renameNoReplace renames the directory from to to in the directory
// dirfd. rename(2) fails on a directory with entries, which every key's
// has, so it never replaces another caller's.
func renameNoReplace(dirfd int, from, to string) error {
	return unix.Renameat(dirfd, from, dirfd, to)
}
