package runner

import (
	"os"
	"strconv"
	"strings"
)

// leftInGroup lists (at most max of) the processes in the process group
// pgid, from /proc: what a command left running behind it.
func leftInGroup(pgid, max int) []Process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var left []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold ") ".
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 3 || fields[2] != strconv.Itoa(pgid) || fields[0] == "Z" || fields[0] == "X" {
			continue // another group's, or ended and not yet reaped
		}
		if left = append(left, Process{PID: pid, Name: s[open+1 : close]}); len(left) == max {
			break
		}
	}
	return left
}
