// Package localstore keeps semaphores on this host, as flock(2) locks on
// files in a lock directory: the kernel frees a seat the moment its holder
// is gone, and a child that inherits the lock keeps the seat held (as with
// flock(1)). A key is a directory (dir.go) whose seats are files; the first
// waiter in line is woken by inotify (watch_linux.go). Unix only: on
// Windows a lock belongs to the process that took it, so a child could not
// inherit a seat.
package localstore

import "github.com/semrun/semrun/internal/semaphore"

// DirSetting is the lock directory, as messages name it (see
// semaphore.Names).
const DirSetting semaphore.Setting = "lock directory"

// SystemDir is the lock directory every user of a host shares when it is
// usable; see DefaultDir.
const SystemDir = "/run/lock/semrun"
