//go:build !linux

package runner

// exited: where a child's exit cannot be looked at without reaping it,
// only reap's report tells (supervisor.exited).
func (group) exited() bool { return false }
