//go:build !linux

package runner

import "syscall"

// DieOf returns at once where semrun cannot die of a signal with its
// default action; the caller exits with 128+N instead.
func DieOf(syscall.Signal) {}

// ignoreReserved has nothing to do where Go reserves no signal.
func ignoreReserved() {}
