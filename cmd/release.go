package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/semaphore"
)

func newCmdRelease(common *commonOptions) *cobra.Command {
	o := common
	return &cobra.Command{
		Use:   "release [HANDLE|@VAR]",
		Short: "Give back a permit that semrun acquire holds",
		Long: `semrun release gives back the permit of a hold that semrun acquire took,
named by its handle, or by the variable @VAR names (default: $SEMRUN_HANDLE).
It exits 0 once it gave it
back, or if it was given back before (one line says when). When the hold had
ended before it was released, it says when and why, and exits with the status
of why: 112 lost and 124 --max-runtime, after which the steps under it may have
run without the permit, and 113 revoked, after which they were stopped. It
never waits for the line.`,
		Example: `  semrun release
  semrun release "$HANDLE"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flag, text := "HANDLE", ""
			if len(args) == 1 {
				text = args[0]
			} else if text = o.f.getenv(envHandle); text != "" {
				flag = envHandle
			} else {
				return usageErrorf("no handle: give one, or set %s (semrun acquire prints it)", envHandle)
			}
			var hs []semaphore.Handle
			checkHandle := func() (err error) {
				if hs, err = o.parseHandle(flag, text); err != nil {
					return err
				}
				if err := o.sameStore(hs[0]); err != nil {
					return err
				}
				o.logAttrs = append(o.logAttrs, "key", hs[0].Key)
				return nil
			}
			return o.withStore(cmd, checkHandle, func(store semaphore.Store, log *logger) error {
				// Every key's hold, whatever became of the others; the
				// outcome is the first that is not a plain release.
				var first error
				for i, h := range hs {
					// A hold of several keys ends as one: the keeper ends
					// the others once it sees the first released, which
					// is no news for the keys after it.
					if err := o.releaseHold(cmd.Context(), store, h, i > 0, log); err != nil && first == nil {
						first = err
					} else if err != nil {
						log.Warnf("%v", err)
					}
				}
				return first
			})
		},
	}
}

// releaseHold ends the hold as released, or says how it had ended.
// With quietReleased, a hold found released before says nothing.
func (c *commonOptions) releaseHold(ctx context.Context, store semaphore.Store, h semaphore.Handle, quietReleased bool, log *logger) error {
	end, now, err := store.EndHold(ctx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil {
		return err
	}
	if now {
		log.Infof("key %q: hold released", h.Key)
		return nil
	}
	ended := &semaphore.HoldEndedError{Key: h.Key, End: end}
	if end.State == semaphore.HoldUnknown {
		return unknownHold(ended, "nothing released")
	}
	code := holdEndCode(end, defaultLostExitCode)
	if code == 0 {
		if !quietReleased {
			log.Warnf("the %v, before this release", ended)
		}
		return nil
	}
	then := "what ran under it may have run without the permit"
	if end.State == semaphore.HoldRevoked {
		// A revoke never makes two holders: the permit went on only once
		// the runs under it let go.
		then = "what ran under it was stopped"
	}
	return &holdEndedError{code: code, msg: fmt.Sprintf("the %v, before this release: %s", ended, then)}
}
