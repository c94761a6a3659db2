package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/semaphore"
)

func newCmdStatus(common *commonOptions) *cobra.Command {
	var asJSON bool
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "status [flags] [KEY...]",
		Short: "Show the holders, waiters and capacity of keys",
		Long: `status shows who holds and who waits for each KEY. Without a KEY, it shows
every key the store knows (with --local: every key in the lock directory).`,
		Args: keyArgs,
		RunE: func(cmd *cobra.Command, keys []string) error {
			return common.withStore(cmd, nil, func(store semaphore.Store, _ *logger) error {
				// After the store opened: a store setting it refuses is said first.
				if olderThan < 0 {
					return usageErrorf("%s: must not be negative", common.src.show("older-than", olderThan))
				}
				st, err := store.Status(cmd.Context(), keys)
				if err != nil {
					return err
				}
				semaphore.Deadlines(st)
				for i := range st {
					if st[i].Cooling == nil {
						st[i].Cooling = []semaphore.Cooling{} // a list in JSON, as holders
					}
				}
				old := 0
				if common.src.origin("older-than") != fromDefault {
					st, old = heldLonger(st, olderThan)
				}
				if asJSON {
					enc := json.NewEncoder(printable.JSON(cmd.OutOrStdout()))
					enc.SetIndent("", "  ")
					err = enc.Encode(st)
				} else {
					err = printStatus(cmd.OutOrStdout(), st)
				}
				if err != nil {
					return err
				}
				if err := unreadable(st); err != nil {
					return err
				}
				if old > 0 {
					return &olderError{holders: old, than: olderThan}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().Var(newDuration(&olderThan, 0), "older-than", "only the holders that have held longer than this, and exit 1 when there is any (an alert)")
	return cmd
}

// keyArgs refuses a command's KEY arguments that are no keys: status,
// events and metrics take any number of them.
func keyArgs(_ *cobra.Command, args []string) error {
	for _, k := range args {
		if err := semaphore.CheckKey(k); err != nil {
			return usageErrorf("key %q: %v", k, err)
		}
	}
	return nil
}

// heldLonger is keys cut down to the holders that have held longer than
// d, without the keys that have none and without waiters, and how many
// holders that leaves. A key that could not be read stays: it may have
// some.
func heldLonger(keys []semaphore.KeyStatus, d time.Duration) ([]semaphore.KeyStatus, int) {
	var out []semaphore.KeyStatus
	n := 0
	for _, k := range keys {
		if k.Error != "" {
			out = append(out, k)
			continue
		}
		var old []semaphore.Holder
		for _, h := range k.Holders {
			if h.Age > d {
				old = append(old, h)
			}
		}
		if len(old) == 0 {
			continue
		}
		k.Holders, k.Waiters, k.Cooling, k.Unlisted = old, nil, nil, 0
		out = append(out, k)
		n += len(old)
	}
	return out, n
}

// unreadable fails a status that could not read some key: its line says
// why, and the exit status tells a script.
func unreadable(keys []semaphore.KeyStatus) error {
	n := 0
	for _, k := range keys {
		if k.Error != "" {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &unreadableError{failed: n, total: len(keys)}
}

// coolingText says when a permit given back early (--min-hold) frees,
// seen at now, and how its command ended.
func coolingText(c semaphore.Cooling, now time.Time) string {
	exit := "after exit " + fmt.Sprint(c.ExitStatus)
	if c.ExitStatus < 0 {
		exit = "its command's status unknown"
	}
	id := ""
	if c.ID != "" {
		id = ", ID " + printable.String(c.ID) // what semrun key revoke ends it by
	}
	s := fmt.Sprintf("cooling until %s (in %v), %s: %s on %s, pid %d%s, %d of %d (--min-hold)",
		now.Add(c.EndsIn).Format("2006-01-02 15:04:05 MST"), c.EndsIn.Round(time.Second), exit,
		printable.String(c.Command), printable.String(c.Host), c.PID, id, c.Weight, c.Permits)
	if len(c.Slots.Numbers) > 0 {
		s += ", slots " + slotsColumn(c.Slots)
	}
	if c.Label != "" {
		s += ", label " + printable.String(c.Label)
	}
	return s
}

// slotsColumn is the SLOTS column of a row: the slots' numbers, each with
// its name escaped when named ("0 (gpu-a), 1 (gpu-b)"), "-" for none.
func slotsColumn(s semaphore.Slots) string {
	if len(s.Numbers) == 0 {
		return "-"
	}
	if len(s.Names) != len(s.Numbers) {
		return s.NumbersText()
	}
	parts := make([]string, len(s.Numbers))
	for i, n := range s.Numbers {
		parts[i] = fmt.Sprintf("%d (%s)", n, printable.String(s.Names[i]))
	}
	return strings.Join(parts, ", ")
}

// labelColumn is the LABEL column of a row: the label escaped, "-" for
// none.
func labelColumn(info semaphore.HolderInfo) string {
	if info.Label == "" {
		return "-"
	}
	return printable.String(info.Label)
}

// withColumn is the WITH column of a row: the other keys of a caller of
// several, quoted and escaped, "-" for none.
func withColumn(info semaphore.HolderInfo) string {
	if len(info.With) == 0 {
		return "-"
	}
	quoted := make([]string, len(info.With))
	for i, k := range info.With {
		quoted[i] = printable.String(strconv.Quote(k))
	}
	return strings.Join(quoted, ", ")
}

// withAny tells whether some row has other keys: only then is there a
// WITH column.
func withAny[T any](rows []T, info func(T) semaphore.HolderInfo) bool {
	return slices.ContainsFunc(rows, func(r T) bool { return len(info(r).With) > 0 })
}

// printStatus prints each key: a line of its counts, then a table of its
// holders, its coolings, and a table of its line.
func printStatus(w io.Writer, keys []semaphore.KeyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, k := range keys {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		if k.Error != "" {
			fmt.Fprintf(tw, "key %q: could not be read: %s\n", k.Key, printable.String(k.Error))
			continue
		}
		printKeyLine(tw, k)
		printHolders(tw, k.Holders)
		for _, c := range k.Cooling {
			fmt.Fprintf(tw, "  %s\n", coolingText(c, time.Now()))
		}
		printWaiters(tw, k)
	}
	return tw.Flush()
}

// printKeyLine prints the line that opens a key: held, capacity, the
// line's length, and what keeps it from granting.
func printKeyLine(w io.Writer, k semaphore.KeyStatus) {
	capacity := "?"
	if k.Capacity > 0 {
		capacity = fmt.Sprint(k.Capacity)
	}
	if k.StoredCapacity > 0 {
		capacity = fmt.Sprintf("%d (kept in the store)", k.StoredCapacity)
	}
	fmt.Fprintf(w, "key %q: %d held, capacity %s", k.Key, k.Held, capacity)
	if len(k.Waiters) > 0 {
		fmt.Fprintf(w, ", %d waiting", len(k.Waiters))
	}
	if k.Unlisted > 0 {
		fmt.Fprintf(w, ", %d more not listed", k.Unlisted)
	}
	if k.PriorityAge > 0 {
		fmt.Fprintf(w, ", priority age %v (kept in the store)", k.PriorityAge)
	}
	if k.Fenced > 0 {
		fmt.Fprintf(w, "; Redis started or failed over less than the restart fence ago: no grant for %v more", k.Fenced.Round(time.Second))
	}
	if k.Paused != nil {
		fmt.Fprintf(w, "; %s", pausedText(k.Paused))
	}
	fmt.Fprintln(w)
}

// printHolders prints the table of a key's holders, with a MAX-RUNTIME IN
// and a LABEL column where some holder has one.
func printHolders(w io.Writer, holders []semaphore.Holder) {
	if len(holders) == 0 {
		return
	}
	deadlines := slices.ContainsFunc(holders, func(h semaphore.Holder) bool { return h.MaxRuntime > 0 })
	// A LABEL column, last as it is the widest, where some row has one.
	labels := slices.ContainsFunc(holders, func(h semaphore.Holder) bool { return h.Label != "" })
	// HOLDS: the permits this holder takes (its weight), OF N: the
	// capacity it asked for. A lone "PERMITS 3" read as "holds 3".
	header := "  ID\tHOST\tPID\tCOMMAND\tHOLDS\tOF N\tAGE\tEXPIRES IN\tTOKEN"
	if deadlines {
		header += "\tMAX-RUNTIME IN" // only where some holder has one
	}
	slots := slices.ContainsFunc(holders, func(h semaphore.Holder) bool { return len(h.Slots.Numbers) > 0 })
	if slots {
		header += "\tSLOTS"
	}
	with := withAny(holders, func(h semaphore.Holder) semaphore.HolderInfo { return h.HolderInfo })
	if with {
		header += "\tWITH"
	}
	if labels {
		header += "\tLABEL"
	}
	fmt.Fprintln(w, header)
	for _, h := range holders {
		expires := "-" // held for as long as the holder lives
		if h.ExpiresIn > 0 {
			expires = h.ExpiresIn.Round(time.Millisecond).String()
		}
		command := printable.String(h.Command)
		if h.Hold {
			command = "(hold: semrun acquire)" // the PID is its keeper's
		}
		id := "-" // a store that names none
		if h.ID != "" {
			id = printable.String(h.ID)
		}
		fmt.Fprintf(w, "  %s\t%s\t%d\t%s\t%d\t%d\t%v\t%s\t%d", id, printable.String(h.Host), h.PID, command, h.Weight, h.Permits,
			h.Age.Round(time.Millisecond), expires, h.Token)
		if deadlines {
			deadline := "-"
			if h.MaxRuntime > 0 {
				deadline = h.DeadlineIn.Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "\t%s", deadline)
		}
		if slots {
			fmt.Fprintf(w, "\t%s", slotsColumn(h.Slots))
		}
		if with {
			fmt.Fprintf(w, "\t%s", withColumn(h.HolderInfo))
		}
		if labels {
			fmt.Fprintf(w, "\t%s", labelColumn(h.HolderInfo))
		}
		fmt.Fprintln(w)
	}
}

// printWaiters prints the table of k's line, with a PRIORITY column
// where some waiter's is not 0 or the key has an age, and a LABEL column
// where some waiter has one. Its columns are not the holders': tw is
// flushed first.
func printWaiters(tw *tabwriter.Writer, k semaphore.KeyStatus) {
	waiters := k.Waiters
	if len(waiters) == 0 {
		return
	}
	_ = tw.Flush()
	labels := slices.ContainsFunc(waiters, func(w semaphore.Waiter) bool { return w.Label != "" })
	priorities := k.PriorityAge > 0 || slices.ContainsFunc(waiters, func(w semaphore.Waiter) bool { return w.Priority != 0 })
	header := "  IN LINE\tHOST\tPID\tCOMMAND\tWANTS\tOF N\tWAITED"
	if priorities {
		header += "\tPRIORITY"
	}
	with := withAny(waiters, func(w semaphore.Waiter) semaphore.HolderInfo { return w.HolderInfo })
	if with {
		header += "\tWITH"
	}
	if labels {
		header += "\tLABEL"
	}
	fmt.Fprintln(tw, header)
	for _, q := range waiters {
		place := "-" // a store that keeps no line
		if q.Position > 0 {
			place = fmt.Sprint(q.Position)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%d\t%d\t%v", place, printable.String(q.Host), q.PID, printable.String(q.Command), q.Weight, q.Permits, q.Waited.Round(time.Millisecond))
		if priorities {
			fmt.Fprintf(tw, "\t%d", q.Priority)
		}
		if with {
			fmt.Fprintf(tw, "\t%s", withColumn(q.HolderInfo))
		}
		if labels {
			fmt.Fprintf(tw, "\t%s", labelColumn(q.HolderInfo))
		}
		fmt.Fprintln(tw)
	}
}
