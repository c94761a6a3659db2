// Package localstore keeps semaphores on this host, as locks on files in
// a lock directory: the kernel frees a permit the moment its holder is
// gone, and a child that inherits the lock keeps the permit held (as with
// flock(1)). A key is a directory (dir.go) made whole, with all its
// files, by its first caller. On Linux its permits are the bytes of one
// file of it, "seats", permit i an open file description lock on byte i
// (permits_linux.go): no caller ever makes a permit's file, so in a
// directory a group shares no member can plant one that others must
// refuse, or rename one it holds to free its number, and the key's owner
// is the only user who could move the file; its seat.0, a dangling
// symbolic link, fences off a semrun from before, whose permits were
// flocks on seat.* files. Elsewhere a permit is a flock(2) on a file of
// its own (permits_other.go). A grant takes the lowest permits free, and
// its slots (semaphore.Slots) are their numbers: on Linux the bytes of
// "seats" it locks, elsewhere the i of each seat.i; so a slot is held,
// freed, kept by a cooling or lost exactly as its lock is (slots.go).
// The child inherits its lock files read-only. A hold, a permit kept
// across processes (semrun acquire), is held by the locks each process
// attached to it takes on its permits, on
// Linux only (hold.go). A permit with a min hold has a cooling, a file
// written with its grant, which counts once its holder let go of it,
// given back or killed, until the min hold passed (cool.go). An operator's settings
// of a key are a file of it (policy.go); a revoke is a file its holder
// looks for every second (operate.go). What happened to a key, its capped
// log of events and its counters, are two more files of it (eventlog.go),
// which a follower of the log reads as they grow (events.go). The first
// waiter in line is woken by inotify (watch_linux.go). Unix only: on
// Windows a lock belongs to the process that took it, so a child could
// not inherit a permit.
package localstore

import "github.com/semrun/semrun/internal/semaphore"

// DirSetting is the lock directory, as messages name it (see
// semaphore.Names).
const DirSetting semaphore.Setting = "lock directory"

// SystemDir is the lock directory every user of a host shares when it is
// usable; see DefaultDir.
const SystemDir = "/run/lock/semrun"
