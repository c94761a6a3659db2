package cmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
)

const (
	// defaultRestartFence is the fence of a run with the default --ttl.
	defaultRestartFence = 30 * time.Second
	defaultKillAfter    = 10 * time.Second
	releaseTimeout      = 2 * time.Second
)

// runFlags are the values of a run's own flags.
type runFlags struct {
	key          string
	permits      int
	weight       int
	ttl          time.Duration
	timeout      time.Duration
	noWait       bool
	busyExitCode int
	lostExitCode int
	// revokedExitCode is --revoked-exit-code: an operator revoked the permit.
	revokedExitCode int
	onLost          string
	killAfter       time.Duration
	restartFence    time.Duration
	minReplicas     int
	// handle is --handle's: run under a hold instead of taking a permit.
	handle string
	// labelText is --label's, as given (see label).
	labelText string
	// maxRuntime and warnAfter bound how long the command runs, and say
	// when it runs long; 0: no bound. minHold keeps the permit taken, as
	// cooling, that long after its grant.
	maxRuntime, warnAfter, minHold time.Duration
}

// runOptions are a run's flag values and what they make once checked.
type runOptions struct {
	*commonOptions
	runFlags
	// command is the command and its arguments.
	command []string
	// path is the command's file, found before the wait (runner.Find).
	path string
	// req is what the flags ask of the store, once validated.
	req semaphore.Request
	// hold is --handle's, once read.
	hold semaphore.Handle
}

