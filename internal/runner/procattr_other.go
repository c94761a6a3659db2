//go:build unix && !linux

package runner

import "syscall"

// procAttr puts the child in a process group of its own, in the terminal's
// foreground when semrun has it. There is no parent-death signal here, so
// a child outlives a semrun killed with SIGKILL; docs/how-it-works.md says so.
func procAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}

// adoptOrphans does nothing: there is no child subreaper here, so orphans
// go to init, and semrun does not wait for what the child left behind.
// waitsForGroup is false: without adopting orphans, semrun cannot wait
// for what the child leaves behind.
const waitsForGroup = false

func adoptOrphans() {}
