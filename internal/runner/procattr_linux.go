package runner

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// procAttr puts the child in a process group of its own, in the terminal's
// foreground when semrun has it, and kills it if semrun dies, even by SIGKILL
// (unless it changes its credentials, which clears the parent-death signal).
func procAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}

// adoptOrphans makes semrun the parent of every process the child leaves
// behind when it exits (a child subreaper), so that semrun can wait for
// what the child left in its group before it gives the permit back.
// waitsForGroup: semrun adopts what the child leaves behind, and so can
// wait for its whole group.
const waitsForGroup = true

func adoptOrphans() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
