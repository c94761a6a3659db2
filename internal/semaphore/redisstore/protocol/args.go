package protocol

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Args are one script's arguments: each script has its own type, which
// knows the script and how its ARGV is written (name, value, name,
// value..., which lib.lua's args reads).
type Args interface {
	script() *Script
	argv(k Keys) []any
}

// AcquireArgs are acquire.lua's arguments. The wake lists' prefix is the
// keys'.
type AcquireArgs struct {
	ID      string
	Permits int
	TTL     time.Duration
	// Meta is what status shows of the caller: its semaphore.HolderInfo,
	// as JSON.
	Meta   []byte
	Weight int
	// Wait is the waiter lease; 0: the caller does not wait.
	Wait time.Duration
	// Fence is the restart fence; 0: none.
	Fence time.Duration
	// Line is the longest line the key takes; 0 is MaxLine.
	Line int
	// Bound is how long after its grant the permit is renewed at most
	// (semaphore.Request.MaxRuntime and semaphore.Overrun); 0: no bound.
	// Cool is its min hold (semaphore.Request.MinHold); 0: none.
	Bound, Cool time.Duration
	// Waited is how long ago the caller's Acquire began: a grant's wait,
	// and where a waiter's is counted from.
	Waited time.Duration
	// FenceWait is how much of a restart fence a caller that does not
	// wait waits out before it asks again: a longer fence is its busy
	// answer (an event), a shorter one not yet.
	FenceWait time.Duration
	// Quiet: no event is logged; it is still counted (Options.NoEvents).
	Quiet bool
	// Priority, PriorityAge and Supersede are the request's; WasInLine
	// says the caller was in the line before (a superseding caller then
	// learns whether it was sent away meanwhile).
	Priority             int
	PriorityAge          time.Duration
	Supersede, WasInLine bool
}

// flag is a bool as the scripts read it.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// optional appends to argv each name and value of nv whose value is not 0:
// a script reads an argument left out as 0 (as false, for a flag), and
// each one costs Redis its making.
func optional(argv []any, nv ...any) []any {
	for i := 0; i+1 < len(nv); i += 2 {
		switch v := nv[i+1].(type) {
		case int:
			if v == 0 {
				continue
			}
		case int64:
			if v == 0 {
				continue
			}
		}
		argv = append(argv, nv[i], nv[i+1])
	}
	return argv
}

func (AcquireArgs) script() *Script { return acquireScript }

func (a AcquireArgs) argv(k Keys) []any {
	if a.Line <= 0 {
		a.Line = MaxLine
	}
	return optional([]any{
		"id", a.ID, "permits", a.Permits, "ttl", a.TTL.Milliseconds(), "meta", a.Meta,
		"weight", a.Weight, "wait", a.Wait.Milliseconds(), "wake", k.Wake, "fence", max(a.Fence, 0).Milliseconds(), "line", a.Line,
	}, "bound", max(a.Bound, 0).Milliseconds(), "cool", max(a.Cool, 0).Milliseconds(),
		"waited", max(a.Waited, 0).Milliseconds(), "fencewait", max(a.FenceWait, 0).Milliseconds(), "quiet", flag(a.Quiet),
		"prio", a.Priority, "age", max(a.PriorityAge, 0).Milliseconds(), "super", flag(a.Supersede), "was", flag(a.WasInLine))
}

// AcquireReply is acquire.lua's reply. Times are ms: spans, or readings
// of the server's clock (Now).
type AcquireReply struct {
	Granted                bool
	Token, Held, Previous  int64
	Lapse                  int64 // until the earliest lease lapses, or the fence ends
	Position, Waiting, Now int64
	Left, Fenced, Moved    int64
	// Full: the line was full, and the caller is not in it.
	Full bool
	// Bad are the records the script dropped, which were not records.
	Bad []string
	// Handed are the wake lists of the waiters it handed a permit to.
	Handed []string
	// Wait is the caller's waiter lease when it is in line.
	Wait int64
	// Since is the server's clock at the grant; 0 when not granted.
	Since int64
	// Policy is what an operator set on the key.
	Policy
	// Over: the caller's weight exceeds the stored capacity; it is
	// neither granted nor in line.
	Over bool
	// Recent is the key's recent hold, ms, told a caller in line; 0 when
	// unknown.
	Recent int64
	// Fresh: the key's counters were renewed, and the store lists the
	// key in its index (Index).
	Fresh bool
	// Slots are the slots granted.
	Slots semaphore.Slots
	// Age is the age the line counts the caller's place with, ms (0:
	// none): the key's stored one, or its own.
	Age int64
	// Superseded is the record of the newer caller that sent this one
	// away from the line ("" when none did).
	Superseded string
}

