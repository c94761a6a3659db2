package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroups order a run's flags in --help by what a user reaches for
// first; a flag in none of them goes under the first. status and doctor
// show the groups of the store they read.
var flagGroups = []struct {
	title    string
	names    []string
	forStore bool // status and doctor take these too
}{
	{"Flags", []string{"key", "permits", "timeout", "no-wait", "busy-exit-code", "weight", "verbose", "quiet", "config", "log-format"}, false},
	{"Store (Redis by default, or --local)", []string{"redis", "local", "lock-dir", "cluster", "sentinel-master", "prefix", "connect-timeout"}, true},
	{"TLS and passwords", []string{"tls-ca", "tls-cert", "tls-key", "tls-server-name", "tls-insecure", "redis-password-file"}, true},
	{"Leases and lost permits", []string{"ttl", "restart-fence", "min-replicas", "on-lost", "lost-exit-code", "kill-after"}, false},
}

// outputFlags are the flags of the first group that status and doctor
// take too.
var outputFlags = []string{"verbose", "quiet", "config", "log-format"}

// usage is every command's usage, which --help shows under its long text:
// a run's flags in groups, with the variables and exit statuses; a
// subcommand's own flags and those of the store it reads, if any.
func usage(c *cobra.Command) error {
	w := c.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	var subs []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			subs = append(subs, sub.Name())
		}
	}
	if len(subs) > 0 {
		fmt.Fprintf(w, "  %s %s ...\n", c.CommandPath(), strings.Join(subs, "|"))
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-11s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	all := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	all.AddFlagSet(c.LocalFlags())
	if c.Parent() == nil || needsConfig(c) {
		all.AddFlagSet(c.InheritedFlags())
	}
	printed := map[string]bool{}
	for i, g := range flagGroups {
		if c.Parent() != nil && !g.forStore && i > 0 {
			continue
		}
		set := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
		for _, name := range g.names {
			if f := all.Lookup(name); f != nil && !f.Hidden && (c.Parent() == nil || g.forStore || slices.Contains(outputFlags, name)) {
				set.AddFlag(f)
				printed[name] = true
			}
		}
		if i == 0 { // the rest of the command's own flags
			all.VisitAll(func(f *pflag.Flag) {
				if !printed[f.Name] && !f.Hidden && !inAnyGroup(f.Name) {
					set.AddFlag(f)
					printed[f.Name] = true
				}
			})
		}
		printFlags(w, g.title, set)
	}
	if c.Parent() == nil {
		fmt.Fprint(w, runEpilogue)
	} else if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nUse \"%s COMMAND --help\" for more about a command.\n", c.CommandPath())
	}
	return nil
}

func inAnyGroup(name string) bool {
	for _, g := range flagGroups {
		if slices.Contains(g.names, name) {
			return true
		}
	}
	return false
}

func printFlags(w io.Writer, title string, set *pflag.FlagSet) {
	if !set.HasFlags() {
		return
	}
	set.SortFlags = false
	fmt.Fprintf(w, "\n%s:\n%s", title, set.FlagUsages())
}

// runEpilogue tells what --help's flag lists do not: where else settings
// come from, and what the exit statuses mean.
var runEpilogue = `
Settings also come from variables, SEMRUN_ and the flag's name in capitals
(SEMRUN_PERMITS, SEMRUN_TTL; --redis is SEMRUN_REDIS_URL), but for --no-wait,
--verbose and --quiet; and from ~/.config/semrun/config.yaml, then
/etc/semrun/config.yaml, weaker in that order after flags. The Redis password:
the URL's, --redis-password-file, SEMRUN_REDIS_PASSWORD or REDISCLI_AUTH.

Exit status: the command's own; 75 no permit (--busy-exit-code); 112 permit
lost, command terminated (--lost-exit-code); 125 semrun's own failure before
the command started; 126 cannot execute; 127 not found; 128+N signal N ended
the wait. A command killed by a signal makes semrun die of it too.

Use "semrun COMMAND --help" for more about a command; docs/ in semrun's
repository for the rest.
`
