//go:build semrun_nometrics

package cmd

import (
	"errors"

	"github.com/spf13/cobra"
)

// newCmdMetrics, in a semrun built with the tag semrun_nometrics, is a
// metrics command without the metrics code: the bench times the start-up
// of every run with and without that code linked, side by side, to show
// that a run that serves no metrics pays nothing for them.
func newCmdMetrics(*commonOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "metrics",
		Short: "Not in this build (semrun_nometrics)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("metrics: not in this build of semrun (built with the tag semrun_nometrics)")
		},
	}
}
