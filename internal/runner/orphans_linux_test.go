package runner_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// What the command leaves behind while it runs (a subshell's `&`, a
// setsid'd helper) becomes semrun's child as its parent exits, and is
// reaped as it ends: a long job piles up no zombies under semrun, and the
// command's own status still comes back.
func TestOrphansAreReapedWhileTheCommandRuns(t *testing.T) {
	const orphans = 60
	dir := t.TempDir()
	pids, spawned := filepath.Join(dir, "pids"), filepath.Join(dir, "spawned")
	h := newHarness(t, "sh", "-c", `
		for i in $(seq 50); do (sh -c 'echo $$ >> "$0"' "$0" &); done
		for i in $(seq 10); do (setsid sh -c 'echo $$ >> "$0"' "$0" &); done
		touch "$1"
		cat
		exit 5`, pids, spawned)
	h.run()
	waitFile(t, spawned)
	for _, pid := range orphanPids(t, pids, orphans) {
		reaped(t, pid)
	}
	if z := zombieChildren(t, os.Getpid()); len(z) > 0 {
		t.Errorf("zombie children of the runner's process: got %v, want none", z)
	}
	h.running()
	h.stdin.Close()
	if res, err := h.wait(); err != nil || !reflect.DeepEqual(res, runner.Result{ExitCode: 5}) {
		t.Fatalf("got %+v, %v; want exit 5", res, err)
	}
}

// orphanPids waits until path holds n pids, one a line, and returns them.
func orphanPids(t *testing.T, path string, n int) []int {
	t.Helper()
	var lines []string
	semaphoretest.WaitFor(t, slow, fmt.Sprintf("%d pids written to %s", n, filepath.Base(path)), func() bool {
		b, _ := os.ReadFile(path)
		lines = strings.Fields(string(b))
		return len(lines) >= n
	})
	var pids []int
	for _, l := range lines {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("%s: got %q, want pids", filepath.Base(path), l)
		}
		pids = append(pids, pid)
	}
	return pids
}

// reaped waits until pid is gone and reaped: a zombie still answers kill 0.
func reaped(t *testing.T, pid int) {
	t.Helper()
	semaphoretest.WaitFor(t, slow, fmt.Sprintf("orphan %d exited and reaped (kill -0 gives ESRCH)", pid), func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
}

// zombieChildren lists the children of pid that have exited and not been
// reaped, from /proc.
func zombieChildren(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var zombies []int
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold ") ".
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) >= 2 && fields[0] == "Z" && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(e.Name())
			zombies = append(zombies, child)
		}
	}
	return zombies
}
