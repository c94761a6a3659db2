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
	{"Flags", []string{"key", "permits", "timeout", "no-wait", "busy-exit-code", "weight", "label", "verbose", "quiet", "config", "log-format"}, false},
	{"Store (Redis by default, or --local)", []string{"redis", "local", "lock-dir", "cluster", "sentinel-master", "prefix", "connect-timeout", "events"}, true},
	{"TLS and passwords", []string{"tls-ca", "tls-cert", "tls-key", "tls-server-name", "tls-insecure", "redis-password-file"}, true},
	{"Leases and lost permits", []string{"ttl", "restart-fence", "min-replicas", "on-lost", "lost-exit-code", "revoked-exit-code", "kill-after"}, false},
	{"How long, and holds", []string{"max-runtime", "warn-after", "min-hold", "min-hold-after", "handle"}, false},
	{"The order of the line", []string{"priority", "priority-age", "supersede"}, false},
}

// outputFlags are the flags of the first group that status and doctor
// take too.
var outputFlags = []string{"verbose", "quiet", "config", "log-format"}

// usage is every command's usage, which --help shows under its long text:
// a run's flags in groups, with the variables and exit statuses; a
// subcommand's own flags and those of the store it reads, if any.
func usage(c *cobra.Command) error {
	w := c.OutOrStderr()
	root := c.Parent() == nil
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	var subs []*cobra.Command
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			subs, names = append(subs, sub), append(names, sub.Name())
		}
	}
	if len(subs) > 0 {
		fmt.Fprintf(w, "  %s %s ...\n", c.CommandPath(), strings.Join(names, "|"))
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	if len(subs) > 0 {
		fmt.Fprintln(w, "\nCommands:")
		for _, sub := range subs {
			fmt.Fprintf(w, "  %-11s %s\n", sub.Name(), sub.Short)
		}
	}
	// What c takes: its own flags, and those it inherits if it reads the
	// settings (version and completion do not).
	takes := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	takes.AddFlagSet(c.LocalFlags())
	if root || needsConfig(c) {
		takes.AddFlagSet(c.InheritedFlags())
	}
	own := c.LocalNonPersistentFlags()
	printed := map[string]bool{}
	for i, g := range flagGroups {
		set := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
		add := func(f *pflag.Flag) {
			if f != nil && !f.Hidden && !printed[f.Name] {
				set.AddFlag(f)
				printed[f.Name] = true
			}
		}
		switch {
		case root || g.forStore:
			for _, name := range g.names {
				add(takes.Lookup(name))
			}
		case i == 0: // a subcommand's first group: the output flags
			for _, name := range outputFlags {
				add(takes.Lookup(name))
			}
		}
		if i == 0 {
			// The rest go first: a run's flags of no group (--help), a
			// subcommand's own (status --json, doctor --restart-fence).
			takes.VisitAll(func(f *pflag.Flag) {
				if root && !inAnyGroup(f.Name) || !root && own.Lookup(f.Name) != nil {
					add(f)
				}
			})
		}
		printFlags(w, g.title, set)
	}
	if root {
		fmt.Fprint(w, runEpilogue())
	} else if len(subs) > 0 {
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
// come from, and what the exit statuses mean (from exitStatusDocs).
func runEpilogue() string {
	var briefs []string
	for _, d := range exitStatusDocs {
		if d.brief != "" {
			briefs = append(briefs, d.brief)
		}
	}
	statuses := wrap("Exit status: "+strings.Join(briefs, "; ")+". A command killed by a signal makes semrun die of it too.", 79)
	return `
Settings also come from variables, SEMRUN_ and the flag's name in capitals
(SEMRUN_PERMITS, SEMRUN_TTL; --redis is SEMRUN_REDIS_URL), but for --no-wait,
--verbose, --quiet and --handle; and from ~/.config/semrun/config.yaml, then
/etc/semrun/config.yaml, weaker in that order after flags. The Redis password:
the URL's, --redis-password-file, SEMRUN_REDIS_PASSWORD or REDISCLI_AUTH.

` + statuses + `

Use "semrun COMMAND --help" for more about a command; docs/ in semrun's
repository for the rest.
`
}

// wrap breaks text into lines of at most width columns, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for _, word := range strings.Fields(text) {
		switch {
		case line == 0:
		case line+1+len(word) > width:
			b.WriteByte('\n')
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}