// Policy is what an operator set on a key, as a script answers it.
type Policy struct {
	// Stored is the stored capacity; 0: none.
	Stored int64
	// Paused: no grants, for PausedFor ms more (0: until resumed), for
	// Reason.
	Paused    bool
	Reason    string
	PausedFor int64
}

// policyFields are where decodeReply puts a Policy's fields, and paused
// its flag, to be read with set.
func (p *Policy) fields(paused *int64) map[string]any {
	return map[string]any{"stored": &p.Stored, "paused": paused, "reason": &p.Reason, "pausedfor": &p.PausedFor}
}

// Pause is the pause p says, or nil.
func (p Policy) Pause() *semaphore.Pause {
	if !p.Paused {
		return nil
	}
	return &semaphore.Pause{Reason: p.Reason, EndsIn: time.Duration(p.PausedFor) * time.Millisecond}
}

// set reads the pause flag, and bounds what a script answered.
func (p *Policy) set(paused int64) {
	p.Paused = paused == 1
	p.Stored = min(max(p.Stored, 0), MaxPermits)
	p.PausedFor = min(max(p.PausedFor, 0), MaxPause.Milliseconds())
	if len(p.Reason) > MaxReason {
		p.Reason = p.Reason[:MaxReason]
	}
}

// DecodeAcquire reads acquire.lua's reply.
func DecodeAcquire(res any) (AcquireReply, error) {
	var r AcquireReply
	var granted, full, paused, over, fresh int64
	var slots, names string
	fields := r.Policy.fields(&paused)
	maps.Copy(fields, map[string]any{
		"granted": &granted, "token": &r.Token, "held": &r.Held, "previous": &r.Previous,
		"lapse": &r.Lapse, "position": &r.Position, "waiting": &r.Waiting, "now": &r.Now,
		"left": &r.Left, "fenced": &r.Fenced, "moved": &r.Moved, "full": &full, "bad": &r.Bad, "handed": &r.Handed, "wait": &r.Wait,
		"since": &r.Since, "over": &over, "recent": &r.Recent, "fresh": &fresh, "slots": &slots, "names": &names,
		"age": &r.Age, "superseded": &r.Superseded,
	})
	err := decodeReply(acquireScript.name, res, fields)
	r.Age = min(max(r.Age, 0), semaphore.MaxPriorityAge.Milliseconds())
	r.Granted, r.Full, r.Over, r.Fresh = granted == 1, full == 1, over == 1, fresh == 1
	r.Slots = readSlots(slots, names)
	r.Policy.set(paused)
	if err == nil && r.Granted && r.Token <= 0 {
		err = fmt.Errorf("%s: unexpected reply %s (token %d)", acquireScript.name, shortReply(res), r.Token)
	}
	return r, err
}

// ManyArgs are many.lua's arguments: the keys of a caller of several,
// and what it asks of each (Each, one AcquireArgs a key: its Permits,
// Weight and Meta; the rest is the first's, for all).
type ManyArgs struct {
	Keys []Keys
	Each []AcquireArgs
}

func (ManyArgs) script() *Script { return manyScript }

func (a ManyArgs) argv(Keys) []any {
	first := a.Each[0]
	if first.Line <= 0 {
		first.Line = MaxLine
	}
	argv := optional([]any{
		"id", first.ID, "ttl", first.TTL.Milliseconds(), "wait", first.Wait.Milliseconds(),
		"fence", max(first.Fence, 0).Milliseconds(), "line", first.Line,
	}, "bound", max(first.Bound, 0).Milliseconds(), "cool", max(first.Cool, 0).Milliseconds(),
		"waited", max(first.Waited, 0).Milliseconds(), "fencewait", max(first.FenceWait, 0).Milliseconds(), "quiet", flag(first.Quiet),
		"prio", first.Priority, "age", max(first.PriorityAge, 0).Milliseconds())
	for i, e := range a.Each {
		n := strconv.Itoa(i + 1)
		argv = append(argv, "permits"+n, e.Permits, "weight"+n, e.Weight, "meta"+n, e.Meta, "wake"+n, a.Keys[i].Wake)
	}
	return argv
}

