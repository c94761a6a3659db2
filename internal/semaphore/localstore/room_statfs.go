//go:build linux || darwin || freebsd || dragonfly

package localstore

import "golang.org/x/sys/unix"

// roomLeft tells whether n bytes more leave the file system of the file
// fd a quarter of its room free, or roomKept: see eventlog.go. Unknown
// is yes: a log is bounded all the same.
func roomLeft(fd int, n int64) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil || fs.Blocks == 0 {
		return true
	}
	size := int64(fs.Bsize)
	kept := min(int64(fs.Blocks)/4*size, roomKept)
	return int64(fs.Bavail)*size >= kept+n
}
