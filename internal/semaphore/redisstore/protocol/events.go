package protocol

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// What the scripts write of what happened to a key (lib.lua's event and
// count), as the store reads it back: like every record, anyone who can
// write the keys may have written it, so every value is checked and
// bounded, and an entry that is not an event is skipped.

// StreamID is the id of an entry of a key's log: the server's clock, ms,
// when it was written, and its place among those of that ms.
type StreamID struct{ Ms, Seq uint64 }

// ParseStreamID reads "<ms>-<seq>"; ok is false for anything else, or a
// time past MaxInt ms.
func ParseStreamID(s string) (id StreamID, ok bool) {
	ms, seq, found := strings.Cut(s, "-")
	if !found || len(s) > 41 {
		return StreamID{}, false
	}
	var err error
	if id.Ms, err = strconv.ParseUint(ms, 10, 64); err != nil || id.Ms > MaxInt {
		return StreamID{}, false
	}
	if id.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return StreamID{}, false
	}
	return id, true
}

// String is the id as XRANGE and XREAD take it.
func (id StreamID) String() string { return fmt.Sprintf("%d-%d", id.Ms, id.Seq) }

// Compare orders ids: -1, 0 or 1.
func (id StreamID) Compare(o StreamID) int {
	if id.Ms != o.Ms {
		return cmp.Compare(id.Ms, o.Ms)
	}
	return cmp.Compare(id.Seq, o.Seq)
}

// Next is the least id after id, for an exclusive start.
func (id StreamID) Next() StreamID {
	if id.Seq == ^uint64(0) {
		return StreamID{Ms: id.Ms + 1}
	}
	return StreamID{Ms: id.Ms, Seq: id.Seq + 1}
}

// eventKinds are the kinds an entry may have.
var eventKinds = map[string]semaphore.EventKind{}

func init() {
	for _, k := range []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease, semaphore.EventBusy, semaphore.EventTimeout,
		semaphore.EventLeave, semaphore.EventLost, semaphore.EventRevoke, semaphore.EventPause, semaphore.EventResume, semaphore.EventCapacity,
		semaphore.EventSupersede, semaphore.EventPriorityAge} {
		eventKinds[string(k)] = k
	}
}

// maxHostText bounds a host name and a command an event tells: a host
// name has at most 255 bytes, and a command's base name as many.
const maxHostText = 255

// DecodeEvent reads the entry m of key's log (lib.lua's EVENTFIELDS); ok
// is false for an entry that is not an event.
func DecodeEvent(key string, m redis.XMessage) (e semaphore.Event, ok bool) {
	id, ok := ParseStreamID(m.ID)
	if !ok {
		return e, false
	}
	text := func(name string) string {
		s, _ := m.Values[name].(string)
		return s
	}
	kind, ok := eventKinds[text("e")]
	if !ok {
		return e, false
	}
	e = semaphore.Event{Time: time.UnixMilli(int64(id.Ms)), Key: key, Kind: kind}
	if h := text("id"); IsPublicID(h) {
		e.Holder = h
	}
	if meta := text("m"); meta != "" && len(meta) <= MaxMeta {
		// What status shows of a holder, and no more: a record that is
		// not one tells nothing of it.
		var info semaphore.HolderInfo
		if json.Unmarshal([]byte(meta), &info) == nil {
			e.HolderInfo = boundInfo(info)
		}
	}
	number := func(name string, lo, hi int64) int64 {
		n, err := strconv.ParseInt(text(name), 10, 64)
		if err != nil || n < lo || n > hi {
			return 0
		}
		return n
	}
	e.Permits, e.Weight = int(number("n", 0, MaxPermits)), int(number("w", 0, MaxPermits))
	e.Token = number("t", 0, MaxInt)
	if x, err := strconv.Atoi(text("x")); err == nil && x >= 0 && x <= 255 {
		e.ExitStatus = &x
	}
	e.Held, e.Waited = span(number("held", 0, MaxInt)), span(number("wait", 0, MaxInt))
	e.Cooling = within(number("cool", 0, MaxInt), MaxCool)
	e.Capacity = int(number("cap", 0, MaxPermits))
	e.Reason = cut(text("why"), MaxReason)
	e.Until = within(number("until", 0, MaxInt), MaxPause)
	e.Forced = text("f") == "1"
	if slots, err := semaphore.ParseSlotNumbers(text("s")); err == nil && len(slots) == e.Weight {
		e.Slots.Numbers = slots
	}
	if by := text("by"); by != "" {
		info := ReadMeta(by)
		e.By = &info
	}
	return e, true
}

