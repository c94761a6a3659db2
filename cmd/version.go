package cmd

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by the release build with -ldflags "-X github.com/semrun/semrun/cmd.version=...".
var (
	version = ""
	commit  = ""
	date    = ""
)

// versionString is the ldflags version, else the module version go install recorded.
func versionString() string {
	v, c, d := version, commit, date
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			if bi.Main.Version != "" {
				v = bi.Main.Version
			}
			for _, s := range bi.Settings {
				switch {
				case s.Key == "vcs.revision" && c == "":
					c = s.Value
				case s.Key == "vcs.time" && d == "":
					d = s.Value
				}
			}
		}
	}
	out := "semrun " + v
	if c != "" {
		out += " commit " + c
	}
	if d != "" {
		out += " built " + d
	}
	return out
}

func newCmdVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print semrun's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
