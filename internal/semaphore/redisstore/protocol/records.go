package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Turn is what a waiter read from its wake list.
type Turn struct {
	// Handed is true when a script gave the waiter its permit: Token is
	// its fencing token and Expiry the server time its lease lapses at.
	Handed        bool
	Token, Expiry int64
	// Look, when not handed, is the server time at which the waiter is to
	// ask again: a permit handed to the waiter before it may lapse
	// unclaimed then. 0 for an element that is neither: garbage.
	Look int64
}

// ReadTurn reads a turn record (lib.lua's turnRecord): "g <token> <expiry
// ms>" for a permit handed over, "c <ms>" to look again then. Anything
// else is garbage, which the waiter drops.
func ReadTurn(elem string) Turn {
	var t Turn
	if len(elem) > 64 {
		return t
	}
	if n, err := fmt.Sscanf(elem, "g %d %d", &t.Token, &t.Expiry); err == nil && n == 2 && t.Token > 0 && t.Expiry > 0 {
		t.Handed = true
		return t
	}
	t.Token, t.Expiry = 0, 0
	if n, err := fmt.Sscanf(elem, "c %d", &t.Look); err != nil || n != 1 || t.Look <= 0 {
		t.Look = 0
	}
	return t
}

// readHolder reads a holder record (lib.lua's holderRecord), now being the
// server's clock in ms.
func readHolder(rec string, now int64) (semaphore.Holder, error) {
	var h semaphore.Holder
	n, err := readRecord(rec, 4, &h.HolderInfo)
	if err != nil {
		return h, err
	}
	if n[0] < 1 || n[0] > MaxPermits || n[3] < 1 || n[3] > n[0] || n[1] < 1 {
		return h, fmt.Errorf("malformed record %.200q", rec)
	}
	h.Permits, h.Token, h.Age, h.Weight = int(n[0]), n[1], span(now-n[2]), int(n[3])
	return h, nil
}

// readWaiter reads a waiter record (lib.lua's waiterRecord), now being the
// server's clock in ms.
func readWaiter(rec string, now int64) (semaphore.Waiter, error) {
	var w semaphore.Waiter
	n, err := readRecord(rec, 5, &w.HolderInfo)
	if err != nil {
		return w, err
	}
	if n[1] < 1 || n[1] > MaxPermits || n[2] < 1 || n[2] > n[1] {
		return w, fmt.Errorf("malformed record %.200q", rec)
	}
	w.Permits, w.Weight, w.Waited = int(n[1]), int(n[2]), span(now-n[3])
	return w, nil
}

// span is ms as a duration, from 0 to 100 years: records are anyone's.
func span(ms int64) time.Duration { return within(ms, 100*365*24*time.Hour) }

// Elapsed is a span of ms a script answered that may be longer than any
// lease (how long holds last), from 0 to 100 years.
func Elapsed(ms int64) time.Duration { return span(ms) }

// readRecord reads count integers, then the holder JSON, from a record.
func readRecord(rec string, count int, info *semaphore.HolderInfo) ([]int64, error) {
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
	if f[count] != "" {
		if err := json.Unmarshal([]byte(f[count]), info); err != nil {
			return nil, fmt.Errorf("malformed record %.200q: %w", rec, err)
		}
	}
	return nums, nil
}
