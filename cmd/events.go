package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// maxSince bounds --since: no store keeps events longer.
const maxSince = 366 * 24 * time.Hour

func newCmdEvents(common *commonOptions) *cobra.Command {
	var asJSON, follow bool
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "events [flags] [KEY...]",
		Short: "Show what happened to keys: grants, releases, busy answers, losses, an operator's hand",
		Long: `events shows what happened to each KEY, oldest first, one event a line: grants,
releases (with the command's exit status and the time held), busy answers,
timeouts, losses, revokes, pauses and capacity changes. Each key keeps about
its last 1,000 events. Without a KEY, it shows every key the store keeps
events of. --follow then shows each new event as it happens, until
interrupted: SIGINT or SIGTERM ends it with status 0.`,
		Example: `  semrun events pdf --since 1h
  semrun events --follow
  semrun events nightly --json | jq 'select(.event == "release")'`,
		Args: keyArgs,
		RunE: func(cmd *cobra.Command, keys []string) error {
			checkSince := func() error {
				if since < 0 || since > maxSince {
					return usageErrorf("%s: must be from 0 to %v", common.src.show("since", since), maxSince)
				}
				return nil
			}
			return common.withStore(cmd, checkSince, func(store semaphore.Store, _ *logger) error {
				out := cmd.OutOrStdout()
				print := func(e semaphore.Event) error { return printEvent(out, e) }
				if asJSON {
					enc := json.NewEncoder(printable.JSON(out))
					print = func(e semaphore.Event) error { return enc.Encode(eventJSON{Event: e, Label: e.Label}) }
				}
				ctx := cmd.Context()
				if follow {
					// Followed until interrupted: SIGTERM or SIGINT is how a
					// follow ends, as for metrics, not a failure.
					signals, stopSignals := runner.UntilStopped()
					defer stopSignals()
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
					go func() {
						select {
						case <-signals:
							stop()
						case <-ctx.Done():
						}
					}()
				}
				return store.Events(ctx, semaphore.EventQuery{Keys: keys, Since: since, Follow: follow}, print)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then show each new event as it happens, until interrupted")
	cmd.Flags().Var(newDuration(&since, 0), "since", "only the events of this last while (1h, 30m; 0: every event kept)")
	return cmd
}

// eventJSON is an event as --json prints it: the label always, so that a
// script finds every field it may read.
type eventJSON struct {
	semaphore.Event
	Label string `json:"label"`
}

// eventTime is how an event's time is printed: the local time, to the
// millisecond, with its offset, as RFC 3339.
const eventTime = "2006-01-02T15:04:05.000Z07:00"

// printEvent prints one event on one line: its time, key and kind, who
// (holder id, host:pid, command, label, the request of a caller of
// several keys) and what came of it. Everything
// but the time was read from the store, so is escaped: the kind too,
// which a store checks, but a store's bug must not drive a terminal.
func printEvent(w io.Writer, e semaphore.Event) error {
	parts := []string{e.Time.Local().Format(eventTime), printable.String(e.Key), printable.String(string(e.Kind))}
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	if e.Holder != "" {
		add("holder %s", printable.String(e.Holder))
	}
	if e.Host != "" || e.PID != 0 {
		add("%s:%d", printable.String(e.Host), e.PID)
	}
	if e.Command != "" {
		add("%s", printable.String(e.Command))
	}
	if e.Label != "" {
		add("label %s", strconv.Quote(e.Label))
	}
	if e.Request != "" {
		// A caller of several keys: the same under each of them.
		add("request %s", printable.String(e.Request))
	}
	if len(e.Slots.Numbers) > 0 {
		add("slots %s", e.Slots.NumbersText())
	}
	switch e.Kind {
	case semaphore.EventGrant:
		add("token %d, waited %s", e.Token, short(e.Waited))
	case semaphore.EventRelease:
		if e.ExitStatus != nil {
			add("exit %d,", *e.ExitStatus)
		}
		add("held %s", short(e.Held))
		if e.Cooling > 0 {
			add("(cooling %s more)", short(e.Cooling))
		}
	case semaphore.EventLost:
		if e.Held > 0 {
			add("after %s held", short(e.Held))
		}
	case semaphore.EventTimeout, semaphore.EventLeave:
		add("after %s waiting", short(e.Waited))
	case semaphore.EventCapacity:
		if e.Capacity > 0 {
			add("stored capacity %d", e.Capacity)
		} else {
			add("stored capacity unset")
		}
		if e.Reason != "" {
			// A capacity's reason is its slots' names (semrun key set --slots).
			add("slots named %s", strconv.Quote(e.Reason))
			e.Reason = ""
		}
	case semaphore.EventPause:
		if e.Until > 0 {
			add("for %s", short(e.Until))
		} else {
			add("until resumed")
		}
	case semaphore.EventRevoke:
		if e.Forced {
			add("forced")
		}
	case semaphore.EventSupersede:
		if e.By != nil {
			add("by %s:%d", printable.String(e.By.Host), e.By.PID)
			if e.By.Label != "" {
				add("label %s", strconv.Quote(e.By.Label))
			}
		}
		add("after %s waiting", short(e.Waited))
	case semaphore.EventPriorityAge:
		// The age is kept in Until.
		if e.Until > 0 {
			add("stored priority age %s", short(e.Until))
		} else {
			add("stored priority age unset")
		}
	}
	if e.Reason != "" {
		add("reason %s", strconv.Quote(e.Reason))
	}
	_, err := fmt.Fprintln(w, strings.Join(parts, " "))
	return err
}

// short says a duration as a person reads it: 120ms, 4.2s, 3m10s, 2h5m.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