// boundInfo bounds what an event tells of its holder.
func boundInfo(info semaphore.HolderInfo) semaphore.HolderInfo {
	info.Host, info.Command = cut(info.Host, maxHostText), cut(info.Command, maxHostText)
	info.Label = cut(info.Label, semaphore.MaxLabel)
	info.PID = max(info.PID, 0)
	info.MaxRuntime = min(max(info.MaxRuntime, 0), semaphore.MaxMaxRuntime)
	return info
}

// cut is s, at most most bytes of it, whole characters.
func cut(s string, most int) string {
	if len(s) <= most {
		return s
	}
	for most > 0 && !utf8.RuneStart(s[most]) {
		most--
	}
	return s[:most]
}

// readCounts reads the counters status.lua answered, name, value, ...;
// nil when there are none. A value that is not a count is left out, and
// a sum of ms counts at most a hundred years. A bucket is named by its
// bound, in ms ("w:250", "w:inf"), or by its index among
// semaphore.OldBuckets ("w1"... kept before the buckets began at 10ms):
// each count goes to the bucket of semaphore.Buckets its bound falls in,
// added to what is there, so that no cumulative count goes down however
// the buckets change.
func readCounts(flat []any) *semaphore.Counts {
	var c semaphore.Counts
	found := false
	slots := len(semaphore.Buckets) + 1
	observe := func(h *semaphore.Histogram, bucket string, n int64) bool {
		i, ok := bucketOf(bucket)
		if !ok {
			return false
		}
		if h.Counts == nil {
			h.Counts = make([]uint64, slots)
		}
		h.Counts[i] = min(h.Counts[i]+uint64(n), MaxInt) // each at most MaxInt: no wrap
		return true
	}
	for i := 0; i+1 < len(flat); i += 2 {
		name, _ := flat[i].(string)
		value, _ := flat[i+1].(string)
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n < 0 || n > MaxInt {
			continue
		}
		switch {
		case name == "grants":
			c.Grants = n
		case name == "busy":
			c.Busy = n
		case name == "timeouts":
			c.Timeouts = n
		case name == "losses":
			c.Losses = n
		case name == "revokes":
			c.Revokes = n
		case name == "wsum":
			c.Wait.Sum = span(n)
		case name == "hsum":
			c.Held.Sum = span(n)
		case name == "recent":
			c.RecentHold = span(n)
		case strings.HasPrefix(name, "w") && observe(&c.Wait, name[1:], n):
		case strings.HasPrefix(name, "h") && observe(&c.Held, name[1:], n):
		default:
			continue
		}
		found = true
	}
	if !found {
		return nil
	}
	return &c
}

// bucketOf is the index in semaphore.Histogram.Counts of a bucket of the
// counters as a field names it after its "w" or "h": ":" and its bound in
// ms, ":inf", or the index from 1 of one of semaphore.OldBuckets (one
// more: longer than the last).
func bucketOf(name string) (int, bool) {
	if bound, ok := strings.CutPrefix(name, ":"); ok {
		if bound == "inf" {
			return len(semaphore.Buckets), true
		}
		ms, err := strconv.ParseInt(bound, 10, 64)
		if err != nil || ms < 0 {
			return 0, false
		}
		return semaphore.Bucket(time.Duration(min(ms, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond), true
	}
	i, err := strconv.Atoi(name)
	switch {
	case err != nil || i < 1 || i > len(semaphore.OldBuckets)+1:
		return 0, false
	case i > len(semaphore.OldBuckets):
		return len(semaphore.Buckets), true
	}
	return semaphore.Bucket(semaphore.OldBuckets[i-1]), true
}
