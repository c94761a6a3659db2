//go:build unix

package cmd

import "golang.org/x/sys/unix"

// inBackground tells whether the terminal fd has a foreground process group
// other than semrun's (Ctrl-Z, then bg): the prompt is then the shell's.
func inBackground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp != unix.Getpgrp()
}
