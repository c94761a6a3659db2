package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/semaphore"
)

// The limits the scripts and the store share. The scripts never spell
// them: limitsLua writes them, from these constants, as the first line of
// every script's source.
const (
	// MaxTTL is the longest lease or fence a caller may ask.
	MaxTTL = semaphore.MaxTTL
	// MinTTL is the shortest lease a caller may ask.
	MinTTL = semaphore.MinTTL
	// MaxPermits is the largest capacity, and weight, of a key.
	MaxPermits = semaphore.MaxPermits
	// WaiterLease is how long a waiter keeps its place in line without
	// telling the store it is still there, in a short line, or the lease
	// it asks for if that is shorter. acquire.lua stretches it in a
	// longer line, PerWaiter a waiter, at most MaxWaiterLease, so that
	// keeping places costs Redis the same however long the line.
	WaiterLease = 10 * time.Second
	// PerWaiter is what each waiter in line adds to a waiter lease.
	PerWaiter = 120 * time.Millisecond
	// MaxWaiterLease is the longest waiter lease acquire.lua gives: in a
	// line of MaxLine waiters.
	MaxWaiterLease = 20 * time.Minute
	// MaxLine is the longest line one key takes by default.
	MaxLine = 10_000
	// MaxLineArg is the longest line a caller may ask a key to take.
	MaxLineArg = 1_000_000_000
	// Claim is how long a permit handed over waits for its waiter to take
	// its turn: a waiter that died in line costs those behind it this
	// long, whatever its lease.
	Claim = 2 * time.Second
	// RollCall is how long a waiter has to answer a roll call (watch.lua)
	// before it leaves the line, and how long a turn not taken at once
	// stays claimed: a crowd of waiters killed together costs about this,
	// not a claim each.
	RollCall = 2 * time.Second
	// RollCallMax is how many waiters, from the head, one roll call reaches.
	RollCallMax = 1000
	// WakeListLife is how long a wake list lives after its last push: a
	// list whose waiter is gone vanishes on its own.
	WakeListLife = time.Minute
	// StatusList is how many holders, and how many waiters, status lists
	// at most: listing more would make the script's work grow with the line.
	StatusList = 1000
	// MaxStatusList is the most a caller may ask status.lua to list.
	MaxStatusList = 100_000
	// Sweep is how many lapsed holders, and lapsed or broken waiters, one
	// call removes at most: the rest go in the next calls, which the
	// waiters at the head make as soon as the earliest lease lapses.
	Sweep = 32
	// HoldLife is how long a hold's record outlives its last change: a
	// release a day after its hold ended still learns how it ended.
	HoldLife = 24 * time.Hour
	// MaxShares is how many processes may be attached to one hold at once.
	MaxShares = 64
	// MaxReplicas is the most replicas a caller may ask to wait for.
	MaxReplicas = semaphore.MaxReplicas
	// MaxWhy bounds the words a hold's end is recorded with.
	MaxWhy = semaphore.MaxHoldWhy
	// MaxBound is the longest bound a caller may ask of a permit: its max
	// runtime, kill-after and margin (see semaphore.Bound).
	MaxBound = semaphore.MaxMaxRuntime + MaxTTL
	// MaxCool is the longest a permit given back may stay taken as
	// cooling: the longest min hold.
	MaxCool = semaphore.MaxMinHold
	// MaxReason bounds an operator's reason, in bytes.
	MaxReason = semaphore.MaxReason
	// MaxPause bounds a pause with an end.
	MaxPause = semaphore.MaxPause
	// MaxInt is the largest integer a Lua number (a double) holds exactly.
	MaxInt = 1<<53 - 1
	// MaxEvents is about how many events a key's log keeps: XADD trims
	// it to this, approximately (whole nodes of a hundred), which keeps
	// the cost of a write flat.
	MaxEvents = semaphore.MaxEvents
	// EventLife is semaphore.EventLife. The scripts keep its end in the
	// counters ("#until") and push it, and the keys' TTL, when it is
	// older than EventRefresh: one PEXPIRE an hour, not one an event.
	EventLife    = semaphore.EventLife
	EventRefresh = time.Hour
	// MaxMeta bounds the holder's record (a semaphore.HolderInfo, as JSON)
	// an event keeps, and that a reader decodes: a host name and a label
	// of MaxLabel bytes fit, each byte escaped in JSON as six (\u003c).
	MaxMeta = 4096
	// NoAge is the age a line without one orders its waiters by: a
	// waiter's place is its arrival less its priority times the age, so
	// that with it a priority wins over any wait shorter (about three
	// months) and a place stays exact in a double (see place in lib.lua).
	NoAge = (1 << 33) * time.Millisecond
	// Ties is how many callers that join a line at one place keep their
	// order of arrival: a place's last ten bits are their ticket's (place
	// in lib.lua).
	Ties = 1024
	// BadText bounds the text of a record a script dropped, in its reply.
	BadText = 100
	// MaxIndexed is the most keys Store.Keys reads from the index: a set
	// that anyone who can write the keys may have filled.
	MaxIndexed = 100_000
)