// DecodeMany reads many.lua's reply: one AcquireReply a key, in their
// order, and whether each key would grant the caller now.
func DecodeMany(res any, keys int) ([]AcquireReply, []bool, error) {
	list, ok := res.([]any)
	if !ok || len(list) != keys {
		return nil, nil, fmt.Errorf("%s: unexpected reply %s", manyScript.name, shortReply(res))
	}
	replies, fits := make([]AcquireReply, keys), make([]bool, keys)
	for i, one := range list {
		var r AcquireReply
		var granted, full, paused, over, fresh, fit int64
		var slots, names string
		fields := r.Policy.fields(&paused)
		maps.Copy(fields, map[string]any{
			"granted": &granted, "token": &r.Token, "held": &r.Held, "previous": &r.Previous,
			"lapse": &r.Lapse, "position": &r.Position, "waiting": &r.Waiting, "now": &r.Now,
			"left": &r.Left, "fenced": &r.Fenced, "moved": &r.Moved, "full": &full, "bad": &r.Bad, "handed": &r.Handed, "wait": &r.Wait,
			"since": &r.Since, "over": &over, "recent": &r.Recent, "fresh": &fresh, "fits": &fit, "slots": &slots, "names": &names,
			"age": &r.Age,
		})
		if err := decodeReply(manyScript.name, one, fields); err != nil {
			return nil, nil, err
		}
		r.Granted, r.Full, r.Over, r.Fresh = granted == 1, full == 1, over == 1, fresh == 1
		r.Slots = readSlots(slots, names)
		r.Policy.set(paused)
		if r.Granted && r.Token <= 0 {
			return nil, nil, fmt.Errorf("%s: unexpected reply %s (token %d)", manyScript.name, shortReply(res), r.Token)
		}
		replies[i], fits[i] = r, fit == 1
	}
	// All or none: a reply that says otherwise is not one.
	for _, r := range replies {
		if r.Granted != replies[0].Granted {
			return nil, nil, fmt.Errorf("%s: unexpected reply %s (granted some keys only)", manyScript.name, shortReply(res))
		}
	}
	return replies, fits, nil
}

// RenewArgs are renew.lua's arguments: Fence is the holder's restart
// fence, which the key remembers while the lease lasts; Bound and Cool
// are AcquireArgs'.
type RenewArgs struct {
	ID                      string
	TTL, Fence, Bound, Cool time.Duration
}

func (RenewArgs) script() *Script { return renewScript }

func (a RenewArgs) argv(Keys) []any {
	return optional([]any{"id", a.ID, "ttl", a.TTL.Milliseconds()}, "fence", max(a.Fence, 0).Milliseconds(),
		"bound", max(a.Bound, 0).Milliseconds(), "cool", max(a.Cool, 0).Milliseconds())
}

// RenewReply is renew.lua's reply: whether the lease was extended, how
// many ms it has left (its TTL, or less at its bound), and how many until
// its bound (0: none); Revoked, with Reason, when an operator revoked it.
type RenewReply struct {
	Renewed, Revoked bool
	Left, Hard       int64
	Reason           string
}

// DecodeRenew reads renew.lua's reply.
func DecodeRenew(res any) (RenewReply, error) {
	var r RenewReply
	var renewed, revoked int64
	err := decodeReply(renewScript.name, res, map[string]any{"renewed": &renewed, "left": &r.Left, "hard": &r.Hard,
		"revoked": &revoked, "reason": &r.Reason})
	r.Renewed, r.Revoked = renewed == 1, revoked == 1
	if len(r.Reason) > MaxReason {
		r.Reason = r.Reason[:MaxReason]
	}
	if err == nil && r.Renewed && (r.Left <= 0 || r.Hard < 0) {
		err = fmt.Errorf("%s: unexpected reply %s (left %d)", renewScript.name, shortReply(res), r.Left)
	}
	return r, err
}

