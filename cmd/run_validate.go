package cmd

import (
	"fmt"
	"slices"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// validate checks what the request does not: it fills the defaults that
// depend on other settings, and builds the request, which checks itself.
func (o *runOptions) validate() error {
	if o.set("handle") {
		return o.validateHandle()
	}
	if err := o.validateWait(); err != nil {
		return err
	}
	return o.validateCommand()
}

// validateWait checks what a caller asks for and how it waits, and
// builds the request.
func (o *waitOptions) validateWait() error {
	show, set := o.src.show, o.set
	if o.key == "" && !set("key") {
		return usageErrorf("--key is required")
	}
	if !set("restart-fence") {
		o.restartFence = o.ttl
	}
	// The first key's, where -n or --weight is given once per key.
	o.permits, o.weight = o.permitsOf(0), o.weightOf(0)
	if o.weight == 0 {
		// A request's 0 is its default, 1; from a user, 0 permits is a mistake.
		return usageErrorf("%s: must be from 1 to %s", show("weight", 0), permits(o.permits, ""))
	}
	o.req = semaphore.Request{
		Key: o.key, Permits: o.permits, Weight: o.weight, TTL: o.ttl, NoWait: o.noWait,
		RestartFence: o.restartFence, MinReplicas: o.minReplicas,
		Priority: o.priority, PriorityAge: o.priorityAge, Supersede: o.supersede,
		Holder: semaphore.HolderInfo{Label: o.label()}, // the rest once it asks
	}
	if err := o.req.Validate(); err != nil {
		return o.refused(err)
	}
	if err := o.checkKeys(); err != nil {
		return err
	}
	for _, key := range o.keys {
		if slices.Contains(o.heldKeys(), key) {
			return usageErrorf("%s: already held by the semrun this command runs under; waiting would wait for itself", show("key", fmt.Sprintf("%q", key)))
		}
	}
	if o.timeout < 0 {
		return usageErrorf("%s: must not be negative", show("timeout", o.timeout))
	}
	return o.checkExitCode("busy-exit-code", o.busyExitCode)
}

// checkExitCode refuses a status a process cannot exit with.
func (o *waitOptions) checkExitCode(flag string, code int) error {
	if code < 0 || code > 255 {
		return usageErrorf("%s: must be from 0 to 255", o.src.show(flag, code))
	}
	return nil
}

// set tells whether the user set flag, anywhere.
func (o *waitOptions) set(flag string) bool { return o.src.origin(flag) != fromDefault }

// validateCommand checks what a run does with its command.
func (o *runOptions) validateCommand() error {
	show := o.src.show
	if err := o.checkExitCode("lost-exit-code", o.lostExitCode); err != nil {
		return err
	}
	if err := o.checkExitCode("revoked-exit-code", o.revokedExitCode); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"max-runtime", o.maxRuntime}, {"warn-after", o.warnAfter}, {"min-hold", o.minHold}} {
		if d.v < 0 {
			return usageErrorf("%s: must not be negative", show(d.flag, d.v))
		}
	}
	if o.onLost != "terminate" && o.onLost != "continue" {
		return usageErrorf("%s: must be terminate or continue", show("on-lost", fmt.Sprintf("%q", o.onLost)))
	}
	if a := semaphore.CoolAfter(o.minHoldAfter); a != semaphore.CoolAfterSuccess && a != semaphore.CoolAfterAny {
		return usageErrorf("%s: must be %s or %s", show("min-hold-after", fmt.Sprintf("%q", o.minHoldAfter)), semaphore.CoolAfterSuccess, semaphore.CoolAfterAny)
	}
	if err := o.checkKillAfter(o.ttl); err != nil {
		return err
	}
	if o.set("handle") {
		return nil // the hold's permit is bound already
	}
	return o.bound(o.minHold, semaphore.CoolAfter(o.minHoldAfter))
}

// bound makes the request's permit last at most --max-runtime, and the
// kill-after, in the store too, and at least minHold, after the ends of
// its command that after says.
func (o *waitOptions) bound(minHold time.Duration, after semaphore.CoolAfter) error {
	o.req.MaxRuntime, o.req.KillAfter, o.req.MinHold, o.req.MinHoldAfter = o.maxRuntime, o.killAfter, minHold, after
	if err := o.req.Validate(); err != nil {
		return o.refused(err)
	}
	return nil
}

// checkKillAfter refuses a --kill-after a lease of ttl cannot give, and
// lowers the default to what it can.
func (o *runOptions) checkKillAfter(ttl time.Duration) error {
	show, set := o.src.show, o.set
	limit := runner.MaxKillAfter(ttl)
	if !set("kill-after") {
		o.killAfter = min(defaultKillAfter, limit)
	} else if o.killAfter < 0 || o.killAfter > limit {
		return usageErrorf("%s: must be from 0 to %v (2/5 of the --ttl), so that renewals can be retried and the command killed before its lease can lapse", show("kill-after", o.killAfter), limit)
	}
	return nil
}
