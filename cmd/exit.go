package cmd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
)

// Exit statuses semrun decides itself; the child's own pass through.
const (
	exitDoctorFailed    = 1   // doctor found something that would break semrun
	exitUnreadable      = 1   // status could not read some key
	exitHeldLonger      = 1   // status --older-than found holders
	exitNoHolder        = 1   // key revoke: no holder has that ID
	defaultBusyExitCode = 75  // --busy-exit-code: sysexits' EX_TEMPFAIL, try again later
	defaultLostExitCode = 112 // --lost-exit-code: outside 124-165, which timeout(1) and signals use
	exitRevoked         = 113 // an operator revoked the permit (a hold's)
	exitMaxRuntime      = 124 // --max-runtime ran out, as timeout(1) says
	exitFailure         = 125 // semrun's own failure before the child started
	exitNotExecutable   = 126
	exitNotFound        = 127
	exitSignalBase      = 128 // 128+N: signal N, as shells report it
)

// exitStatusDoc says what one status means, for --help's line (brief, when
// it has one) and the man page's EXIT STATUS (text).
type exitStatusDoc struct {
	status, brief, text string
}

// exitStatusDocs are the statuses above, in the order users meet them: the
// one list --help and the man page read, so that neither can drift from
// the codes.
var exitStatusDocs = []exitStatusDoc{
	{"S", "the command's own", "the command exited with status S: semrun exits with it"},
	{"signal N", "", fmt.Sprintf("the command was killed by signal N: semrun releases the permit, then dies of the same signal (a shell shows %d+N); "+
		"where that is not possible (systems other than Linux), semrun exits %d+N; no core file is written", exitSignalBase, exitSignalBase)},
	{strconv.Itoa(defaultBusyExitCode), strconv.Itoa(defaultBusyExitCode) + " no permit (--busy-exit-code)",
		"no permit: all held with --no-wait, or none within --timeout; --busy-exit-code changes it (0 makes a busy run a quiet skip)"},
	{strconv.Itoa(defaultLostExitCode), strconv.Itoa(defaultLostExitCode) + " permit lost, command terminated (--lost-exit-code)",
		"the permit was lost while the command ran, and semrun terminated it (or, for a command that changed its user, could not: its line names the pid); --lost-exit-code changes it"},
	{strconv.Itoa(exitRevoked), strconv.Itoa(exitRevoked) + " revoked by an operator, command terminated (--revoked-exit-code)",
		"an operator revoked the permit (semrun key revoke) and semrun terminated the command; --revoked-exit-code changes it; or the hold was revoked: semrun release, or a run under its handle, after an operator revoked it"},
	{strconv.Itoa(exitMaxRuntime), strconv.Itoa(exitMaxRuntime) + " --max-runtime ran out",
		"the command ran for --max-runtime and semrun stopped it (SIGTERM, SIGKILL after --kill-after), as timeout(1) says; or a hold's --max-runtime ended it: semrun release, or a run under its handle, says so"},
	{strconv.Itoa(exitFailure), strconv.Itoa(exitFailure) + " semrun's own failure before the command started",
		"semrun's own failure before the command started: bad flags or values, a bad config file, no command or an empty one, " +
			"Redis not reached within --connect-timeout (once a waiter has reached it, an outage is ridden out until --timeout), " +
			"an authentication or TLS error, a nested semrun on the key it runs under"},
	{strconv.Itoa(exitNotExecutable), strconv.Itoa(exitNotExecutable) + " cannot execute", "the command was found but cannot be executed"},
	{strconv.Itoa(exitNotFound), strconv.Itoa(exitNotFound) + " not found", "the command was not found, or the interpreter its #! line names"},
	{strconv.Itoa(exitSignalBase) + "+N", strconv.Itoa(exitSignalBase) + "+N signal N ended the wait",
		"signal N arrived while waiting for a permit: no command ran, nothing is held"},
	{strconv.Itoa(exitDoctorFailed), "", "semrun doctor found something that would break semrun; semrun status could not read some key (the other keys are shown), or found holders with --older-than; semrun key revoke found no holder with that ID"},
}

// usageError is bad input: a flag, a value, a missing command.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// busyError means no permit was obtained; code is --busy-exit-code, and
// why is empty for a quiet skip.
type busyError struct {
	code int
	why  string
}

func (e *busyError) Error() string { return e.why }

// lostError means the permit was lost and the child was told to stop;
// code is --lost-exit-code. unstopped is what did not stop.
type lostError struct {
	key       string
	code      int
	cause     error
	unstopped []runner.Unstopped
}

func (e *lostError) Error() string {
	if len(e.unstopped) > 0 {
		return fmt.Sprintf("key %q: permit lost: %s; %s", e.key, runner.LostWhy(e.cause), couldNotStop(e.unstopped))
	}
	return fmt.Sprintf("key %q: permit lost: %s; command terminated", e.key, runner.LostWhy(e.cause))
}

// couldNotStop names the processes a stop for a lost permit did not end,
// and why, without a claim that they ended.
func couldNotStop(left []runner.Unstopped) string {
	var procs []string
	for _, u := range left {
		p := fmt.Sprintf("pid %d", u.PID)
		if u.Name != "" {
			p += " (" + u.Name + ")"
		}
		switch {
		case errors.Is(u.Err, syscall.EPERM):
			p += ": operation not permitted, it changed its user"
		case u.Err != nil:
			p += ": " + u.Err.Error()
		default:
			p += ": still there after SIGKILL"
		}
		procs = append(procs, p)
	}
	runs := "it may still run"
	if len(left) > 1 {
		runs = "they may still run"
	}
	return "could not stop " + strings.Join(procs, "; ") + "; " + runs
}