// ReleaseArgs are release.lua's arguments: Cool keeps the permit taken
// until this long after its grant (semaphore.Request.MinHold), when a
// command ran under it (0: give it back at once); Exit is how its command
// ended, -1 when unknown; Timeout says that a waiter leaves because its
// wait reached its deadline (an event of its own); Quiet is
// AcquireArgs'.
type ReleaseArgs struct {
	ID             string
	Cool           time.Duration
	Exit           int
	Timeout, Quiet bool
}

func (ReleaseArgs) script() *Script { return releaseScript }

func (a ReleaseArgs) argv(k Keys) []any {
	argv := optional([]any{"id", a.ID, "wake", k.Wake}, "cool", max(a.Cool, 0).Milliseconds(), "timeout", flag(a.Timeout),
		"quiet", flag(a.Quiet))
	if a.Exit >= 0 { // left out: unknown
		argv = append(argv, "exit", min(a.Exit, 255))
	}
	return argv
}

// ReleaseReply is release.lua's reply.
type ReleaseReply struct {
	// Released: the caller held a permit or waited.
	Released bool
	// Cooling is how many ms the permit stays taken; 0: none.
	Cooling int64
	// Bad are the records the script dropped, which were not records;
	// Handed the wake lists of the waiters it handed a permit to.
	Bad, Handed []string
	// Fresh is AcquireReply's.
	Fresh bool
}

// DecodeRelease reads release.lua's reply.
func DecodeRelease(res any) (ReleaseReply, error) {
	var r ReleaseReply
	var released, fresh int64
	err := decodeReply(releaseScript.name, res, map[string]any{"released": &released, "cooling": &r.Cooling, "bad": &r.Bad, "handed": &r.Handed,
		"fresh": &fresh})
	r.Released, r.Fresh = released == 1, fresh == 1
	return r, err
}

// WatchArgs are watch.lua's arguments: the wake lists' prefix, the keys'.
type WatchArgs struct{}

func (WatchArgs) script() *Script { return watchScript }

func (WatchArgs) argv(k Keys) []any { return []any{"wake", k.Wake} }

// HoldArgs are hold.lua's arguments: Op is begin, renew or end.
type HoldArgs struct {
	Op, ID string
	// Share names the attached process that renews or lets go.
	Share string
	// begin: the hold's lease and restart fence, the replicas each of its
	// renewals waits for, and what status shows of its keeper (a
	// semaphore.HolderInfo, as JSON).
	TTL, Fence time.Duration
	Replicas   int
	Meta       []byte
	// Bound and Cool are AcquireArgs'.
	Bound, Cool time.Duration
	// end: how the hold ended; empty to leave it as it is.
	State, Why string
	// Quiet is AcquireArgs'.
	Quiet bool
}

func (HoldArgs) script() *Script { return holdScript }

func (a HoldArgs) argv(k Keys) []any {
	argv := optional([]any{"op", a.Op, "id", a.ID, "hold", k.Hold, "wake", k.Wake, "share", a.Share}, "quiet", flag(a.Quiet))
	switch a.Op {
	case "begin":
		argv = optional(append(argv, "ttl", a.TTL.Milliseconds(), "meta", a.Meta), "fence", max(a.Fence, 0).Milliseconds(),
			"replicas", a.Replicas, "bound", max(a.Bound, 0).Milliseconds(), "cool", max(a.Cool, 0).Milliseconds())
	case "end":
		argv = append(argv, "state", a.State, "why", a.Why)
	}
	return argv
}

// HoldReply is hold.lua's reply. At is a reading of the server's clock,
// ms; 0 when unknown.
type HoldReply struct {
	State, Why, Meta           string
	At, Permits, Weight, Token int64
	TTL, Replicas              int64
	// Left is what a renewal left of the share's lease, ms; Hard is how
	// long until the hold's bound, ms, 0 for none.
	Left, Hard    int64
	Now, Released bool
	Bad, Handed   []string
	// Fresh is AcquireReply's.
	Fresh bool
	// Slots are the hold's.
	Slots semaphore.Slots
}

