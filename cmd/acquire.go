package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/keeper"
	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// defaultMaxRuntime ends a forgotten hold.
const defaultMaxRuntime = time.Hour

// acquireOptions are semrun acquire's: a run's wait, and how long the hold
// may last.
type acquireOptions struct {
	waitOptions
	ownerPID int
	json     bool
	// owner watches --owner-pid's process, once found.
	owner *keeper.Owner
}

func newCmdAcquire(common *commonOptions) *cobra.Command {
	o := &acquireOptions{waitOptions: waitOptions{commonOptions: common, who: "semrun acquire"}}
	cmd := &cobra.Command{
		Use:   "acquire [flags]",
		Short: "Take a permit and keep it after semrun exits; print its handle",
		Long: `semrun acquire waits in the same line as runs and, once it holds a permit,
prints SEMRUN_HANDLE, SEMRUN_HELD_KEY, SEMRUN_HELD_PERMITS and
SEMRUN_FENCING_TOKEN, one a line (ready for eval and for $GITHUB_ENV), and
exits 0. A keeper process it leaves behind renews the permit until
semrun release, --max-runtime, the exit of --owner-pid, or SIGTERM, SIGINT or
SIGHUP to the keeper. Whoever has the handle can run under the permit
(semrun --handle) and release it. With several keys (-k a -k b), one handle
covers them all, and the variables tell of the first.`,
		Example: `  hold=$(semrun acquire -k staging --max-runtime 30m) || exit
  set -a; eval "$hold"; set +a
  trap 'semrun release' EXIT
  semrun --handle @SEMRUN_HANDLE -- ./migrate.sh
  semrun --handle @SEMRUN_HANDLE -- ./deploy.sh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			check := func() error {
				o.logAttrs = append(o.logAttrs, "key", o.key)
				return o.validate()
			}
			return o.withStore(cmd, check, func(store semaphore.Store, log *logger) error {
				if o.keeper != nil {
					return o.keep(cmd.Context(), store, log)
				}
				return o.acquireHold(cmd.Context(), store, log)
			})
		},
	}
	f := cmd.Flags()
	o.addWaitFlags(f)
	f.Var(newDuration(&o.maxRuntime, defaultMaxRuntime), "max-runtime", "end the hold after this, so that a forgotten one ends (0: never)")
	f.Var(newInt(&o.ownerPID, 0), "owner-pid", "end the hold when this process exits (a CI job's shell, say)")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of variables")
	return cmd
}

// validate checks acquire's flags and finds --owner-pid's process.
func (o *acquireOptions) validate() error {
	if err := o.validateWait(); err != nil {
		return err
	}
	if o.maxRuntime < 0 {
		return usageErrorf("%s: must not be negative", o.src.show("max-runtime", o.maxRuntime))
	}
	// The store ends the hold at its bound too: what --handle runs need
	// to stop their commands.
	o.killAfter = holdKillAfter(o.ttl)
	if err := o.bound(0, semaphore.CoolAfterAny); err != nil {
		return err
	}
	if o.keeper != nil {
		// The keeper is handed its owner, and leaves acquire's directory.
		return o.settleKeeper()
	}
	if o.set("owner-pid") {
		if err := o.commandLineOnly("owner-pid"); err != nil {
			return err
		}
		var err error
		if o.owner, err = findOwner(o.ownerPID); err != nil {
			return usageErrorf("%s: %v", o.src.show("owner-pid", o.ownerPID), err)
		}
	}
	return nil
}

// holdKillAfter is the kill-after a hold of lease ttl is bound with: a
// run's default.
func holdKillAfter(ttl time.Duration) time.Duration {
	return min(defaultKillAfter, runner.MaxKillAfter(ttl))
}

// acquireHold waits for a permit, leaves a keeper that holds it, and
// prints its handle.
func (o *acquireOptions) acquireHold(ctx context.Context, store semaphore.Store, log *logger) error {
	defer o.owner.Close()
	signals := runner.CatchSignals()
	var waitUntil time.Time
	if o.timeout > 0 {
		waitUntil = time.Now().Add(o.timeout)
	}
	lease, err := o.acquireAll(ctx, store, signals, log, waitUntil)
	if err != nil {
		return err
	}
	granted := time.Now()
	tokens := semaphore.TokensOf(lease)
	log.Infof("%s: permit held, fencing token %s; starting its keeper", o.keysText(), tokensText(tokens))
	hs, keeper, toKeeper, err := o.startKeeper(ctx, store, lease, granted)
	if err != nil {
		o.release(ctx, lease, log)
		return fmt.Errorf("%s: %w; nothing held", o.keysText(), err)
	}
	defer toKeeper.Close()
	log.Infof("%s: kept by pid %d", o.keysText(), keeper)
	// The lease is the keeper's now: this process lets go of it by exiting.
	if err := o.printHold(o.f.Streams.Out, hs, tokens, semaphore.SlotsOf(lease), keeper); err != nil {
		// Nobody has the handle: the keeper, not told it was printed, ends the hold.
		return fmt.Errorf("%s: print the handle: %w; the hold is given back", o.keysText(), err)
	}
	if err := toKeeper.Printed(); err != nil {
		return fmt.Errorf("%s: its keeper stopped: %w; nothing held", o.keysText(), err)
	}
	return nil
}

// Variables acquire prints, besides the child's own.
const envHandle = "SEMRUN_HANDLE"

// printHold prints what eval, $GITHUB_ENV or a JSON reader need of a hold:
// of several keys, the handle names them all, and the variables tell of
// the first, as a run's command gets them (the runs under the handle get
// every key's token).
func (o *acquireOptions) printHold(w io.Writer, hs []semaphore.Handle, tokens []int64, slots []semaphore.Slots, keeper int) error {
	handle := semaphore.HandlesText(hs)
	if o.json {
		host, _ := os.Hostname()
		type keyJSON struct {
			Key     string `json:"key"`
			Permits int    `json:"permits"`
			Weight  int    `json:"weight"`
			Token   int64  `json:"token"`
			semaphore.Slots
		}
		var keys []keyJSON // of several keys only
		for i, h := range hs {
			if len(hs) > 1 {
				keys = append(keys, keyJSON{h.Key, o.permitsOf(i), o.weightOf(i), tokens[i], slots[i]})
			}
		}
		return json.NewEncoder(printable.JSON(w)).Encode(struct {
			Handle  string `json:"handle"`
			Key     string `json:"key"`
			Permits int    `json:"permits"`
			Weight  int    `json:"weight"`
			Token   int64  `json:"token"`
			semaphore.Slots
			Keys   []keyJSON `json:"keys,omitempty"`
			Host   string    `json:"host"`
			Keeper int       `json:"keeper_pid"`
			Label  string    `json:"label,omitempty"`
		}{handle, hs[0].Key, o.permitsOf(0), o.weightOf(0), tokens[0], slots[0], keys, host, keeper, o.req.Holder.Label})
	}
	_, err := fmt.Fprintf(w, "%s=%s\n%s=%s\n%s=%d\n%s=%d\n",
		envHandle, handle, envHeldKey, shellWord(hs[0].Key), envHeldPermits, o.permitsOf(0), envFencingToken, tokens[0])
	if err != nil {
		return err
	}
	// The first key's slots, as a run's command gets them; the steps
	// under the handle get every key's.
	if first := slots[0]; len(first.Numbers) > 0 {
		_, err = fmt.Fprintf(w, "%s=%d\n%s=%s\n", envSlot, first.Numbers[0], envSlots, first.NumbersText())
		if err == nil && len(first.Names) > 0 {
			_, err = fmt.Fprintf(w, "%s=%s\n%s=%s\n", envSlotName, shellWord(first.Names[0]), envSlotNames, shellWord(first.NamesText()))
		}
	}
	return err
}

// shellWord is s as one shell word: as it is when a shell and a CI
// variable file take it so, else in single quotes for eval.
func shellWord(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:@%+,=-", r))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
