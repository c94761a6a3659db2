//go:build unix

package localstore

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// A permit with a Request.MinHold stays taken until then, as cooling,
// even when its holder is gone before: given back sooner, crashed or
// killed, its release never made. So its cooling is written with its
// grant, under the grant lock, as a file of the key's directory, "cool."
// and a random suffix, saying who holds the permit, which permits
// ("seats"), when the cooling ends, and how the command ended: unknown
// (-1) until its release says, by writing the file anew. A release that
// owes no cooling (the min hold passed, a failure with CoolAfterSuccess,
// no command run) removes it. It is written whole under a draft name,
// "cool-draft.*", then renamed in place, and removed, once it has ended,
// by whoever finds it so under the grant lock; status sweeps the drafts
// of releasers that died.
//
// While its holder, or a child that inherited its lock, holds every one
// of its permits, a cooling is pending: those permits count as held, and
// it does not count. Once any of them is free, it counts as cooling, and
// its permits are kept from grants until it ends: taken again, they
// would make it look pending. Its permits being its own locks, dropped
// by one unlock or close (permits_linux.go), nothing can tell the permits
// free and the cooling pending at once; where they are files of their
// own (permits_other.go), the cooling counts as soon as the first is
// free.
//
// No grant may let coolings and held permits take more than N, and a
// release takes no grant lock. So a taker, under the grant lock, looks at
// the coolings after it has looked at the permits (take): a permit it
// found free was given back before it looked, so its cooling, if any,
// counts; one given back between the look and the count is counted
// twice, as a held permit and a cooling, which is busy for an instant,
// never one too many. Whoever removes a key's directory counts them after
// the permits too (removeUnused).
//
// A record is anyone's in the group to write: one that is not a
// cooling's, or ends further off than the longest min hold, is skipped. A
// member who writes one can keep permits taken for that long, or, by
// holding a cooling's permits, keep it pending: those permits then count
// as the member's held, so the key never has more than N taken.
//
// The end is on the wall clock, as the records' times are: the grant's
// time (lease.sinceMS) and MinHold. A step of the clock moves it.
const (
	coolPrefix      = "cool."
	coolDraftPrefix = "cool-draft."
	// maxCoolRecord bounds a cooling's record.
	maxCoolRecord = 64 << 10
)

// coolRecord is a cooling's file: its holder's record, when it ends and
// how its command ended (128+N for a signal N, -1 unknown).
type coolRecord struct {
	record
	EndsMS     int64 `json:"ends_ms"`
	ExitStatus int   `json:"exit_status"`
	// Seats are the permits its holder holds, [first, count], lowest
	// first; none in a record of a semrun before them, which counts from
	// the moment it is found.
	Seats [][2]int64 `json:"seats,omitempty"`
}

// errCoolEnded: a cooling's end has passed.
var errCoolEnded = errors.New("cooling ended")

// check says what is wrong with a cooling read back at nowMS, if
// anything; errCoolEnded once it has ended.
func (r coolRecord) check(nowMS int64) error {
	switch {
	case r.Permits < 1 || r.Permits > semaphore.MaxPermits || r.Weight < 1 || r.Weight > r.Permits:
		return fmt.Errorf("%d of %d permits", r.Weight, r.Permits)
	case r.ExitStatus < -1 || r.ExitStatus > 255:
		return fmt.Errorf("exit status %d", r.ExitStatus)
	case r.EndsMS > nowMS+semaphore.MaxMinHold.Milliseconds():
		return fmt.Errorf("ends more than %v from now", semaphore.MaxMinHold)
	case r.Seats != nil:
		if err := checkRuns(r.Seats, r.Permits, r.Weight); err != nil {
			return err
		}
	}
	if r.EndsMS <= nowMS {
		return errCoolEnded
	}
	return nil
}

// slots are the cooling's slots, those of the permits it keeps, named as
// its record names them.
func (r coolRecord) slots() semaphore.Slots {
	s := slotsOf(r.spans(), r.Permits, nil)
	if named := r.record.slots(); slices.Equal(named.Numbers, s.Numbers) {
		s.Names = named.Names
	}
	return s
}

// spans are the cooling's permits; none in an old record.
func (r coolRecord) spans() []span { return runSpans(r.Seats) }

// publishCooling leaves r in k as a cooling, and names its file.
func (k *keyDir) publishCooling(r coolRecord) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	// The suffix is 80 random bits: no other cooling's has it.
	name := coolPrefix + rand.Text()[:16]
	if err := k.writeWhole(name, coolDraftPrefix, append(b, '\n'), renameNoReplace); err != nil {
		return "", fmt.Errorf("cooling record in %s: %w", k.path, err)
	}
	return name, nil
}

