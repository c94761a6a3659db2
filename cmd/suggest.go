package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError puts pflag's errors in the user's words: "--permits abc: not a
// whole number", and a suggestion for a mistyped flag.
func flagError(c *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	var unknown *pflag.NotExistError
	switch {
	case errors.As(err, &invalid):
		return fmt.Errorf("--%s %s: %w", invalid.GetFlag().Name, invalid.GetValue(), errors.Unwrap(invalid))
	case errors.As(err, &unknown) && c.Parent() == nil && len(c.Flags().Args()) > 0:
		// A flag after the command's name (semrun -k pdf ls -l) is the
		// command's, which must follow --.
		return fmt.Errorf("%w: put the command after -- (semrun [flags] -- %s ...)", err, c.Flags().Args()[0])
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "":
		if near := nearestFlag(c, unknown.GetSpecifiedName()); near != "" {
			return fmt.Errorf("unknown flag --%s: did you mean --%s?", unknown.GetSpecifiedName(), near)
		}
	}
	return err
}

// oneDashLongFlag refuses a long flag's name after one dash: pflag reads
// -key pdf as -k ey, and the command would run under the key "ey". Only
// what comes before -- is looked at: the rest is the command's.
func oneDashLongFlag(root *cobra.Command, args []string) error {
	long := map[string]*pflag.Flag{}
	visitFlags(root, func(f *pflag.Flag) { long[f.Name] = f })
	for _, arg := range args {
		if arg == "--" {
			return nil
		}
		if len(arg) < 3 || arg[0] != '-' || arg[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(arg[1:], "=") // the value may be a secret: never said
		if f, ok := long[name]; ok {
			if f.Shorthand != "" {
				return usageErrorf("-%s: did you mean --%s? (one dash is for one letter: -%s)", name, name, f.Shorthand)
			}
			return usageErrorf("-%s: did you mean --%s? (one dash is for one letter)", name, name)
		}
	}
	return nil
}

// nearestFlag is the shown flag of c whose name is closest to name.
func nearestFlag(c *cobra.Command, name string) string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	return nearestName(name, names)
}

// nearestName is the name of names closest to name, within two edits
// (--permit, stauts), the first in order of a tie; "" when none is.
func nearestName(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if d := editDistance(name, n); d < bestDist || d == bestDist && n < best {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes:
// flag names are ASCII.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
