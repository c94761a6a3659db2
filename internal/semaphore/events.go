package semaphore

import (
	"context"
	"time"
)

// Events is what happened to a store's keys: a capped log of each key
// (its events), and counters that only rise (Counts, in KeyStatus).
type Events interface {
	// Events calls each with the events of q.Keys (every key the store
	// knows when none), oldest first, at most q.Since old when it is
	// positive; with q.Follow, it then calls each with every new event
	// within a second of it, until ctx is done (returning nil then), riding
	// out a store that restarts or cannot be reached for a while. An error
	// from each ends it with that error.
	Events(ctx context.Context, q EventQuery, each func(Event) error) error
	// Keys lists the keys whose events or counters the store keeps,
	// without walking everything it stores (a Redis SCAN walks the whole
	// keyspace): a scrape of metrics calls it each time.
	Keys(ctx context.Context) ([]string, error)
}

// EventQuery says which events Events reports.
type EventQuery struct {
	Keys   []string
	Since  time.Duration
	Follow bool
}

// MaxEvents is about how many events a key's log keeps: the oldest go
// first.
const MaxEvents = 1000

// EventLife is how long a key's log and counters outlive its last event:
// a store keeps no unused key's past for ever, and a week and a day keeps
// a weekly job's counters rising.
const EventLife = 8 * 24 * time.Hour

// EventKind names what happened.
type EventKind string

// What happens to a key. Every event of a holder says who it is
// (Event.Holder and its HolderInfo); an operator's have no holder but
// the one revoked.
const (
	// EventGrant: a permit was granted, after Waited.
	EventGrant EventKind = "grant"
	// EventRelease: a holder gave its permit back, Held after its grant;
	// ExitStatus says how its command ended when one ran, and Cooling how
	// long the permit stays taken (Request.MinHold).
	EventRelease EventKind = "release"
	// EventBusy: a caller that would not wait got no permit (ErrBusy);
	// Reason says why when it is not that every permit was held: the
	// key's pause, the restart fence.
	EventBusy EventKind = "busy"
	// EventTimeout: a waiter's wait ended (its context's deadline) before
	// its turn came, after Waited.
	EventTimeout EventKind = "timeout"
	// EventLeave: a waiter left the line otherwise (interrupted), after
	// Waited.
	EventLeave EventKind = "leave"
	// EventLost: a holder's permit was taken back because it stopped
	// holding it without giving it back (its lease lapsed, its process
	// died), Held after its grant.
	EventLost EventKind = "lost"
	// EventRevoke: an operator revoked a holder (Operator.Revoke), for
	// Reason; Forced when its permit was freed at once.
	EventRevoke EventKind = "revoke"
	// EventPause and EventResume: an operator paused the key, for Reason
	// and until Until when set, or resumed it.
	EventPause  EventKind = "pause"
	EventResume EventKind = "resume"
	// EventCapacity: an operator stored the capacity Capacity, or unset it
	// (0).
	EventCapacity EventKind = "capacity"
	// EventSupersede: a waiter that asked to supersede left the line, sent
	// away by a newer one, By, after Waited (Request.Supersede).
	EventSupersede EventKind = "supersede"
	// EventPriorityAge: an operator stored the priority age Until (0:
	// unset; Operator.SetPriorityAge).
	EventPriorityAge EventKind = "priority-age"
)