// ranOutError means the command ran for --max-runtime and semrun stopped
// it, as timeout(1) does: 124. unstopped is what did not stop.
type ranOutError struct {
	key        string
	maxRuntime time.Duration
	unstopped  []runner.Unstopped
}

func (e *ranOutError) Error() string {
	ran := fmt.Sprintf("the command ran for %v (--max-runtime)", e.maxRuntime)
	if e.maxRuntime == 0 {
		ran = "the hold's --max-runtime ran out" // a run under its handle
	}
	if len(e.unstopped) > 0 {
		return fmt.Sprintf("key %q: %s; %s", e.key, ran, couldNotStop(e.unstopped))
	}
	return fmt.Sprintf("key %q: %s; terminated", e.key, ran)
}

// holdEndedError means a hold had ended when a release or a run under its
// handle came: code says how (lost, max runtime, revoked), so that a
// pipeline knows its steps may have run without the permit.
type holdEndedError struct {
	code int
	msg  string
}

func (e *holdEndedError) Error() string { return e.msg }

// holdEndCode is the status of a hold that ended as end says: 0 for one
// given back on purpose; lost is --lost-exit-code.
func holdEndCode(end semaphore.HoldEnd, lost int) int {
	switch end.State {
	case semaphore.HoldReleased:
		return 0
	case semaphore.HoldMaxRuntime:
		return exitMaxRuntime
	case semaphore.HoldRevoked:
		return exitRevoked
	}
	return lost
}

// interruptedError means a signal ended the wait for a permit.
type interruptedError struct {
	key string
	sig syscall.Signal
}

func (e *interruptedError) Error() string {
	return fmt.Sprintf("%s while waiting for key %q; nothing held", runner.SignalName(e.sig), e.key)
}

// doctorError means doctor found something that would break semrun;
// failed names the checks.
type doctorError struct{ failed []string }

func (e *doctorError) Error() string {
	if len(e.failed) == 1 {
		return "doctor: " + e.failed[0] + " failed"
	}
	return fmt.Sprintf("doctor: %d checks failed: %s", len(e.failed), strings.Join(e.failed, ", "))
}

// olderError means status --older-than found holders that have held
// longer than than: an alert.
type olderError struct {
	holders int
	than    time.Duration
}

func (e *olderError) Error() string {
	return fmt.Sprintf("status: %s held longer than %v (--older-than)", semaphore.Count(e.holders, "holder"), e.than)
}

// unreadableError means status could not read some of the keys it showed.
type unreadableError struct{ failed, total int }

func (e *unreadableError) Error() string {
	return fmt.Sprintf("status: could not read %d of %d keys", e.failed, e.total)
}

// childExit is how the child ended: its exit status, or the signal that killed it.
type childExit struct {
	code int
	sig  syscall.Signal
}

func (e *childExit) Error() string {
	if e.sig != 0 {
		return "command killed by " + runner.SignalName(e.sig)
	}
	return fmt.Sprintf("command exited with status %d", e.code)
}

// exitStatus is the one place where outcomes become exit statuses. It
// returns the status, the signal semrun must die of (0 for none), and the
// line to print on stderr (empty when the status is the child's own).
func exitStatus(err error) (code int, sig syscall.Signal, msg string) {
	var (
		child       *childExit
		busy        *busyError
		lost        *lostError
		interrupted *interruptedError
		start       *runner.StartError
		doctor      *doctorError
		unreadable  *unreadableError
		noServer    *redisstore.NoServerError
		holdEnded   *holdEndedError
		ranOut      *ranOutError
		older       *olderError
		noHolder    *noHolderError
	)
	switch {
	case err == nil:
		return 0, 0, ""
	case errors.As(err, &child):
		if child.sig != 0 {
			return exitSignalBase + int(child.sig), child.sig, ""
		}
		return child.code, 0, ""
	case errors.As(err, &busy):
		return busy.code, 0, busy.why
	case errors.As(err, &lost):
		return lost.code, 0, lost.Error()
	case errors.As(err, &ranOut):
		return exitMaxRuntime, 0, ranOut.Error()
	case errors.As(err, &holdEnded):
		return holdEnded.code, 0, holdEnded.msg
	case errors.As(err, &interrupted):
		return exitSignalBase + int(interrupted.sig), 0, interrupted.Error()
	case errors.As(err, &start) && start.Interpreter != "":
		return exitNotFound, 0, fmt.Sprintf("%s: its interpreter %s (#!) not found", start.Command, start.Interpreter)
	case errors.As(err, &start) && start.NotFound:
		return exitNotFound, 0, fmt.Sprintf("%s: command not found", start.Command)
	case errors.As(err, &start):
		return exitNotExecutable, 0, start.Error()
	case errors.As(err, &doctor):
		return exitDoctorFailed, 0, doctor.Error()
	case errors.As(err, &unreadable):
		return exitUnreadable, 0, unreadable.Error()
	case errors.As(err, &older):
		return exitHeldLonger, 0, older.Error()
	case errors.As(err, &noHolder):
		return exitNoHolder, 0, noHolder.Error()
	case errors.As(err, &noServer):
		return exitFailure, 0, fmt.Sprintf("no Redis at %s, where semrun looks when none is named: name yours with --redis or %s, or keep the permits on this host with --local",
			noServer.Addr, envNames["redis"])
	}
	return exitFailure, 0, err.Error()
}
