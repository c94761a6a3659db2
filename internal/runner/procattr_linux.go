package runner

import "syscall"

// procAttr puts the child in a process group of its own, in the terminal's
// foreground when semrun has it, and kills it if semrun dies, even by SIGKILL.
func procAttr(t *terminal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if t != nil {
		a.Foreground, a.Ctty = true, t.fd
	}
	return a
}
