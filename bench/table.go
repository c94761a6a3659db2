package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// A table is one part's result: a title, rows, and notes under it. It
// prints as aligned text or, with -markdown, as a markdown table to paste
// into docs/benchmarks.md, without the target column: targets are the
// project's, not what users read.
type table struct {
	title string
	head  []string
	rows  [][]string
	notes []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) print(w io.Writer, markdown bool) {
	if markdown {
		t = t.withoutTargets()
		fmt.Fprintf(w, "#### %s\n\n", t.title)
		fmt.Fprintf(w, "| %s |\n", strings.Join(t.head, " | "))
		seps := make([]string, len(t.head))
		for i := range seps {
			seps[i] = "--:"
			if i == 0 {
				seps[i] = ":--"
			}
		}
		fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
		for _, r := range t.rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		if len(t.notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range t.notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "== %s\n", t.title)
	width := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad) // names left, numbers right
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.head)
	for _, r := range t.rows {
		line(r)
	}
	for _, n := range t.notes {
		fmt.Fprintf(w, "  * %s\n", n)
	}
	fmt.Fprintln(w)
}

// quantile is the nearest-rank q-quantile of sorted values.
func quantile[T int64 | time.Duration | float64](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)) + 0.999999) // ceil(q·n), the nearest rank
	return sorted[min(max(i, 1), len(sorted))-1]
}

// ms shows d in milliseconds, with as many decimals as its size deserves.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 0:
		return fmt.Sprintf("%.2f ms", f)
	case f < 10:
		return fmt.Sprintf("%.2f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}

// ratio shows a/b as "2.31×", or "–" without a base.
func ratio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// verdict shows whether a target is met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// withoutTargets is t less its target column.
func (t *table) withoutTargets() *table {
	col := slices.Index(t.head, "target")
	if col < 0 {
		return t
	}
	out := &table{title: t.title, head: slices.Delete(slices.Clone(t.head), col, col+1), notes: t.notes}
	for _, r := range t.rows {
		if col < len(r) {
			r = slices.Delete(slices.Clone(r), col, col+1)
		}
		out.rows = append(out.rows, r)
	}
	return out
}
