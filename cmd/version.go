package cmd

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Set by the release build with -ldflags "-X github.com/semrun/semrun/cmd.version=...".
var (
	version = ""
	commit  = ""
	date    = ""
)

// versionString is the ldflags version, else what the Go build recorded.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(version, commit, date, bi)
}

// versionOf says which semrun this is: the version, commit and date a
// release stamped in, else those the Go build recorded of the module or
// the clone it was built in (go install ...@v1.2.3; go build in a clone:
// its commit, and +dirty for changes not committed). A build that
// recorded nothing (go run, -buildvcs=false) says so.
func versionOf(v, c, d string, bi *debug.BuildInfo) string {
	modified := false
	if v == "" && bi != nil {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.time" && d == "":
				d = s.Value
			case s.Key == "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	switch {
	case v == "" && c == "":
		return "semrun (devel): built without version control information (go run, or -buildvcs=false), so its commit is unknown"
	case v == "":
		v = "(devel)"
	}
	out := "semrun " + v
	if c != "" {
		out += " commit " + c
		if modified && !strings.HasSuffix(v, "+dirty") {
			out += " with changes not committed"
		}
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
