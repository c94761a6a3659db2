package cmd

import (
	"fmt"
	"path/filepath"
	"strings"
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
)

// runOptions are a run's: how it waits (waitOptions, which acquire shares),
// and what it does with its command.
type runOptions struct {
	waitOptions
	lostExitCode int
	// revokedExitCode is --revoked-exit-code: an operator revoked the permit.
	revokedExitCode int
	onLost          string
	// warnAfter says when the command runs long; 0: never. minHold keeps
	// the permit taken, as cooling, that long after its grant.
	warnAfter, minHold time.Duration
	// minHoldAfter is --min-hold-after's: after which ends of the
	// command the permit cools (semaphore.CoolAfter).
	minHoldAfter string
	// handle is --handle's: run under a hold instead of taking a permit.
	handle string
	// command is the command and its arguments.
	command []string
	// path is the command's file, found before the wait (runner.Find).
	path string
	// holds are --handle's, once read: one a key.
	holds []semaphore.Handle
}

func newCmdRun(common *commonOptions) *cobra.Command {
	o := &runOptions{waitOptions: waitOptions{commonOptions: common}}
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
			o.command, o.who = args, filepath.Base(args[0])
			if err := o.commonOptions.validate(cmd); err != nil {
				return err
			}
			if o.set("handle") && o.key == "" {
				if hs, err := o.parseHandle("--handle", o.handle); err == nil {
					o.key = hs[0].Key // the (first) key it names, for every line
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
			// The flags first, then the store's own settings as it opens,
			// then the command: a bad setting is 125 whatever the command.
			if err := o.validate(); err != nil {
				return err
			}
			store, err := o.openStore(log, runAsks{})
			if err != nil {
				return err
			}
			log.Infof("key %q: permits in %s", o.key, store)
			defer store.Close()
			if o.path, err = runner.Find(o.command[0]); err != nil {
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
	f.StringVar(&o.minHoldAfter, "min-hold-after", string(semaphore.CoolAfterAny), "after which ends of the command the permit cools (--min-hold): success (status 0; after a failure it is given back at once) or any")
	f.StringVar(&o.handle, "handle", "", "run under a hold that semrun acquire took, at once, instead of taking a permit: its handle, or @VAR to read it from variable VAR (ps shows arguments, not variables)")
	return cmd
}

// addWaitFlags adds the flags of what a caller asks for and how it
// waits, which runs and semrun acquire share.
func (o *waitOptions) addWaitFlags(f *pflag.FlagSet) {
	f.VarP(newKeys(&o.key, &o.keys), "key", "k", fmt.Sprintf("semaphore name (required); repeat it to hold up to %d keys at once, all or none", semaphore.MaxKeys))
	f.VarP(newInts(&o.permits, 1, &o.permitsEach), "permits", "n", "at most N holders of this key fleet-wide; once for every key, or once per --key, in order")
	f.Var(newInts(&o.weight, 1, &o.weightEach), "weight", "take K of the N permits at once, for a command that counts K times; once for every key, or once per --key")
	f.Var(newDuration(&o.ttl, 30*time.Second), "ttl", "lease: a holder that vanishes frees its permit after this")
	f.Var(newDuration(&o.timeout, 0), "timeout", "give up waiting for a permit after this (0: wait forever)")
	f.BoolVar(&o.noWait, "no-wait", false, fmt.Sprintf("try once, don't wait (but for a restart fence that ends within %v, or --timeout; a longer one is busy at once)", redisstore.NoWaitFence))
	f.Var(newInt(&o.busyExitCode, defaultBusyExitCode), "busy-exit-code", "exit status when no permit was obtained (0: skip quietly)")
	f.Var(newDuration(&o.restartFence, 0), "restart-fence", "grant nothing while Redis has been up for less than this, so that holders from before a restart that lost its data have stopped (default: the --ttl; 0: none)")
	f.Var(newInt(&o.minReplicas, 0), "min-replicas", "a grant or renewal counts only once this many Redis replicas have it (WAIT)")
	f.Var(newInt(&o.priority, 0), "priority", fmt.Sprintf("serve this caller before every waiter of lower priority, from %d to %d (Redis; it never stops a holder)", semaphore.MinPriority, semaphore.MaxPriority))
	f.Var(newDuration(&o.priorityAge, 0), "priority-age", fmt.Sprintf("raise this caller's priority by one for each such span it waits, so that nothing starves; at most %v (0: none; a key's stored age wins)", semaphore.MaxPriorityAge))
	f.BoolVar(&o.supersede, "supersede", false, "send away every waiter of the key that also gave --supersede: only the newest waits (holders are untouched)")
	f.StringVar(&o.labelText, "label", "", fmt.Sprintf("what status shows of this caller, at most %d bytes, never a secret ('' for none; default: the CI job's address when the environment names one)", semaphore.MaxLabel))
}
