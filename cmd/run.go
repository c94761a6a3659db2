package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// Variables the child gets, deliberately not the configuration variables:
// a semrun inside the child must not inherit its parent's key or capacity.
const (
	envHeldKey      = "SEMRUN_HELD_KEY"
	envHeldPermits  = "SEMRUN_HELD_PERMITS"
	envFencingToken = "SEMRUN_FENCING_TOKEN"
	// envHeldKeys lists, one a line, the keys held by every semrun this
	// one runs under, so that a nested semrun never waits for an ancestor.
	envHeldKeys = "SEMRUN_HELD_KEYS"
)

const (
	// defaultRestartFence is the fence of a run with the default --ttl.
	defaultRestartFence = 30 * time.Second
	defaultKillAfter    = 10 * time.Second
	defaultLostExitCode = 112
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
	onLost       string
	killAfter    time.Duration
	restartFence time.Duration
	minReplicas  int
}

// runOptions are a run's flag values and what they make once checked.
type runOptions struct {
	*commonOptions
	runFlags
	streams *IOStreams
	// command is the command and its arguments.
	command []string
	// path is the command's file, found before the wait (runner.Find).
	path string
	// req is what the flags ask of the store, once validated.
	req semaphore.Request
}

func newCmdRun(s *IOStreams, common *commonOptions) *cobra.Command {
	o := &runOptions{commonOptions: common, streams: s}
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
			o.logAttrs = append(o.logAttrs, "key", o.key) // for every line from here on, the final one too
			log := o.logger(o.streams.ErrOut)
			if files := o.settings.files; len(files) > 0 {
				paths := make([]string, len(files))
				for i, f := range files {
					paths[i] = f.path
				}
				log.Infof("config files, strongest first: %s", strings.Join(paths, ", "))
			}
			// The store checks its own settings as it opens, before the
			// command is looked for, as a bad flag is.
			store, err := o.openStore(log, 0)
			if err != nil {
				return err
			}
			log.Infof("key %q: permits in %s", o.key, store)
			defer store.Close()
			if err := o.validate(cmd); err != nil {
				return err
			}
			return o.run(cmd.Context(), store, log)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.key, "key", "k", "", "semaphore name (required)")
	f.VarP(newInt(&o.permits, 1), "permits", "n", "at most N holders of this key fleet-wide")
	f.Var(newInt(&o.weight, 1), "weight", "take K of the N permits at once, for a command that counts K times")
	f.Var(newDuration(&o.ttl, 30*time.Second), "ttl", "lease: a holder that vanishes frees its permit after this")
	f.Var(newDuration(&o.timeout, 0), "timeout", "give up waiting for a permit after this (0: wait forever)")
	f.BoolVar(&o.noWait, "no-wait", false, "try once, don't wait")
	f.Var(newInt(&o.busyExitCode, 75), "busy-exit-code", "exit status when no permit was obtained (0: skip quietly)")
	f.Var(newInt(&o.lostExitCode, defaultLostExitCode), "lost-exit-code", "exit status when the permit was lost and the command terminated")
	f.StringVar(&o.onLost, "on-lost", "terminate", "when the permit is lost: terminate or continue")
	f.Var(newDuration(&o.restartFence, 0), "restart-fence", "grant nothing while Redis has been up for less than this, so that holders from before a restart that lost its data have stopped (default: the --ttl; 0: none)")
	f.Var(newInt(&o.minReplicas, 0), "min-replicas", "a grant or renewal counts only once this many Redis replicas have it (WAIT)")
	f.Var(newDuration(&o.killAfter, defaultKillAfter), "kill-after", "after SIGTERM on a lost permit, SIGKILL if still running; at most 2/5 of the --ttl, and lowered to that when not set")
	return cmd
}

