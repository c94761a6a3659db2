package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/semaphore"
)

// Turn is what a waiter read from its wake list.
type Turn struct {
	// Handed is true when a script gave the waiter its permit: Token is
	// its fencing token and Expiry the server time its lease lapses at.
	Handed        bool
	Token, Expiry int64
	// Slots are the slots of a permit handed over.
	Slots semaphore.Slots
	// Superseded, when not nil, is the newer caller that sent the waiter
	// away from the line ("s <meta>").
	Superseded *semaphore.HolderInfo
	// Look, when not handed, is the server time at which the waiter is to
	// ask again: a permit handed to the waiter before it may lapse
	// unclaimed then. 0 for an element that is neither: garbage.
	Look int64
}

// maxTurn bounds a turn record: its numbers, and every slot of a key
// with a name each.
const maxTurn = 64 + semaphore.MaxSlots*(5+semaphore.MaxSlotName*utf8.UTFMax+1)

// ReadTurn reads a turn record (lib.lua's turnRecord): "g <token> <expiry
// ms>[ <slots>[ <slot names>]]" for a permit handed over, "c <ms>" to look
// again then. Anything else is garbage, which the waiter drops; slots that
// are not slots are none.
func ReadTurn(elem string) Turn {
	var t Turn
	if len(elem) > maxTurn {
		return t
	}
	if f := strings.SplitN(elem, " ", 5); len(f) >= 3 && f[0] == "g" {
		token, err1 := strconv.ParseInt(f[1], 10, 64)
		expiry, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && token > 0 && expiry > 0 {
			t.Handed, t.Token, t.Expiry = true, token, expiry
			if len(f) >= 4 {
				t.Slots = readSlots(f[3], strings.Join(f[4:], " "))
			}
			return t
		}
	}
	if meta, ok := strings.CutPrefix(elem, "s "); ok {
		by := ReadMeta(meta)
		t.Superseded = &by
		return t
	}
	if n, err := fmt.Sscanf(elem, "c %d", &t.Look); err != nil || n != 1 || t.Look <= 0 {
		t.Look = 0
	}
	return t
}

// ReadMeta reads a caller's record as a script hands it on (a newer
// caller's, that superseded a waiter): what status would show of it,
// bounded; nothing of one that is not one.
func ReadMeta(meta string) semaphore.HolderInfo {
	var info semaphore.HolderInfo
	if len(meta) > MaxMeta || json.Unmarshal([]byte(meta), &info) != nil {
		return semaphore.HolderInfo{}
	}
	return boundInfo(info)
}

// readSlots reads slots, and their names, as the scripts write them: slots
// that are not slots are none, names that are not names none.
func readSlots(numbers, names string) semaphore.Slots {
	list, err := semaphore.ParseSlotNumbers(numbers)
	if err != nil {
		return semaphore.Slots{}
	}
	return semaphore.NamedSlots(list, semaphore.ParseSlotNames(names))
}

// readHolder reads a holder record (lib.lua's holderRecord), now being the
// server's clock in ms.
// Its slots, when it holds any, come before the JSON: "s0,3 {...}"; slots
// that are not its weight's are none.
func readHolder(rec string, now int64) (semaphore.Holder, error) {
	var h semaphore.Holder
	var slots string
	n, err := readRecord(rec, 4, &h.HolderInfo, &slots)
	if err != nil {
		return h, err
	}
	if n[0] < 1 || n[0] > MaxPermits || n[3] < 1 || n[3] > n[0] || n[1] < 1 {
		return h, fmt.Errorf("malformed record %.200q", rec)
	}
	h.Permits, h.Token, h.Age, h.Weight = int(n[0]), n[1], span(now-n[2]), int(n[3])
	if list, err := semaphore.ParseSlotNumbers(slots); err == nil && len(list) == h.Weight {
		h.Slots.Numbers = list
	}
	return h, nil
}

// readWaiter reads a waiter record (lib.lua's waiterRecord), now being the
// server's clock in ms.
// Its priority and age, when not 0, come before the JSON: "q5,60000
// {...}"; its Priority is the one the line counts now.
func readWaiter(rec string, now int64) (semaphore.Waiter, error) {
	var w semaphore.Waiter
	var order string
	n, err := readRecord(rec, 5, &w.HolderInfo, &order)
	if err != nil {
		return w, err
	}
	if n[1] < 1 || n[1] > MaxPermits || n[2] < 1 || n[2] > n[1] {
		return w, fmt.Errorf("malformed record %.200q", rec)
	}
	w.Permits, w.Weight, w.Waited = int(n[1]), int(n[2]), span(now-n[3])
	if p, a, ok := strings.Cut(order, ","); ok {
		prio, err1 := strconv.Atoi(p)
		age, err2 := strconv.ParseInt(a, 10, 64)
		if err1 == nil && err2 == nil && prio >= semaphore.MinPriority && prio <= semaphore.MaxPriority &&
			age >= 0 && age <= semaphore.MaxPriorityAge.Milliseconds() {
			w.Priority = semaphore.Effective(prio, time.Duration(age)*time.Millisecond, w.Waited)
		}
	}
	return w, nil
}

// span is ms as a duration, from 0 to 100 years: records are anyone's.
func span(ms int64) time.Duration { return within(ms, 100*365*24*time.Hour) }

// Elapsed is a span of ms a script answered that may be longer than any
// lease (how long holds last), from 0 to 100 years.
func Elapsed(ms int64) time.Duration { return span(ms) }

// readRecord reads count integers, then the holder JSON, from a record;
// with more, what comes before the JSON, after a letter ("s<slots> " of a
// holder, "q<priority>,<age> " of a waiter), into it.
func readRecord(rec string, count int, info *semaphore.HolderInfo, more *string) ([]int64, error) {
	f := strings.SplitN(rec, " ", count+1)
	if len(f) != count+1 {
		return nil, fmt.Errorf("malformed record %.200q", rec)
	}
	nums := make([]int64, count)
	for i := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("malformed record %.200q", rec)
		}
		nums[i] = n
	}
	if more != nil && f[count] != "" && f[count][0] >= 'a' && f[count][0] <= 'z' {
		*more, f[count], _ = strings.Cut(f[count][1:], " ")
	}
	if f[count] != "" {
		if err := json.Unmarshal([]byte(f[count]), info); err != nil {
			return nil, fmt.Errorf("malformed record %.200q: %w", rec, err)
		}
	}
	return nums, nil
}