// Event is one thing that happened to a key. It holds no secret: the
// holder's public id, never its permit id, and its HolderInfo, never the
// command's arguments.
type Event struct {
	Time time.Time `json:"time"`
	Key  string    `json:"key"`
	Kind EventKind `json:"event"`
	// Holder is the holder's public id (Holder.ID); empty for a caller
	// that held nothing (busy, timeout, leave) and an operator's event but
	// a revoke.
	Holder string `json:"holder"`
	HolderInfo
	// Permits is the capacity the caller asked for; Weight how many it
	// takes; Token the grant's fencing token.
	Permits int   `json:"permits,omitempty"`
	Weight  int   `json:"weight,omitempty"`
	Token   int64 `json:"token,omitempty"`
	// ExitStatus is how a release's command ended (128+N for a signal N);
	// nil when no command ran or it is not known.
	ExitStatus *int `json:"exit_status,omitempty"`
	// Held is how long a release's or a loss's permit was held; Waited
	// how long a grant's, a timeout's or a leave's caller waited.
	Held   time.Duration `json:"held_ns,omitempty"`
	Waited time.Duration `json:"waited_ns,omitempty"`
	// Cooling is how long a release's permit stays taken (Request.MinHold).
	Cooling time.Duration `json:"cooling_ns,omitempty"`
	// Capacity is what an EventCapacity stored; 0 unsets it.
	Capacity int `json:"capacity,omitempty"`
	// Reason is a pause's, a revoke's or a busy answer's; a capacity's
	// slot names (Operator.SetSlots), comma-separated, at most MaxReason
	// bytes of them.
	Reason string `json:"reason,omitempty"`
	// Until is how long a pause lasts; 0 until resumed.
	Until time.Duration `json:"until_ns,omitempty"`
	// Forced marks a revoke that freed the permit at once.
	Forced bool `json:"forced,omitempty"`
	// Slots are the permits of a grant, release, loss or revoke.
	Slots
	// By is the newer caller of an EventSupersede.
	By *HolderInfo `json:"by,omitempty"`
}

// Counts are a key's counters, kept in the store as the events happen
// (not counted from the capped log): they only rise, unless the store
// loses its data.
type Counts struct {
	// Grants, Busy, Timeouts, Losses and Revokes count the events of
	// those kinds.
	Grants   int64 `json:"grants"`
	Busy     int64 `json:"busy"`
	Timeouts int64 `json:"timeouts"`
	Losses   int64 `json:"losses"`
	Revokes  int64 `json:"revokes"`
	// Wait is how long each grant waited; Held how long each permit given
	// back was held.
	Wait Histogram `json:"wait"`
	Held Histogram `json:"held"`
	// RecentHold is a moving average of the last holds' times (about the
	// last ten), for a waiter's estimate; 0 before the first.
	RecentHold time.Duration `json:"recent_hold_ns,omitempty"`
}

// Buckets are the upper bounds of a Histogram's buckets, from 10ms to a
// day: a wait or a hold is anything from an instant to hours. They hold
// every bound of OldBuckets, so that counts kept in those fall in the
// bucket of the same bound.
var Buckets = []time.Duration{
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 24 * time.Hour,
}

// OldBuckets are the buckets of counters a store kept before Buckets
// began at 10ms (from a second). A store reads counts kept in them still,
// each in the bucket of its bound (Bucket): no count goes down, and the
// waits under a second they counted stay in the bucket of 1s.
var OldBuckets = []time.Duration{
	time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 24 * time.Hour,
}

// Histogram counts durations in the buckets of Buckets.
type Histogram struct {
	// Counts[i] is how many were at most Buckets[i], and more than the
	// bucket before; Counts[len(Buckets)] how many were longer than the
	// last. Nil when none was.
	Counts []uint64 `json:"counts,omitempty"`
	// Sum is the durations' sum.
	Sum time.Duration `json:"sum_ns"`
}

// Bucket is the index in Histogram.Counts of the bucket d falls in.
func Bucket(d time.Duration) int {
	for i, b := range Buckets {
		if d <= b {
			return i
		}
	}
	return len(Buckets)
}

// Observe counts d.
func (h *Histogram) Observe(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make([]uint64, len(Buckets)+1)
	}
	h.Counts[Bucket(d)]++
	h.Sum += max(d, 0)
}

// Count is how many durations h counted.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// RecentWeight is the share a new hold's time takes in Counts.RecentHold:
// about the last ten holds count.
const RecentWeight = 0.2

// NextRecent is RecentHold once a hold of held is counted.
func NextRecent(recent, held time.Duration) time.Duration {
	if recent <= 0 {
		return held
	}
	return time.Duration(float64(recent)*(1-RecentWeight) + float64(held)*RecentWeight)
}
