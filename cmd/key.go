package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/semaphore"
)

// keyOptions are semrun key's: which key, and what to print.
type keyOptions struct {
	*commonOptions
	json bool
}

func newCmdKey(common *commonOptions) *cobra.Command {
	o := &keyOptions{commonOptions: common}
	cmd := &cobra.Command{
		Use:   "key",
		Short: "An operator's hand on a key: stored capacity and priority age, pause, drain, revoke",
		Long: `semrun key changes how a key serves every caller, from one place: a capacity
kept in the store, which wins over each caller's --permits (a priority age
too, over each caller's --priority-age); a pause, during
which nobody is granted the key; a drain, which pauses and waits until nobody
holds it; and a revoke, which stops one holder's command. Its settings last
until unset. Each prints one line, or --json.`,
		Example: `  semrun key set licence --permits 7
  semrun key pause db --reason "upkeep until 02:00" --for 2h
  semrun key drain db --timeout 10m && ./maintain.sh; semrun key resume db
  semrun key revoke pdf --holder 3fa2b1c9d0 --reason "host is gone"`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().BoolVar(&o.json, "json", false, "print JSON")
	cmd.AddCommand(o.newCmdShow(), o.newCmdSet(), o.newCmdUnset(), o.newCmdPause(), o.newCmdResume(), o.newCmdDrain(), o.newCmdRevoke())
	return cmd
}

func (o *keyOptions) newCmdShow() *cobra.Command {
	return o.sub("show KEY", "Show KEY's stored capacity, pause and holders",
		func(ctx context.Context, store semaphore.Store, key string) error { return o.say(ctx, store, key, "") })
}

func (o *keyOptions) newCmdSet() *cobra.Command {
	var permits int
	var slots string
	var age time.Duration
	set := o.sub("set KEY --permits N | --slots NAME,NAME... | --priority-age D", "Keep a capacity or a priority age for KEY in the store, which wins over every caller's",
		func(ctx context.Context, store semaphore.Store, key string) error {
			var said []string
			// The age first: a store that keeps none (--local) refuses it
			// before anything is set.
			if o.src.origin("priority-age") == fromFlag {
				if err := store.SetPriorityAge(ctx, key, age); err != nil {
					return err
				}
				said = append(said, priorityAgeText(age))
			}
			switch {
			case slots != "":
				names := strings.Split(slots, ",")
				if err := store.SetSlots(ctx, key, names); err != nil {
					return err
				}
				said = slices.Insert(said, 0, fmt.Sprintf("capacity %d, kept in the store, slots named %s: every caller is admitted against it",
					len(names), printable.String(strings.Join(names, ", "))))
			case o.src.origin("permits") == fromFlag:
				if err := store.SetCapacity(ctx, key, permits); err != nil {
					return err
				}
				said = slices.Insert(said, 0, fmt.Sprintf("capacity %d, kept in the store: every caller is admitted against it", permits))
			}
			return o.say(ctx, store, key, fmt.Sprintf("key %q: %s", key, strings.Join(said, "; ")))
		})
	set.Flags().Var(newInt(&permits, 0), "permits", "the capacity: at most N holders of KEY, whatever each caller asks")
	set.Flags().StringVar(&slots, "slots", "", "name KEY's slots, slot 0's first (a GPU's, a database's): the capacity is their number, and a holder's command gets its slots' names in SEMRUN_SLOT_NAME(S)")
	set.Flags().Var(newDuration(&age, 0), "priority-age", fmt.Sprintf("raise every waiter's priority by one for each such span it waits, whatever each caller asks (at most %v; 0 unsets it); alone or with --permits or --slots", semaphore.MaxPriorityAge))
	set.PreRunE = func(cmd *cobra.Command, _ []string) error {
		named := cmd.Flags().Changed("slots")
		// SEMRUN_PRIORITY_AGE and a config file's priority-age are the
		// runs', as SEMRUN_PERMITS is.
		aged := o.src.origin("priority-age") == fromFlag
		if aged {
			if err := semaphore.CheckPriorityAge(age); err != nil {
				return o.refused(err)
			}
		}
		switch {
		case named && o.src.origin("permits") == fromFlag:
			return usageErrorf("--permits and --slots: give one (the capacity of named slots is their number)")
		case named:
			if err := semaphore.CheckSlotNames(strings.Split(slots, ",")); err != nil {
				return usageErrorf("--slots %s: %v", printable.String(strconv.Quote(semaphore.Clip(slots, 60))), errors.Unwrap(err))
			}
			return nil
		case o.src.origin("permits") != fromFlag && aged:
			return nil
		case o.src.origin("permits") != fromFlag:
			// SEMRUN_PERMITS and a config file's permits are the runs':
			// a capacity every caller is held to is named where it is set.
			return usageErrorf("--permits, --slots or --priority-age is required: the capacity to keep, from 1 to %d, the names of its slots, or the priority age", semaphore.MaxPermits)
		}
		if permits < 1 || permits > semaphore.MaxPermits {
			return usageErrorf("%s: must be from 1 to %d", o.src.show("permits", permits), semaphore.MaxPermits)
		}
		return nil
	}
	return set
}

// priorityAgeText says what a stored priority age does: d, or 0 for none.
func priorityAgeText(d time.Duration) string {
	if d == 0 {
		return "no stored priority age: each caller's --priority-age counts"
	}
	return fmt.Sprintf("priority age %v, kept in the store: every waiter's priority rises by one for each %v it waits", d, d)
}

func (o *keyOptions) newCmdUnset() *cobra.Command {
	return o.sub("unset KEY", "Forget KEY's stored capacity: each caller's --permits counts again",
		func(ctx context.Context, store semaphore.Store, key string) error {
			if err := store.SetCapacity(ctx, key, 0); err != nil {
				return err
			}
			return o.say(ctx, store, key, fmt.Sprintf("key %q: no stored capacity: each caller's --permits counts", key))
		})
}

func (o *keyOptions) newCmdPause() *cobra.Command {
	var reason string
	var pauseFor time.Duration
	pause := o.sub("pause KEY [--reason TEXT] [--for D]", "Grant KEY to nobody until resumed: holders run on, waiters keep their places",
		func(ctx context.Context, store semaphore.Store, key string) error {
			if err := store.Pause(ctx, key, reason, pauseFor); err != nil {
				return err
			}
			return o.say(ctx, store, key, fmt.Sprintf("key %q: %s", key, pausedText(&semaphore.Pause{Reason: reason, EndsIn: pauseFor})))
		})
	addReasonFlag(pause, &reason)
	pause.Flags().Var(newDuration(&pauseFor, 0), "for", "resume on its own after this, so that a forgotten pause heals (0: until resumed)")
	return pause
}

func (o *keyOptions) newCmdResume() *cobra.Command {
	return o.sub("resume KEY", "End KEY's pause: its line is served again",
		func(ctx context.Context, store semaphore.Store, key string) error {
			if err := store.Resume(ctx, key); err != nil {
				return err
			}
			return o.say(ctx, store, key, fmt.Sprintf("key %q: resumed", key))
		})
}

func (o *keyOptions) newCmdDrain() *cobra.Command {
	var reason string
	var timeout time.Duration
	drain := o.sub("drain KEY [--timeout D]", "Pause KEY, then wait until nobody holds it (it stays paused)",
		func(ctx context.Context, store semaphore.Store, key string) error {
			return o.drain(ctx, store, key, reason, timeout)
		})
	addReasonFlag(drain, &reason)
	drain.Flags().Var(newDuration(&timeout, 0), "timeout", "give up waiting after this, with the busy status; the key stays paused (0: wait for ever)")
	return drain
}

func (o *keyOptions) newCmdRevoke() *cobra.Command {
	var holder, reason string
	var force bool
	slot := -1
	revoke := o.sub("revoke KEY --holder ID | --slot S [--reason TEXT] [--force]", "Stop one holder's command: it lets go at its next renewal",
		func(ctx context.Context, store semaphore.Store, key string) error {
			if slot >= 0 {
				id, err := holderOfSlot(ctx, store, key, slot)
				if err != nil {
					return err
				}
				holder = id
			}
			return o.revoke(ctx, store, key, holder, reason, force)
		})
	addReasonFlag(revoke, &reason)
	revoke.Flags().StringVar(&holder, "holder", "", "the holder's ID, as semrun status shows it")
	revoke.Flags().Var(newInt(&slot, -1), "slot", "the slot S of the holder to revoke, as semrun status shows it (0 to N-1)")
	revoke.Flags().BoolVar(&force, "force", false, "free the permit at once, for a holder known to be dead: one alive could run beside the next")
	return revoke
}

// holderOfSlot is the ID of the holder, or cooling, of key's slot: the
// one status finds now. The revoke that follows revokes that one only
// (an ID is one grant's): if it let go meanwhile, the revoke finds no
// holder, and slot's next holder is left alone.
func holderOfSlot(ctx context.Context, store semaphore.Store, key string, slot int) (string, error) {
	st, err := store.Status(ctx, []string{key})
	if err != nil {
		return "", err
	}
	if len(st) != 1 || st[0].Error != "" {
		return "", fmt.Errorf("key %q: status: could not be read", key)
	}
	for _, h := range st[0].Holders {
		if slices.Contains(h.Slots.Numbers, slot) && h.ID != "" {
			return h.ID, nil
		}
	}
	for _, c := range st[0].Cooling {
		if slices.Contains(c.Slots.Numbers, slot) && c.ID != "" {
			return c.ID, nil
		}
	}
	return "", &noHolderError{key: key, slot: slot}
}

// addReasonFlag adds --reason to c: pause, drain and revoke say why.
func addReasonFlag(c *cobra.Command, reason *string) {
	c.Flags().StringVar(reason, "reason", "", "why, shown to waiters, busy callers and the holder revoked (at most 200 bytes)")
}

// revoke revokes key's holder, and says what came of it: a cooling ended,
// a holder told to stop, or a permit freed at once (force).
func (o *keyOptions) revoke(ctx context.Context, store semaphore.Store, key, holder, reason string, force bool) error {
	cooling := false
	if st, err := store.Status(ctx, []string{key}); err == nil && len(st) == 1 {
		cooling = slices.ContainsFunc(st[0].Cooling, func(c semaphore.Cooling) bool { return c.ID == holder })
	}
	if err := store.Revoke(ctx, key, holder, reason, force); err != nil {
		if errors.Is(err, semaphore.ErrNoHolder) {
			return &noHolderError{key: key, id: holder}
		}
		return err
	}
	line := fmt.Sprintf("key %q: holder %s revoked: it stops its command at its next renewal, then its permit is free", key, printable.String(holder))
	switch {
	case cooling:
		line = fmt.Sprintf("key %q: the cooling of %s ended: its permit is free", key, printable.String(holder))
	case force && !o.local: // a lock directory cannot take a live lock: the store said so
		line = fmt.Sprintf("key %q: holder %s revoked, and its permit freed at once (--force): if it is alive, its command may run beside the next holder's until its next renewal", key, printable.String(holder))
	}
	return o.say(ctx, store, key, line)
}

// sub is one subcommand of semrun key, on one KEY: run does it with the
// store, once the flags are checked.
func (o *keyOptions) sub(use, short string, run func(ctx context.Context, store semaphore.Store, key string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("give one KEY")
			}
			if err := semaphore.CheckKey(args[0]); err != nil {
				return usageErrorf("key %q: %v", args[0], err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withStore(cmd, func() error { return o.checkFlags(cmd) }, func(store semaphore.Store, _ *logger) error {
				return o.refusedStore(run(cmd.Context(), store, args[0]))
			})
		},
	}
}

// checkFlags refuses what the store would, before it is opened (a reason
// too long or with control characters, a pause too long), a drain's
// timeout out of bounds, a holder's id left out.
func (o *keyOptions) checkFlags(cmd *cobra.Command) error {
	f := cmd.Flags()
	if r := f.Lookup("reason"); r != nil {
		if err := semaphore.CheckReason(r.Value.String()); err != nil {
			return o.refused(err)
		}
	}
	if d := f.Lookup("for"); d != nil {
		if v, err := time.ParseDuration(d.Value.String()); err == nil {
			if err := semaphore.CheckPause(v); err != nil {
				return o.refused(err)
			}
		}
	}
	if d := f.Lookup("timeout"); d != nil {
		if v, err := time.ParseDuration(d.Value.String()); err == nil && (v < 0 || v > semaphore.MaxPause) {
			return usageErrorf("--timeout %v: must be from 0 to %v", v, semaphore.MaxPause)
		}
	}
	if h := f.Lookup("holder"); h != nil {
		bySlot := f.Changed("slot")
		switch {
		case bySlot && h.Value.String() != "":
			return usageErrorf("--holder and --slot: give one")
		case bySlot:
			if s, err := strconv.Atoi(f.Lookup("slot").Value.String()); err != nil || s < 0 || s >= semaphore.MaxSlots {
				return usageErrorf("--slot %s: must be from 0 to %d", printable.String(f.Lookup("slot").Value.String()), semaphore.MaxSlots-1)
			}
		case h.Value.String() == "":
			return usageErrorf("--holder or --slot is required: the ID or the slot semrun status shows")
		}
	}
	return nil
}

// refusedStore makes a store's refusal of a setting bad input.
func (o *keyOptions) refusedStore(err error) error {
	var se *semaphore.SettingError
	if errors.As(err, &se) {
		return o.refused(err)
	}
	return err
}

// say prints line, or with --json the key's status as it is now.
func (o *keyOptions) say(ctx context.Context, store semaphore.Store, key, line string) error {
	if !o.json && line != "" {
		_, err := fmt.Fprintln(o.f.Streams.Out, line)
		return err
	}
	st, err := store.Status(ctx, []string{key})
	if err != nil {
		return err
	}
	if len(st) != 1 {
		return fmt.Errorf("key %q: status: got %d keys", key, len(st))
	}
	if o.json {
		enc := json.NewEncoder(printable.JSON(o.f.Streams.Out))
		enc.SetIndent("", "  ")
		return enc.Encode(st[0])
	}
	return printKeyShow(o.f.Streams.Out, st[0])
}

// printKeyShow says, in one line, what an operator set on a key and who
// holds it.
func printKeyShow(w io.Writer, k semaphore.KeyStatus) error {
	if k.Error != "" {
		_, err := fmt.Fprintf(w, "key %q: could not be read: %s\n", k.Key, printable.String(k.Error))
		return err
	}
	line := fmt.Sprintf("key %q: ", k.Key)
	if k.StoredCapacity > 0 {
		line += fmt.Sprintf("capacity %d, kept in the store", k.StoredCapacity)
	} else {
		line += "no stored capacity"
	}
	if len(k.SlotNames) > 0 {
		named := make([]string, len(k.SlotNames))
		for i, name := range k.SlotNames {
			named[i] = fmt.Sprintf("%d (%s)", i, printable.String(name))
		}
		line += ", slots " + strings.Join(named, ", ")
	}
	if k.PriorityAge > 0 {
		line += fmt.Sprintf(", priority age %v (kept in the store)", k.PriorityAge)
	}
	if k.Paused != nil {
		line += "; " + pausedText(k.Paused)
	}
	line += fmt.Sprintf("; %d held, %d waiting", k.Held, len(k.Waiters))
	_, err := fmt.Fprintln(w, line)
	return err
}

// pausedText says a pause: why, and for how long.
func pausedText(p *semaphore.Pause) string {
	s := "paused"
	if p.Reason != "" {
		s += " (" + printable.String(semaphore.Clip(p.Reason, semaphore.MaxReason)) + ")"
	}
	if p.EndsIn > 0 {
		s += fmt.Sprintf(" for %v more", p.EndsIn.Round(time.Second))
	} else {
		s += " until resumed"
	}
	return s
}

// noHolderError means no holder of the key has the id, or the slot, given.
type noHolderError struct {
	key, id string
	slot    int // when id is empty
}

func (e *noHolderError) Error() string {
	if e.id == "" {
		return fmt.Sprintf("key %q: nobody holds slot %d (semrun status shows who holds which)", e.key, e.slot)
	}
	return fmt.Sprintf("key %q: no holder has the ID %q (semrun status shows them)", e.key, e.id)
}
