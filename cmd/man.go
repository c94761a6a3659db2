package cmd

import (
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ManSection is a section of semrun(1) that cobra's man page generator does
// not write, built from the tables the code itself uses, so that the page
// cannot drift from what semrun does.
type ManSection struct {
	// Title names the section (EXIT STATUS), or a subsection when Sub.
	Title string
	Sub   bool
	// Intro is a paragraph before the entries; may be empty.
	Intro   string
	Entries []ManEntry
}

// ManEntry is one term of a section (a status, a variable) and what it means.
type ManEntry struct {
	Term, Text string
}

// ManSections are semrun(1)'s EXIT STATUS and ENVIRONMENT: the statuses of
// exitStatusDocs; the variables that set root's flags (envNames) and the
// Redis password; and the variables the command gets (childVariables).
func ManSections(root *cobra.Command) []ManSection {
	status := ManSection{Title: "EXIT STATUS",
		Intro: "Every status that is not the command's own comes with one line on stderr saying why, but for a busy run with --busy-exit-code 0."}
	for _, d := range exitStatusDocs {
		status.Entries = append(status.Entries, ManEntry{d.status, d.text})
	}

	env := ManSection{Title: "ENVIRONMENT",
		Intro: "Settings come from flags, then these variables, then the user's config file (~/.config/semrun/config.yaml, or semrun/config.yaml in XDG_CONFIG_HOME), " +
			"then the system's (see --config). An empty variable is unset. --no-wait, --verbose and --quiet have no variable."}
	for _, f := range settingVariables(root) {
		env.Entries = append(env.Entries, ManEntry{envNames[f.Name], "--" + f.Name + ": " + f.Usage})
	}
	env.Entries = append(env.Entries,
		ManEntry{envRedisPassword, "the Redis password, when the URL has none and --redis-password-file is not given"},
		ManEntry{envRedisCLIAuth, "redis-cli's password variable, read when " + envRedisPassword + " is not set"})

	child := ManSection{Title: "Variables the command gets", Sub: true,
		Intro: "The command gets semrun's environment less " + envNames["key"] + " and " + envNames["permits"] +
			" (a semrun started inside it must not inherit its key or capacity), " + envRedisPassword + ", " + envRedisCLIAuth +
			" when semrun used it, and " + envNames["redis"] + " when it has userinfo (which may hold a password); plus:"}
	for _, v := range childVariables {
		child.Entries = append(child.Entries, ManEntry{v.name, v.meaning})
	}
	return []ManSection{status, env, child}
}

// settingVariables are root's flags that a variable sets, in --help's order.
func settingVariables(root *cobra.Command) []*pflag.Flag {
	all := pflag.NewFlagSet("semrun", pflag.ContinueOnError)
	all.AddFlagSet(root.Flags())
	all.AddFlagSet(root.PersistentFlags())
	var out []*pflag.Flag
	add := func(f *pflag.Flag) {
		if f != nil && !f.Hidden && envNames[f.Name] != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, g := range flagGroups {
		for _, name := range g.names {
			add(all.Lookup(name))
		}
	}
	all.VisitAll(add)
	return out
}
