package cmd

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

func TestExitStatus(t *testing.T) {
	t.Parallel()
	_, notFound := exec.LookPath("no-such-command-here")
	tests := []struct {
		name    string
		err     error
		code    int
		sig     syscall.Signal
		printed bool
	}{
		{"success", nil, 0, 0, false},
		{"child status", &childExit{code: 7}, 7, 0, false},
		{"child signal", &childExit{code: -1, sig: syscall.SIGTERM}, 143, syscall.SIGTERM, false},
		{"busy", &busyError{code: 75, why: "busy"}, 75, 0, true},
		{"quiet skip", &busyError{code: 0}, 0, 0, false},
		{"lost", &lostError{key: "k", code: 112, cause: semaphore.ErrLost}, 112, 0, true},
		{"interrupted", &interruptedError{key: "k", sig: syscall.SIGINT}, 130, 0, true},
		{"not found", &runner.StartError{Command: "x", NotFound: true, Err: notFound}, 127, 0, true},
		{"not executable", &runner.StartError{Command: "x", Err: errors.New("permission denied")}, 126, 0, true},
		{"usage", usageErrorf("--permits 0: bad"), 125, 0, true},
		{"unreachable", fmt.Errorf("acquire: %w", semaphore.ErrUnreachable), 125, 0, true},
		{"anything else", errors.New("boom"), 125, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, sig, msg := exitStatus(tt.err)
			if code != tt.code || sig != tt.sig || (msg != "") != tt.printed {
				t.Errorf("exitStatus(%v) = %d, %v, %q; want %d, %v, printed %v", tt.err, code, sig, msg, tt.code, tt.sig, tt.printed)
			}
		})
	}
}

// A stop for a lost permit that did not end the command names what runs
// on, and never says the command was terminated; the status is still the
// lost one.
func TestLostLineNamesWhatDidNotStop(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		unstopped []runner.Unstopped
		want      string
	}{
		{"changed its user", []runner.Unstopped{{Process: runner.Process{PID: 1234, Name: "sleep"}, Err: syscall.EPERM}},
			"could not stop pid 1234 (sleep): operation not permitted, it changed its user; it may still run"},
		{"stuck, and unnamed", []runner.Unstopped{{Process: runner.Process{PID: 1234, Name: "sleep"}}, {Process: runner.Process{PID: 1240}}},
			"could not stop pid 1234 (sleep): still there after SIGKILL; pid 1240: still there after SIGKILL; they may still run"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, msg := exitStatus(&lostError{key: "k", code: 112, cause: semaphore.ErrLost, unstopped: tt.unstopped})
			if code != 112 || !strings.HasPrefix(msg, `key "k": permit lost: `) || !strings.HasSuffix(msg, "; "+tt.want) || strings.Contains(msg, "terminated") {
				t.Errorf("got %d, %q; want 112 and a line ending %q", code, msg, tt.want)
			}
		})
	}
}