// rewriteCooling writes r in place of k's cooling name, unless it is gone
// (ended, or by an operator's revoke).
func (k *keyDir) rewriteCooling(name string, r coolRecord) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(k.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := k.writeWhole(name, coolDraftPrefix, append(b, '\n'), renameOver); err != nil {
		return fmt.Errorf("cooling record in %s: %w", k.path, err)
	}
	return nil
}

// readCool reads k's cooling record name, bounded.
func (k *keyDir) readCool(name string) (coolRecord, error) {
	var r coolRecord
	f, err := k.open(name, os.O_RDONLY)
	if err != nil {
		return r, err
	}
	defer f.Close()
	err = decodeBounded(f, maxCoolRecord, "cooling record", &r)
	return r, err
}

// anyFreeFunc tells whether any of a cooling's permits is free: no
// other open file holds it. Whoever cannot tell says free: the cooling
// then counts, never is left out.
type anyFreeFunc func([]span) bool

// aCooling is a cooling that counts, and its file's name.
type aCooling struct {
	name string
	coolRecord
}

// coolings are k's coolings that count at now, anyFree telling which
// pending ones do (see above). With sweep, under the grant lock, it
// removes those that have ended, pending or not. Files that are no
// cooling's are skipped, said to warnf when it is set.
func (k *keyDir) coolings(now time.Time, sweep bool, warnf func(string, ...any), anyFree anyFreeFunc) []aCooling {
	var out []aCooling
	for _, name := range k.names(coolPrefix) {
		r, err := k.readCool(name)
		if err == nil {
			if err = r.check(now.UnixMilli()); err != nil && !errors.Is(err, errCoolEnded) {
				err = &badFileError{msg: fmt.Sprintf("cooling record %s: %v", filepath.Join(k.path, name), err)}
			}
		}
		var bad *badFileError
		switch {
		case err == nil:
			if r.Seats == nil || anyFree(r.spans()) {
				out = append(out, aCooling{name, r})
			}
		case errors.Is(err, errCoolEnded):
			if sweep {
				// In a directory a group shares, only its maker (or the
				// directory's owner) can: for others it stays, ended.
				_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
			}
		case errors.As(err, &bad) && warnf != nil:
			warnf("skipped %s", err)
		}
	}
	return out
}

// coolCount is what k's coolings take, as a grant counts them.
type coolCount struct {
	// n is how many permits they take, at most semaphore.MaxPermits.
	n int
	// first is when the first of them ends; zero without one.
	first time.Time
	// kept are their permits, which no grant takes until they end.
	kept []span
}

// cooling counts k's coolings at now, after the permits were looked at,
// under the grant lock, removing those that ended.
func (k *keyDir) cooling(now time.Time, anyFree anyFreeFunc) coolCount {
	var c coolCount
	for _, r := range k.coolings(now, true, nil, anyFree) {
		c.n = min(c.n+r.Weight, semaphore.MaxPermits)
		if end := time.UnixMilli(r.EndsMS); c.first.IsZero() || end.Before(c.first) {
			c.first = end
		}
		c.kept = append(c.kept, r.spans()...)
	}
	return c
}

// checkRuns says what is wrong with runs of permits read back, [first,
// count] each, if anything: they must be in order, apart, below permits,
// and weight in all.
func checkRuns(runs [][2]int64, permits, weight int) error {
	next, total := int64(0), int64(0)
	for _, s := range runs {
		if s[0] < next || s[1] < 1 || s[1] > int64(permits) || s[0]+s[1] > int64(permits) {
			return errors.New("its permits overlap or lie past its capacity")
		}
		next, total = s[0]+s[1], total+s[1]
	}
	if total != int64(weight) {
		return fmt.Errorf("%d permits for a weight of %d", total, weight)
	}
	return nil
}

// runSpans are runs as spans.
func runSpans(runs [][2]int64) []span {
	out := make([]span, len(runs))
	for i, s := range runs {
		out[i] = span{s[0], s[1]}
	}
	return out
}

// spanRuns are spans as a record's runs.
func spanRuns(spans []span) [][2]int64 {
	out := make([][2]int64, len(spans))
	for i, sp := range spans {
		out[i] = [2]int64{sp.start, sp.n}
	}
	return out
}

// without is spans, in order, less the permits of kept.
func without(spans, kept []span) []span {
	kept = slices.Clone(kept)
	slices.SortFunc(kept, func(a, b span) int { return int(min(max(a.start-b.start, -1), 1)) })
	var out []span
	for _, sp := range spans {
		at, end := sp.start, sp.start+sp.n
		for _, k := range kept {
			if k.start+k.n <= at || k.start >= end {
				continue
			}
			if k.start > at {
				out = append(out, span{at, k.start - at})
			}
			at = max(at, k.start+k.n)
		}
		if at < end {
			out = append(out, span{at, end - at})
		}
	}
	return out
}

// permitCount is how many permits spans are.
func permitCount(spans []span) int64 {
	n := int64(0)
	for _, sp := range spans {
		n += sp.n
	}
	return n
}
