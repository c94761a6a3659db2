package protocol

import (
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// StatusArgs are status.lua's arguments: List is how many holders, and
// how many waiters, it lists at most; 0 is StatusList, which DecodeStatus
// expects.
type StatusArgs struct{ List int }

func (StatusArgs) script() *Script { return statusScript }

func (a StatusArgs) argv(Keys) []any {
	if a.List <= 0 {
		a.List = StatusList
	}
	return []any{"list", a.List}
}

// statusReply is status.lua's reply, as it comes.
type statusReply struct {
	now, capacity, held, holding, waiting, fenced int64
	age                                           int64
	holders, waiters, counts, slotNames           []any
	Policy
}

// DecodeStatus reads status.lua's reply about key. A record that is not
// one is left out, as the scripts do.
func DecodeStatus(key string, res any) (semaphore.KeyStatus, error) {
	var r statusReply
	var paused int64
	fields := r.Policy.fields(&paused)
	maps.Copy(fields, map[string]any{
		"now": &r.now, "capacity": &r.capacity, "held": &r.held, "holding": &r.holding, "waiting": &r.waiting,
		"holders": &r.holders, "waiters": &r.waiters, "fenced": &r.fenced, "counts": &r.counts,
		"slotnames": &r.slotNames, "age": &r.age,
	})
	err := decodeReply(statusScript.name, res, fields)
	r.Policy.set(paused)
	if err != nil {
		return semaphore.KeyStatus{}, err
	}
	if len(r.holders) > StatusList || len(r.waiters) > StatusList {
		return semaphore.KeyStatus{}, fmt.Errorf("%s: unexpected reply of %d holders and %d waiters", statusScript.name, len(r.holders), len(r.waiters))
	}
	st := semaphore.KeyStatus{Key: key, Capacity: int(max(r.capacity, 0)), Held: int(max(r.held, 0)),
		Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{}, Cooling: []semaphore.Cooling{}, Fenced: within(r.fenced, MaxTTL),
		StoredCapacity: int(r.Stored), Paused: r.Policy.Pause(), Counts: readCounts(r.counts), SlotNames: readNames(r.slotNames),
		PriorityAge: time.Duration(min(max(r.age, 0), semaphore.MaxPriorityAge.Milliseconds())) * time.Millisecond}
	for _, e := range r.holders {
		entry, _ := e.([]any)
		if len(entry) != 4 {
			return semaphore.KeyStatus{}, fmt.Errorf("%s: unexpected holder %s", statusScript.name, shortReply(e))
		}
		expiry, _ := entry[0].(int64)
		rec, _ := entry[1].(string)
		cooling, _ := entry[2].(string)
		id, _ := entry[3].(string)
		h, err := readHolder(rec, r.now)
		if err != nil {
			continue
		}
		if exit, err := strconv.Atoi(cooling); cooling != "" && err == nil && exit >= -1 && exit <= 255 {
			c := semaphore.Cooling{HolderInfo: h.HolderInfo, Permits: h.Permits, Weight: h.Weight,
				EndsIn: within(expiry-r.now, MaxCool), ExitStatus: exit, Slots: st.Named(h.Slots.Numbers)}
			if publicID.MatchString(id) {
				c.ID = id
			}
			st.Cooling = append(st.Cooling, c)
			continue
		}
		// A holder, or one whose cooling is not one (someone else wrote
		// it): shown, as it counts.
		h.ExpiresIn = within(expiry-r.now, MaxTTL)
		h.Slots = st.Named(h.Slots.Numbers)
		if publicID.MatchString(id) {
			h.ID = id
		}
		st.Holders = append(st.Holders, h)
	}
	for _, e := range r.waiters {
		rec, _ := e.(string)
		w, err := readWaiter(rec, r.now)
		if err != nil {
			continue
		}
		w.Position = len(st.Waiters) + 1
		st.Waiters = append(st.Waiters, w)
	}
	st.Unlisted = int(max(r.holding-StatusList, 0) + max(r.waiting-StatusList, 0))
	return st, nil
}

// publicID is a holder's public id as the scripts make it (lib.lua's
// publicID); a reply is checked against it.
var publicID = regexp.MustCompile(`^[0-9a-f]{10}$`)

// IsPublicID tells whether id could be a holder's public id.
func IsPublicID(id string) bool { return publicID.MatchString(id) }

// within is ms as a duration, from 0 to most: replies are bounded.
func within(ms int64, most time.Duration) time.Duration {
	return time.Duration(min(max(ms, 0), most.Milliseconds())) * time.Millisecond
}

// readNames reads the names of a key's slots: names that are not names
// are none.
func readNames(list []any) []string {
	names := make([]string, len(list))
	for i, v := range list {
		names[i], _ = v.(string)
	}
	if len(names) == 0 || semaphore.CheckSlotNames(names) != nil {
		return nil
	}
	return names
}