// DecodeHold reads hold.lua's reply.
func DecodeHold(res any) (HoldReply, error) {
	var r HoldReply
	var now, released, fresh int64
	var slots, names string
	err := decodeReply(holdScript.name, res, map[string]any{
		"state": &r.State, "why": &r.Why, "meta": &r.Meta, "at": &r.At, "permits": &r.Permits, "weight": &r.Weight,
		"token": &r.Token, "ttl": &r.TTL, "replicas": &r.Replicas, "now": &now, "released": &released, "bad": &r.Bad, "handed": &r.Handed,
		"left": &r.Left, "hard": &r.Hard, "fresh": &fresh, "slots": &slots, "names": &names,
	})
	r.Now, r.Released, r.Fresh = now == 1, released == 1, fresh == 1
	// The record is anyone's: slots that are not its weight's are none, as
	// a holder record's (readHolder).
	if r.Slots = readSlots(slots, names); int64(len(r.Slots.Numbers)) != r.Weight {
		r.Slots = semaphore.Slots{}
	}
	return r, err
}

// decodeReply reads a reply of names and values into fields, each an
// *int64, a *string, a *[]any or a *[]string (of the strings of a list) by
// its name.
// A field is there at most once, with a value of its type, and nothing
// else is: a reply is the scripts' own, and any other is not to be
// trusted. A field left out is 0, "" or an empty list, as the scripts
// leave out those (lib.lua's reply).
func decodeReply(script string, res any, fields map[string]any) error {
	v, ok := res.([]any)
	if !ok || len(v)%2 != 0 || len(v) > 2*len(fields) {
		return fmt.Errorf("%s: unexpected reply %s", script, shortReply(res))
	}
	seen := map[string]bool{}
	for i := 0; i < len(v); i += 2 {
		name, _ := v[i].(string)
		field, ok := fields[name]
		if !ok || seen[name] {
			return fmt.Errorf("%s: unexpected reply %s (field %.40q)", script, shortReply(res), name)
		}
		seen[name] = true
		switch f := field.(type) {
		case *int64:
			*f, ok = v[i+1].(int64)
		case *[]any:
			*f, ok = v[i+1].([]any)
		case *[]string:
			*f, ok = stringsOf(v[i+1])
		case *string:
			*f, ok = v[i+1].(string)
		}
		if !ok {
			return fmt.Errorf("%s: unexpected reply %s (field %.40q)", script, shortReply(res), name)
		}
	}
	return nil
}

// stringsOf is the strings of a list; ok is false for what is not a list.
func stringsOf(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out, true
}

// shortReply shows at most 200 bytes of a reply, which may be anything.
func shortReply(res any) string {
	s := fmt.Sprint(res)
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// KeyArgs are key.lua's arguments: Op is set (Cap), unset, pause (Reason,
// For), resume or revoke (Holder, a public id; Reason; Force); Quiet is
// AcquireArgs'.
type KeyArgs struct {
	Op, Reason, Holder string
	Cap                int
	For                time.Duration
	Force, Quiet       bool
	// Names are the slots' names of op "slots".
	Names []string
}

func (KeyArgs) script() *Script { return keyScript }

func (a KeyArgs) argv(k Keys) []any {
	force := 0
	if a.Force {
		force = 1
	}
	return []any{"op", a.Op, "wake", k.Wake, "reason", a.Reason, "holder", a.Holder, "cap", a.Cap,
		"for", max(a.For, 0).Milliseconds(), "force", force, "quiet", flag(a.Quiet), "names", strings.Join(a.Names, ",")}
}

// KeyReply is key.lua's reply: the key's policy after the op; Found, for
// a revoke, when a holder had the id; Fresh is AcquireReply's.
type KeyReply struct {
	Policy
	Found, Fresh bool
	Bad, Handed  []string
}

// DecodeKey reads key.lua's reply.
func DecodeKey(res any) (KeyReply, error) {
	var r KeyReply
	var paused, found, fresh int64
	fields := r.Policy.fields(&paused)
	maps.Copy(fields, map[string]any{"found": &found, "bad": &r.Bad, "handed": &r.Handed, "fresh": &fresh})
	err := decodeReply(keyScript.name, res, fields)
	r.Found, r.Fresh = found == 1, fresh == 1
	r.Policy.set(paused)
	return r, err
}
