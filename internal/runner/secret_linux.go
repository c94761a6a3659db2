package runner

import "golang.org/x/sys/unix"

// ProtectSecrets makes semrun non-dumpable: /proc/PID/environ and mem
// become root's, so the command (and any other process of the user) cannot
// read a password from semrun's environment or memory. It costs what a
// setuid program has: no core dump, and no debugger or strace attaching
// to semrun (run them as root). The command is dumpable again: exec
// resets it.
func ProtectSecrets() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