// validate checks what the request does not: it fills the defaults that
// depend on other settings, and builds the request, which checks itself.
func (o *runOptions) validate(cmd *cobra.Command) error {
	show, set := o.src.show, func(flag string) bool { return o.src.origin(flag) != fromDefault }
	if o.key == "" && !set("key") {
		return usageErrorf("--key is required")
	}
	if !set("restart-fence") {
		o.restartFence = o.ttl
	}
	if o.weight == 0 {
		// A request's 0 is its default, 1; from a user, 0 seats is a mistake.
		return usageErrorf("%s: must be from 1 to %s", show("weight", 0), permits(o.permits, ""))
	}
	o.req = semaphore.Request{
		Key: o.key, Permits: o.permits, Weight: o.weight, TTL: o.ttl, NoWait: o.noWait,
		RestartFence: o.restartFence, MinReplicas: o.minReplicas,
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
	for _, c := range []struct {
		flag string
		code int
	}{{"busy-exit-code", o.busyExitCode}, {"lost-exit-code", o.lostExitCode}} {
		if c.code < 0 || c.code > 255 {
			return usageErrorf("%s: must be from 0 to 255", show(c.flag, c.code))
		}
	}
	if o.onLost != "terminate" && o.onLost != "continue" {
		return usageErrorf("%s: must be terminate or continue", show("on-lost", fmt.Sprintf("%q", o.onLost)))
	}
	var err error
	if o.path, err = runner.Find(o.command[0]); err != nil {
		return err
	}
	limit := runner.MaxKillAfter(o.ttl)
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
	lease, err := o.acquire(ctx, store, signals, log)
	if err != nil {
		return err
	}
	log.Infof("key %q: permit held after %v, fencing token %d", o.key, time.Since(began).Round(time.Millisecond), lease.Token())

	onLost := runner.Terminate
	if o.onLost == "continue" {
		onLost = runner.Continue
	}
	started := time.Now()
	res, runErr := runner.Run(ctx, runner.Spec{
		Args: o.command, Path: o.path, Env: o.childEnv(o.f.Environ, lease.Token()), Inherit: lease.Files(),
		Stdin: fileOf(o.streams.In), Stdout: fileOf(o.streams.Out), Stderr: fileOf(o.streams.ErrOut),
		TTL: o.ttl, KillAfter: o.killAfter, OnLost: onLost,
		Signals: signals, Warnf: log.Warnf,
		Lingering: func(status int, sig syscall.Signal, left []runner.Process) { o.lingering(log, status, sig, left) },
	}, lease)
	if runErr == nil {
		ended := fmt.Sprintf("exited with status %d", res.ExitCode)
		if res.Signal != 0 {
			ended = "was killed by " + runner.SignalName(res.Signal)
		}
		log.Infof("key %q: the command %s after %v", o.key, ended, time.Since(started).Round(time.Millisecond))
	}

	o.release(ctx, lease, log)
	if runErr != nil {
		return runErr
	}
	if res.Terminated {
		return &lostError{key: o.key, code: o.lostExitCode, cause: res.Lost}
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
	if o.streams.ErrTerminal != nil && !o.quiet {
		say = log.Warnf
	}
	say("key %q: the command exited (%s) but left %s in its process group, which keep the permit until they end (start work that should outlive it with setsid)", o.key, ended, what)
}

// release gives the permit back. A failed release never changes the exit
// status: the seat lapses within the TTL on its own. It gets little time,
// since whoever waits for semrun should not wait for a store that does not
// answer.
func (o *runOptions) release(ctx context.Context, lease semaphore.Lease, log *logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		log.Warnf("%v; the permit frees itself within %v", err, o.ttl)
		return
	}
	log.Infof("key %q: permit released", o.key)
}

// acquire waits for a permit until one is held, --timeout passes, or a
// signal arrives.
func (o *runOptions) acquire(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger) (semaphore.Lease, error) {
	host, _ := os.Hostname()
	req := o.req
	req.Holder = semaphore.HolderInfo{Host: host, PID: os.Getpid(), Command: filepath.Base(o.command[0])}
	// On a terminal a person watches: one line, kept up to date. Elsewhere
	// (cron) only --verbose says it, once.
	var line *waitLine
	defer func() { line.clear() }()
	var onWait func(semaphore.WaitState)
	switch {
	case !o.quiet && o.streams.ErrTerminal != nil:
		line = newWaitLine(o.streams.ErrOut, o.streams.ErrTerminal, o.key)
		onWait = line.update
	case o.verbose:
		var once sync.Once
		onWait = func(st semaphore.WaitState) {
			once.Do(func() { log.Infof("%s", waitText(o.key, st, -1)) })
		}
	}
	// A restart fence that holds the grant back is said once, terminal or
	// not: a cron job that waits for it must not wait without a word. On a
	// terminal the waiting line says it.
	fence := &fenceNotice{o: o, log: log, quiet: o.quiet || line != nil}
	req.OnWait = func(st semaphore.WaitState) {
		fence.saw(st.Fenced, req.NoWait)
		if onWait != nil {
			onWait(st)
		}
	}
	waitCtx := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	lease, err := signals.Wait(waitCtx, runner.Waiting{
		Acquire:  func(ctx context.Context) (semaphore.Lease, error) { return store.Acquire(ctx, req) },
		GiveBack: func(lease semaphore.Lease) { o.release(ctx, lease, log) },
		Stopping: line.clear,
	})
	var interrupted *runner.Interrupted
	if errors.As(err, &interrupted) {
		return nil, &interruptedError{key: o.key, sig: interrupted.Signal}
	}
	return o.acquired(ctx, lease, err, fence.left, log)
}

// fenceNotice says once that a restart fence holds the grant back by more
// than a second, in words true of a first start as of a restart.
type fenceNotice struct {
	o     *runOptions
	log   *logger
	quiet bool // -q, or a terminal, whose waiting line says it
	said  bool
	// left is the fence the last ask saw, for the --timeout line.
	left time.Duration
}

func (f *fenceNotice) saw(left time.Duration, noWait bool) {
	f.left = left
	if left <= time.Second || f.said {
		return
	}
	f.said = true
	then := "no grant until it ends (--restart-fence)"
	if noWait {
		then = "waiting for it to end, then trying once (--no-wait)"
	}
	if !f.quiet || (noWait && !f.o.quiet) {
		f.log.Warnf("key %q: %s, in %v: %s", f.o.key, fenceWhy(left, f.o.restartFence), left.Round(time.Second), then)
	}
}

// fenceWhy says why a fence holds with left to go, this caller's fence
// being fence: a server that started (for the first time or again) or
// took over as master less than the fence ago.
func fenceWhy(left, fence time.Duration) string {
	if ago := fence - left; left <= fence && ago >= 0 {
		return fmt.Sprintf("Redis started or failed over %v ago, less than the restart fence of %v", ago.Round(time.Second), fence)
	}
	return "Redis started or failed over less than the key's restart fence ago"
}

// acquired says how a wait ended: with the permit, or why not. fenced is
// what was left of a restart fence when the store last said.
func (o *runOptions) acquired(ctx context.Context, lease semaphore.Lease, err error, fenced time.Duration, log *logger) (semaphore.Lease, error) {
	var (
		fence *semaphore.FenceError
		full  *semaphore.LineError
	)
	switch {
	case err == nil:
		return lease, nil
	case errors.As(err, &fence):
		return nil, o.busy(log, fmt.Sprintf("key %q: %s: no grant for %v more (--restart-fence; --no-wait)", o.key, fenceWhy(fence.Left, o.restartFence), max(fence.Left.Round(time.Second), time.Second)))
	case errors.As(err, &full):
		return nil, o.busy(log, fmt.Sprintf("key %q: %d callers wait already, the most one key takes; not joining the line", o.key, full.Waiting))
	case errors.Is(err, semaphore.ErrBusy):
		return nil, o.busy(log, fmt.Sprintf("key %q: %s held (--no-wait)", o.key, permits(o.permits, "all ")))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil && fenced > 0:
		return nil, o.busy(log, fmt.Sprintf("key %q: no permit within %v (--timeout): %s, %v to go", o.key, o.timeout, fenceWhy(fenced, o.restartFence), fenced.Round(time.Second)))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil:
		return nil, o.busy(log, fmt.Sprintf("key %q: no permit within %v (--timeout)", o.key, o.timeout))
	}
	return nil, err
}

// busy is the outcome of a run that got no permit. With --busy-exit-code 0
// it is a quiet skip, said only with --verbose, since cron mails any output.
func (o *runOptions) busy(log *logger, why string) error {
	if o.busyExitCode == 0 {
		log.Infof("%s; skipped", why)
		return &busyError{code: 0}
	}
	return &busyError{code: o.busyExitCode, why: why}
}

// permits says "1 permit" or "all 3 permits", with all before a plural.
func permits(n int, all string) string {
	if n == 1 {
		return semaphore.Count(n, "permit")
	}
	return all + semaphore.Count(n, "permit")
}

// heldKeys are the keys the semruns this one runs under hold. Keys have no
// control characters, so a newline separates them unambiguously.
func (o *runOptions) heldKeys() []string {
	keys := strings.FieldsFunc(o.f.getenv(envHeldKeys), func(r rune) bool { return r == '\n' })
	if k := o.f.getenv(envHeldKey); k != "" && !slices.Contains(keys, k) {
		keys = append(keys, k)
	}
	return keys
}

// childEnv is semrun's environment for the child, less the variables that
// choose what semrun holds and the secrets it used, plus the SEMRUN_HELD_*
// variables and the fencing token.
func (o *runOptions) childEnv(environ []string, token int64) []string {
	drop := map[string]bool{
		"SEMRUN_KEY": true, "SEMRUN_PERMITS": true, envRedisPassword: true, envRedisCLIAuth: o.secrets.usedCLIAuth,
		envHeldKey: true, envHeldPermits: true, envFencingToken: true, envHeldKeys: true,
	}
	env := make([]string, 0, len(environ)+4)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		// Any URL with userinfo may carry a password, even one that does
		// not parse (a password with an unescaped /).
		if drop[name] || name == envNames["redis"] && strings.Contains(value, "@") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		envHeldKey+"="+o.key,
		envHeldKeys+"="+strings.Join(append(o.heldKeys(), o.key), "\n"),
		envHeldPermits+"="+strconv.Itoa(o.permits),
		envFencingToken+"="+strconv.FormatInt(token, 10),
	)
}