func newCmdRun(common *commonOptions) *cobra.Command {
	o := &runOptions{commonOptions: common}
	cmd := &cobra.Command{
		Use:   "semrun [flags] -- COMMAND [ARG...]",
		Short: "Run a command while holding one of N fleet-wide permits",
		Long: `semrun runs COMMAND while it holds one of N permits of a key kept in Redis,
so that at most N copies run at once across every machine that shares the key.
It renews its lease while COMMAND runs, forwards signals to it, gives the permit
back when it exits, and exits with COMMAND's status.`,
		Example: `  semrun --key pdf --permits 3 -- ./render.sh
  semrun -k nightly --no-wait --busy-exit-code 0 -- ./backup.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("no command given: semrun [flags] -- COMMAND [ARG...]")
			}
			if cmd.ArgsLenAtDash() != 0 {
				if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
					return usageErrorf("unknown command %q: did you mean semrun %s? (a command to run must follow --)", args[0], near[0])
				}
				return usageErrorf("unexpected argument %q: the command must follow --", args[0])
			}
			if args[0] == "" {
				return usageErrorf("empty command after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.command = args
			if err := o.commonOptions.validate(cmd); err != nil {
				return err
			}
			if o.set("handle") && o.key == "" {
				if h, err := o.parseHandle("--handle", o.handle); err == nil {
					o.key = h.Key // the key it names, for every line
				}
			}
			o.logAttrs = append(o.logAttrs, "key", o.key) // for every line from here on, the final one too
			log := o.logger(o.f.Streams.ErrOut)
			if files := o.settings.files; len(files) > 0 {
				paths := make([]string, len(files))
				for i, f := range files {
					paths[i] = f.path
				}
				log.Infof("config files, strongest first: %s", strings.Join(paths, ", "))
			}
			// The store checks its own settings as it opens, before the
			// command is looked for, as a bad flag is.
			store, err := o.openStore(log, runAsks{})
			if err != nil {
				return err
			}
			log.Infof("key %q: permits in %s", o.key, store)
			defer store.Close()
			if err := o.validate(); err != nil {
				return err
			}
			if o.set("handle") {
				return o.runHandle(cmd.Context(), store, log)
			}
			return o.run(cmd.Context(), store, log)
		},
	}
	f := cmd.Flags()
	o.addWaitFlags(f)
	f.Var(newInt(&o.lostExitCode, defaultLostExitCode), "lost-exit-code", "exit status when the permit was lost and the command terminated")
	f.Var(newInt(&o.revokedExitCode, exitRevoked), "revoked-exit-code", "exit status when an operator revoked the permit (semrun key revoke) and the command was terminated")
	f.StringVar(&o.onLost, "on-lost", "terminate", "when the permit is lost: terminate or continue")
	f.Var(newDuration(&o.killAfter, defaultKillAfter), "kill-after", "after SIGTERM on a lost permit, SIGKILL if still running; at most 2/5 of the --ttl, and lowered to that when not set")
	f.Var(newDuration(&o.maxRuntime, 0), "max-runtime", "stop the command once it has run this long: SIGTERM to its group, SIGKILL after --kill-after, exit 124 (0: no bound)")
	f.Var(newDuration(&o.warnAfter, 0), "warn-after", "say once on stderr that the command has run this long (0: never)")
	f.Var(newDuration(&o.minHold, 0), "min-hold", "keep the permit taken until this long after its grant, even when the command ends sooner (cooling: semrun exits at once; callers find the key busy until then)")
	f.StringVar(&o.handle, "handle", "", "run under a hold that semrun acquire took, at once, instead of taking a permit: its handle, or @VAR to read it from variable VAR (ps shows arguments, not variables)")
	return cmd
}

// addWaitFlags adds the flags of what a caller asks for and how it
// waits, which runs and semrun acquire share.
func (o *runFlags) addWaitFlags(f *pflag.FlagSet) {
	f.StringVarP(&o.key, "key", "k", "", "semaphore name (required)")
	f.VarP(newInt(&o.permits, 1), "permits", "n", "at most N holders of this key fleet-wide")
	f.Var(newInt(&o.weight, 1), "weight", "take K of the N permits at once, for a command that counts K times")
	f.Var(newDuration(&o.ttl, 30*time.Second), "ttl", "lease: a holder that vanishes frees its permit after this")
	f.Var(newDuration(&o.timeout, 0), "timeout", "give up waiting for a permit after this (0: wait forever)")
	f.BoolVar(&o.noWait, "no-wait", false, fmt.Sprintf("try once, don't wait (but for a restart fence that ends within %v, or --timeout; a longer one is busy at once)", redisstore.NoWaitFence))
	f.Var(newInt(&o.busyExitCode, defaultBusyExitCode), "busy-exit-code", "exit status when no permit was obtained (0: skip quietly)")
	f.Var(newDuration(&o.restartFence, 0), "restart-fence", "grant nothing while Redis has been up for less than this, so that holders from before a restart that lost its data have stopped (default: the --ttl; 0: none)")
	f.Var(newInt(&o.minReplicas, 0), "min-replicas", "a grant or renewal counts only once this many Redis replicas have it (WAIT)")
	f.StringVar(&o.labelText, "label", "", fmt.Sprintf("what status shows of this caller, at most %d bytes, never a secret ('' for none; default: the CI job's address when the environment names one)", semaphore.MaxLabel))
}

// validate checks what the request does not: it fills the defaults that
// depend on other settings, and builds the request, which checks itself.
func (o *runOptions) validate() error {
	if o.set("handle") {
		return o.validateHandle()
	}
	if err := o.validateWait(); err != nil {
		return err
	}
	return o.validateCommand()
}

// validateWait checks what a caller asks for and how it waits, and
// builds the request.
func (o *runOptions) validateWait() error {
	show, set := o.src.show, o.set
	if o.key == "" && !set("key") {
		return usageErrorf("--key is required")
	}
	if !set("restart-fence") {
		o.restartFence = o.ttl
	}
	if o.weight == 0 {
		// A request's 0 is its default, 1; from a user, 0 permits is a mistake.
		return usageErrorf("%s: must be from 1 to %s", show("weight", 0), permits(o.permits, ""))
	}
	o.req = semaphore.Request{
		Key: o.key, Permits: o.permits, Weight: o.weight, TTL: o.ttl, NoWait: o.noWait,
		RestartFence: o.restartFence, MinReplicas: o.minReplicas,
		Holder: semaphore.HolderInfo{Label: o.label()}, // the rest once it asks
	}
	if err := o.req.Validate(); err != nil {
		return o.refused(err)
	}
	if slices.Contains(o.heldKeys(), o.key) {
		return usageErrorf("%s: already held by the semrun this command runs under; waiting would wait for itself", show("key", fmt.Sprintf("%q", o.key)))
	}
	if o.timeout < 0 {
		return usageErrorf("%s: must not be negative", show("timeout", o.timeout))
	}
	return o.checkExitCode("busy-exit-code", o.busyExitCode)
}

// checkExitCode refuses a status a process cannot exit with.
func (o *runOptions) checkExitCode(flag string, code int) error {
	if code < 0 || code > 255 {
		return usageErrorf("%s: must be from 0 to 255", o.src.show(flag, code))
	}
	return nil
}

// set tells whether the user set flag, anywhere.
func (o *runOptions) set(flag string) bool { return o.src.origin(flag) != fromDefault }

// validateCommand checks what a run does with its command.
func (o *runOptions) validateCommand() error {
	show := o.src.show
	if err := o.checkExitCode("lost-exit-code", o.lostExitCode); err != nil {
		return err
	}
	if err := o.checkExitCode("revoked-exit-code", o.revokedExitCode); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"max-runtime", o.maxRuntime}, {"warn-after", o.warnAfter}, {"min-hold", o.minHold}} {
		if d.v < 0 {
			return usageErrorf("%s: must not be negative", show(d.flag, d.v))
		}
	}
	if o.onLost != "terminate" && o.onLost != "continue" {
		return usageErrorf("%s: must be terminate or continue", show("on-lost", fmt.Sprintf("%q", o.onLost)))
	}
	var err error
	if o.path, err = runner.Find(o.command[0]); err != nil {
		return err
	}
	if err := o.checkKillAfter(o.ttl); err != nil {
		return err
	}
	if o.set("handle") {
		return nil // the hold's permit is bound already
	}
	return o.bound(o.maxRuntime, o.minHold)
}

// bound makes the request's permit last at most maxRuntime, and the
// kill-after, in the store too, and at least minHold.
func (o *runOptions) bound(maxRuntime, minHold time.Duration) error {
	o.req.MaxRuntime, o.req.KillAfter, o.req.MinHold = maxRuntime, o.killAfter, minHold
	if err := o.req.Validate(); err != nil {
		return o.refused(err)
	}
	return nil
}

// checkKillAfter refuses a --kill-after a lease of ttl cannot give, and
// lowers the default to what it can.
func (o *runOptions) checkKillAfter(ttl time.Duration) error {
	show, set := o.src.show, o.set
	limit := runner.MaxKillAfter(ttl)
	if !set("kill-after") {
		o.killAfter = min(defaultKillAfter, limit)
	} else if o.killAfter < 0 || o.killAfter > limit {
		return usageErrorf("%s: must be from 0 to %v (2/5 of the --ttl), so that renewals can be retried and the command killed before its lease can lapse", show("kill-after", o.killAfter), limit)
	}
	return nil
}

// run runs the command under a permit of store.
func (o *runOptions) run(ctx context.Context, store semaphore.Store, log *logger) error {
	// Signals are caught from before the wait, so one that arrives while
	// waiting ends the wait, and none is lost between wait and child.
	signals := runner.CatchSignals()

	began := time.Now()
	var waitUntil time.Time
	if o.timeout > 0 {
		waitUntil = began.Add(o.timeout)
	}
	for {
		lease, err := o.acquire(ctx, store, signals, log, waitUntil)
		if err != nil {
			return err
		}
		log.Infof("key %q: permit held after %v, fencing token %d", o.key, time.Since(began).Round(time.Millisecond), lease.Token())
		started := time.Now()
		res, runErr := runner.Run(ctx, o.spec(lease, lease.Token(), o.ttl, signals, log), lease)
		if errors.Is(runErr, runner.ErrStale) {
			// Nothing ran: semrun was held up between the grant and the
			// start. The permit goes back and the wait goes on.
			log.Warnf("key %q: %v; waiting again", o.key, runErr)
			o.release(ctx, lease, log)
			continue
		}
		return o.ran(ctx, lease, res, runErr, started, log)
	}
}

// spec is how the runner runs the command under lease, with token, a
// lease of ttl, and the signals caught.
func (o *runOptions) spec(lease semaphore.Lease, token int64, ttl time.Duration, signals *runner.Signals, log *logger) runner.Spec {
	return runner.Spec{
		Args: o.command, Path: o.path, Env: o.childEnv(o.f.Environ, token), Inherit: lease.Files(),
		Stdin: fileOf(o.f.Streams.In), Stdout: fileOf(o.f.Streams.Out), Stderr: fileOf(o.f.Streams.ErrOut),
		TTL: ttl, KillAfter: o.killAfter, OnLost: o.lostPolicy(), MaxRuntime: o.maxRuntime, WarnAfter: o.warnAfter,
		Signals: signals, Warnf: log.Warnf, ReapOrphans: o.f.ReapOrphans,
		Lingering: func(status int, sig syscall.Signal, left []runner.Process) { o.lingering(log, status, sig, left) },
	}
}

// lostPolicy is --on-lost's.
func (o *runOptions) lostPolicy() runner.OnLost {
	if o.onLost == "continue" {
		return runner.Continue
	}
	return runner.Terminate
}

// ran says how the command ended, gives the permit back, and returns the
// status semrun exits with.
func (o *runOptions) ran(ctx context.Context, lease semaphore.Lease, res runner.Result, runErr error, started time.Time, log *logger) error {
	if runErr == nil {
		ended := fmt.Sprintf("exited with status %d", res.ExitCode)
		switch {
		case res.StillRuns:
			ended = "could not be stopped"
		case res.Signal != 0:
			ended = "was killed by " + runner.SignalName(res.Signal)
		}
		log.Infof("key %q: the command %s after %v", o.key, ended, time.Since(started).Round(time.Millisecond))
	}

	if runErr != nil {
		o.release(ctx, lease, log) // nothing ran: nothing to cool
		return runErr
	}
	o.finish(ctx, lease, commandStatus(res), log)
	if res.Terminated {
		code := o.lostExitCode
		var ended *semaphore.HoldEndedError
		var revoked *semaphore.RevokedError
		switch {
		case errors.As(res.Lost, &revoked) || (errors.As(res.Lost, &ended) && ended.End.State == semaphore.HoldRevoked):
			code = o.revokedExitCode
		case errors.As(res.Lost, &ended) && holdEndCode(ended.End, 0) != 0:
			code = holdEndCode(ended.End, 0) // max runtime
		}
		return &lostError{key: o.key, code: code, cause: res.Lost, unstopped: res.Unstopped}
	}
	if res.RanOut {
		return &ranOutError{key: o.key, maxRuntime: o.maxRuntime, unstopped: res.Unstopped}
	}
	if len(res.Unstopped) > 0 {
		// The command had ended by itself, and keeps its status; what it
		// left did not stop.
		log.Warnf("key %q: %s", o.key, couldNotStop(res.Unstopped))
	}
	return &childExit{code: res.ExitCode, sig: res.Signal}
}

// lingering says, once, that the command exited but left processes in its
// group, which keep the permit: on a terminal, where someone waits for the
// prompt, and with --verbose.
func (o *runOptions) lingering(log *logger, status int, sig syscall.Signal, left []runner.Process) {
	ended := fmt.Sprintf("status %d", status)
	if sig != 0 {
		ended = runner.SignalName(sig)
	}
	what := "processes"
	if len(left) > 0 {
		var procs []string
		for _, p := range left {
			procs = append(procs, fmt.Sprintf("%d (%s)", p.PID, p.Name))
		}
		what = strings.Join(procs, ", ")
	}
	say := log.Infof
	if o.f.Streams.ErrTerminal != nil && !o.quiet {
		say = log.Warnf
	}
	say("key %q: the command exited (%s) but left %s in its process group, which keep the permit until they end (start work that should outlive it with setsid)", o.key, ended, what)
}

// commandStatus is how the command ended, as a shell says it: its status,
// 128+N for a signal N; -1 when it did not end.
func commandStatus(res runner.Result) int {
	switch {
	case res.StillRuns:
		return -1
	case res.Signal != 0:
		return 128 + int(res.Signal)
	}
	return res.ExitCode
}

// release gives back a permit no command ran under.
func (o *runOptions) release(ctx context.Context, lease semaphore.Lease, log *logger) {
	o.giveBack(ctx, func(ctx context.Context) error { return lease.Release(ctx) }, log)
}

// finish gives the permit back once its command ended with status (see
// commandStatus): with --min-hold, it stays taken until then.
func (o *runOptions) finish(ctx context.Context, lease semaphore.Lease, status int, log *logger) {
	o.giveBack(ctx, func(ctx context.Context) error { return lease.Finish(ctx, status) }, log)
	if o.minHold > 0 {
		log.Infof("key %q: it stays taken until %v after its grant (--min-hold)", o.key, o.minHold)
	}
}

// giveBack gives the permit back with let. A failed release never changes
// the exit status: the permit frees itself within the TTL. It gets little
// time, since whoever waits for semrun should not wait for a store that
// does not answer.
func (o *runOptions) giveBack(ctx context.Context, let func(context.Context) error, log *logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
	defer cancel()
	if err := let(ctx); err != nil {
		log.Warnf("%v; the permit frees itself within %v", err, o.ttl)
		return
	}
	if o.set("handle") {
		log.Infof("key %q: left the hold, which keeps the permit", o.key)
		return
	}
	log.Infof("key %q: permit released", o.key)
}