// limit is one constant as the scripts name it.
type limit struct {
	name  string
	value int64
}

// limits are the constants the scripts read, by their Lua names.
var limits = []limit{
	{"MAXTTL", MaxTTL.Milliseconds()},
	{"MINTTL", MinTTL.Milliseconds()},
	{"MAXPERMITS", MaxPermits},
	{"PERWAITER", PerWaiter.Milliseconds()},
	{"MAXWAIT", MaxWaiterLease.Milliseconds()},
	{"MAXLINE", MaxLineArg},
	{"CLAIM", Claim.Milliseconds()},
	{"ROLLCALL", RollCall.Milliseconds()},
	{"ROLLMAX", RollCallMax},
	{"WAKELIFE", WakeListLife.Milliseconds()},
	{"MAXLIST", MaxStatusList},
	{"SWEEP", Sweep},
	{"HOLDLIFE", HoldLife.Milliseconds()},
	{"MAXSHARES", MaxShares},
	{"MAXWHY", MaxWhy},
	{"MAXREPLICAS", MaxReplicas},
	{"MAXBOUND", MaxBound.Milliseconds()},
	{"MAXCOOL", MaxCool.Milliseconds()},
	{"MAXREASON", MaxReason},
	{"MAXPAUSE", MaxPause.Milliseconds()},
	{"MAXINT", MaxInt},
	{"MAXEVENTS", MaxEvents},
	{"EVENTLIFE", EventLife.Milliseconds()},
	{"EVENTREFRESH", EventRefresh.Milliseconds()},
	{"MAXMETA", MaxMeta},
	{"MAXKEYS", semaphore.MaxKeys},
	{"MAXSLOTS", semaphore.MaxSlots},
	{"MAXPRIO", semaphore.MaxPriority},
	{"MAXAGE", semaphore.MaxPriorityAge.Milliseconds()},
	{"NOAGE", NoAge.Milliseconds()},
	{"TIES", Ties},
	{"BADTEXT", BadText},
	{"MAXSLOTNAME", semaphore.MaxSlotName * utf8.UTFMax},
}

// limitsLua declares the limits as Lua locals, on one line: Redis counts
// it as line 1 of every script (see Script.Wrap). Besides the integers:
// RECENTWEIGHT, semaphore.RecentWeight; BUCKETS, the upper bounds of a
// histogram's buckets (semaphore.Buckets), in ms; and OLDBUCKETS, how
// many there were before they began at 10ms (semaphore.OldBuckets), whose
// counts status.lua still reads.
func limitsLua() string {
	names := make([]string, len(limits), len(limits)+1)
	values := make([]string, len(limits), len(limits)+1)
	for i, l := range limits {
		names[i], values[i] = l.name, fmt.Sprint(l.value)
	}
	names = append(names, "RECENTWEIGHT")
	values = append(values, strconv.FormatFloat(semaphore.RecentWeight, 'g', -1, 64))
	bounds := make([]string, len(semaphore.Buckets))
	for i, b := range semaphore.Buckets {
		bounds[i] = fmt.Sprint(b.Milliseconds())
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") +
		"; local BUCKETS, OLDBUCKETS = {" + strings.Join(bounds, ", ") + "}, " + strconv.Itoa(len(semaphore.OldBuckets)) + " -- limits.go\n"
}

// Span is a span of time a script answered, in milliseconds, bounded by
// MaxTTL either way: no lease, fence or wait is longer, and a record that
// anyone who can write the keys may have written must not overflow a
// time.Duration (a lease ending in 1,000 years made the waiters ask again
// at once, thousands of times a second).
func Span(ms int64) time.Duration {
	bound := MaxTTL.Milliseconds()
	return time.Duration(min(max(ms, -bound), bound)) * time.Millisecond
}
