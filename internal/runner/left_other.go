//go:build unix && !linux

package runner

// listsGroups is false: leftInGroup lists nothing here.
const listsGroups = false

// leftInGroup cannot list a process group here without cgo.
func leftInGroup(int, int) []Process { return nil }
