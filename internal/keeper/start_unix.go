//go:build unix

package keeper

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts exe (semrun's own executable when empty) as a keeper,
// named name in its argv: in a session of its own, with no terminal and
// stdio on the null device, in this process's directory, where the
// relative paths of its settings are read (Settle leaves it later). It
// inherits its two pipes and owner's pidfd, when there is one: Adopt
// closes whatever else reaches it. It outlives this process, whose
// caller never waits for it.
func Start(exe, name string, env []string, owner *Owner) (*Started, error) {
	in, tell, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer in.Close()
	heard, ready, err := os.Pipe()
	if err != nil {
		tell.Close()
		return nil, err
	}
	defer ready.Close()
	files := []*os.File{in, ready}
	if f := owner.file(); f != nil {
		files = append(files, f)
	}
	if exe == "" {
		exe = self()
	}
	c := exec.Command(exe, Arg)
	c.Args[0] = name
	c.Env, c.ExtraFiles = env, files
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		tell.Close()
		heard.Close()
		return nil, err
	}
	pid := c.Process.Pid
	_ = c.Process.Release() // it outlives us: its parent is init's
	return &Started{PID: pid, tell: tell, heard: heard}, nil
}

// Kill ends a keeper that could not take the hold.
func (k *Started) Kill() { _ = syscall.Kill(k.PID, syscall.SIGKILL) }

// self is semrun's own executable: on Linux the very file this process
// runs, even once an upgrade replaced it.
func self() string {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe"
	}
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}
