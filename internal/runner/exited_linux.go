package runner

import "golang.org/x/sys/unix"

// exited tells whether the child has exited, whether or not reap has
// reported it yet: waitid with WNOWAIT looks without reaping. A child
// reap has reaped already is gone too (ECHILD).
func (g group) exited() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, int(g), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == unix.ECHILD || err == nil && info.Signo == int32(unix.SIGCHLD)
}
