package cmd

import (
	"errors"
	"fmt"

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
	case errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "":
		if near := nearestFlag(c, unknown.GetSpecifiedName()); near != "" {
			return fmt.Errorf("unknown flag --%s: did you mean --%s?", unknown.GetSpecifiedName(), near)
		}
	}
	return err
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
