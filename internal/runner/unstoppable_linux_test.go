package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// roleVar makes the test binary play a part of a test in another process,
// under another user: runnerRole runs its arguments as a command, and
// rootRole becomes root through its set-uid bit.
const (
	roleVar    = "RUNNER_TEST_ROLE"
	runnerRole = "runner"
	rootRole   = "root"
	// readyVar names the file rootRole creates once it is root.
	readyVar = "RUNNER_TEST_READY"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleVar) {
	case runnerRole:
		os.Exit(runUntilLost(os.Args[1:]))
	case rootRole:
		os.Exit(becomeRoot())
	}
	os.Exit(m.Run())
}

// becomeRoot makes every uid root, as sudo or su does for its command,
// says so, and stays a while: long enough for a test, never for good.
func becomeRoot() int {
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "setresuid:", err)
		return 1
	}
	if err := os.WriteFile(os.Getenv(readyVar), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.Sleep(time.Minute)
	return 0
}

// lostOnceReady is a lease that renews until the file ready exists, and is
// lost from then on.
type lostOnceReady struct {
	ttl   time.Duration
	ready string

	mu       sync.Mutex
	deadline clock.Instant
}

func (l *lostOnceReady) Bound() clock.Instant { return clock.Instant{} }

func (l *lostOnceReady) Deadline() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *lostOnceReady) Renew(context.Context) error {
	if _, err := os.Stat(l.ready); err == nil {
		return fmt.Errorf("renew: %w", semaphore.ErrLost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = clock.System.Now().Add(l.ttl)
	return nil
}

// runUntilLost runs args as semrun would, on a lease lost once the file
// readyVar names exists, and prints how Run ended: a line "terminated
// BOOL stillruns BOOL", then "unstopped PID NAME ERRNO" for each process
// it could not stop (ERRNO 0 for none).
func runUntilLost(args []string) int {
	const ttl = 1500 * time.Millisecond
	lease := &lostOnceReady{ttl: ttl, ready: os.Getenv(readyVar), deadline: clock.System.Now().Add(ttl)}
	// The command's set-uid program plays rootRole.
	env := []string{roleVar + "=" + rootRole}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, roleVar+"=") {
			env = append(env, kv)
		}
	}
	res, err := runner.Run(context.Background(), runner.Spec{
		Args: args, Env: env, Stderr: os.Stderr,
		TTL: ttl, KillAfter: 200 * time.Millisecond, ReapOrphans: true,
		Warnf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	}, lease)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("terminated %v stillruns %v\n", res.Terminated, res.StillRuns)
	for _, u := range res.Unstopped {
		var errno syscall.Errno
		errors.As(u.Err, &errno)
		fmt.Printf("unstopped %d %s %d\n", u.PID, u.Name, errno)
	}
	return 0
}

// A command that makes itself root (sudo, su, a set-uid program) cannot be
// stopped by a semrun that is not root: on a lost permit, Run names it
// and why, returns instead of waiting for it, and never says it stopped.
// semrun runs here as nobody, and its command becomes root through a
// set-uid copy of the test binary, which is why the test needs root.
func TestUnstoppableCommandIsNamed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a set-uid root program and run semrun as another user")
	}
	for _, tc := range []struct {
		name string
		// script runs the set-uid program ($0) and writes its pid to $1.
		script string
		// stillRuns: the command itself is what could not be stopped.
		stillRuns bool
	}{
		{"the command itself", `echo $$ > "$1"; exec "$0"`, true},
		{"what the command started", `"$0" & echo $! > "$1"; wait`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runnerBin, rootBin, dir := setuidFixture(t)
			pidFile, ready := filepath.Join(dir, "pid"), filepath.Join(dir, "ready")
			cmd := exec.Command(runnerBin, "sh", "-c", tc.script, rootBin, pidFile)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), roleVar+"="+runnerRole, readyVar+"="+ready)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			// Files, not pipes: the process left running holds them open,
			// and Wait would wait for it.
			stdout, stderr := outputFile(t, dir, "stdout"), outputFile(t, dir, "stderr")
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-done
				done <- nil
			})
			// The set-uid process outlives the semrun that could not stop
			// it: root ends it.
			t.Cleanup(func() {
				if b, err := os.ReadFile(pidFile); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			waitFile(t, ready)
			root := readPid(t, pidFile)
			select {
			case err := <-done:
				done <- err
				if err != nil {
					t.Fatalf("the runner: %v; its stderr:\n%s", err, read(t, stderr))
				}
			case <-time.After(slow):
				t.Fatalf("Run did not return within %v of the loss; want it to give up the process it could not stop; its stderr:\n%s", slow, read(t, stderr))
			}
			want := fmt.Sprintf("terminated true stillruns %v\nunstopped %d %s %d\n", tc.stillRuns, root, filepath.Base(rootBin), syscall.EPERM)
			if got := read(t, stdout); got != want {
				t.Errorf("Run ended with:\n%s\nwant:\n%s\nits stderr:\n%s", got, want, read(t, stderr))
			}
			if err := syscall.Kill(root, 0); err != nil {
				t.Errorf("the root process %d: kill -0 gave %v, want it still running (the test is wrong)", root, err)
			}
		})
	}
}

// nobody is the user semrun runs as in TestUnstoppableCommandIsNamed.
const nobody = 65534

// setuidFixture makes a directory nobody can read, holding a copy of the
// test binary to run as nobody and a set-uid root copy, and returns them
// and a directory nobody may write to. It skips the test where set-uid
// bits are ignored.
func setuidFixture(t *testing.T) (runnerBin, rootBin, dir string) {
	t.Helper()
	top, err := os.MkdirTemp("", "semrun-setuid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	var fs unix.Statfs_t
	if err := unix.Statfs(top, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Flags&unix.ST_NOSUID != 0 {
		t.Skipf("the temporary directory's file system is mounted nosuid")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runnerBin, rootBin, dir = filepath.Join(top, "runner"), filepath.Join(top, "root-sleeper"), filepath.Join(top, "run")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{runnerBin, 0o755}, {rootBin, 0o755 | os.ModeSetuid}} {
		copyFile(t, self, f.path)
		// Chmod after the copy: the set-uid bit is dropped by a write.
		if err := os.Chmod(f.path, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return runnerBin, rootBin, dir
}

// outputFile is a new file in dir for a process's output.
func outputFile(t *testing.T, dir, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// read is what was written to f.
func read(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
