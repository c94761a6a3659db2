package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/semaphore"
)

func newCmdDoctor(common *commonOptions) *cobra.Command {
	var (
		asJSON bool
		asks   runAsks
	)
	cmd := &cobra.Command{
		Use:   "doctor [flags]",
		Short: "Check that the store can keep semrun's promises",
		Long: `doctor checks the store a run would use (the same flags, environment and
config file), one line per check, each problem with its fix. With Redis: the
round trip, the server's version, that the user may send every command semrun
sends, that semrun's scripts run (on a throw-away key under the prefix, removed
afterwards), persistence, maxmemory-policy and replication (with --min-replicas,
that it is more than half of the master's replicas). With --local: the lock
directory, and a lock taken and freed in it.

It exits 0 when nothing would break semrun (warnings allowed), 1 when something
would, and 125 for bad flags or values.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unexpected argument %q: doctor takes none", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := common.validate(cmd); err != nil {
				return err
			}
			checks, err := doctor(cmd.Context(), common, asks, common.logger(cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(printable.JSON(cmd.OutOrStdout()))
				enc.SetIndent("", "  ")
				if err := enc.Encode(checks); err != nil {
					return err
				}
			} else if err := printChecks(cmd.OutOrStdout(), checks); err != nil {
				return err
			}
			return doctorOutcome(checks)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of {check, status, detail, fix}")
	cmd.Flags().Var(newDuration(&asks.fence, defaultRestartFence), "restart-fence", "warn while Redis has been up for less than this: a run's restart fence (its --ttl, unless set)")
	cmd.Flags().Var(newInt(&asks.minReplicas, 0), "min-replicas", "a run's --min-replicas: warn unless it is more than half of the master's replicas, fail when the master has fewer")
	return cmd
}

// doctor runs the checks of the store the settings chose. A lock directory
// that cannot be used is a finding, not bad input: it is the first check.
// On Windows, --local itself is refused, as for a run.
func doctor(ctx context.Context, common *commonOptions, asks runAsks, log *logger) ([]semaphore.Check, error) {
	store, err := common.openStore(log, asks)
	if err != nil {
		// A lock directory that exists but cannot be used is a finding; a
		// setting refused is bad input, as for a run.
		var refused *semaphore.SettingError
		if common.local && runtime.GOOS != "windows" && !errors.As(err, &refused) {
			return []semaphore.Check{{
				Name: "lock-dir", Status: semaphore.CheckFail, Detail: err.Error(),
				Fix: "mend the directory as said, or choose another with --lock-dir (see docs/how-it-works.md, The local store)",
			}}, nil
		}
		return nil, err
	}
	defer store.Close()
	return append(configChecks(common), store.Doctor(ctx)...), nil
}

// configChecks warn of each config file key that no command takes (see
// unknownSettings): a typo there changes nothing, in silence.
func configChecks(common *commonOptions) []semaphore.Check {
	var checks []semaphore.Check
	for _, w := range common.settings.unknown {
		checks = append(checks, semaphore.Check{Name: "config", Status: semaphore.CheckWarn, Detail: w,
			Fix: "correct its name, or remove it; semrun --help lists the settings"})
	}
	return checks
}

// printChecks writes one line per check: its status (problems in capitals),
// name, detail and fix.
func printChecks(w io.Writer, checks []semaphore.Check) error {
	var b strings.Builder
	for _, c := range checks {
		status := string(c.Status)
		if c.Status == semaphore.CheckWarn || c.Status == semaphore.CheckFail {
			status = strings.ToUpper(status)
		}
		fmt.Fprintf(&b, "%-6s%s: %s", status, c.Name, printable.String(c.Detail))
		if c.Fix != "" {
			fmt.Fprintf(&b, "; fix: %s", printable.String(c.Fix))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// doctorOutcome is a doctorError naming the checks that failed, or nil.
func doctorOutcome(checks []semaphore.Check) error {
	var failed []string
	for _, c := range checks {
		// In a cluster, a check runs once per master: named once.
		if c.Status == semaphore.CheckFail && !slices.Contains(failed, c.Name) {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &doctorError{failed: failed}
}
