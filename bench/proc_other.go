//go:build !linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// The bench measures on Linux only: it reads /proc, its children die with
// it by a parent-death signal, and they time themselves on the
// CLOCK_MONOTONIC it reads. Elsewhere it builds, and refuses to run.
func init() {
	fmt.Fprintln(os.Stderr, "bench: runs on Linux only")
	os.Exit(2)
}

func ownGroup(*exec.Cmd)                          {}
func signalGroup(cmd *exec.Cmd, _ syscall.Signal) { _ = cmd.Process.Kill() }
func monotonic() int64                            { return 0 }
func realtimeOffset() int64                       { return 0 }
