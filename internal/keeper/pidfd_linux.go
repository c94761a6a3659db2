package keeper

import "golang.org/x/sys/unix"

// pidfdOpen opens a pidfd of pid: a handle no other process can take.
func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }
