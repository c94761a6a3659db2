//go:build unix

package localstore

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// A permit finished before its Request.MinHold passed stays taken, as
// cooling, with no process left to hold a lock: so a cooling is a file
// of the key's directory, "cool." and a random suffix, saying who held
// the permit, how its command ended and when the cooling ends
// (coolRecord). It is written whole under a draft name, "cool-draft.*",
// then renamed in place, and removed, once it has ended, by whoever finds
// it so under the grant lock; status sweeps the drafts of releasers that
// died. A record is anyone's in the group to write:
// one that is not a cooling's, or ends further off than the longest min
// hold, is skipped.
//
// No grant may let coolings and held permits take more than N, and a
// release takes no grant lock. So a releaser makes its cooling visible
// before it unlocks its permits (lease.giveBack), and a taker, under the
// grant lock, counts coolings after it has looked at the permits (take):
// a permit it found free was unlocked before it looked, so that permit's
// cooling, if any, is counted; a release between the look and the count
// is counted twice, as a held permit and a cooling, which is busy for an
// instant, never one too many. Whoever removes a key's directory counts
// them after the permits too (removeUnused).
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
	case r.EndsMS <= nowMS:
		return errCoolEnded
	}
	return nil
}

// publishCooling leaves r in k as a cooling.
func (k *keyDir) publishCooling(r coolRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// The suffix is 80 random bits: no other cooling's has it.
	if err := k.writeWhole(coolPrefix+rand.Text()[:16], coolDraftPrefix, append(b, '\n'), renameNoReplace); err != nil {
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

// coolings are k's coolings that have not ended at now. With sweep, under
// the grant lock, it removes those that have. Files that are no cooling's
// are skipped, said to warnf when it is set.
func (k *keyDir) coolings(now time.Time, sweep bool, warnf func(string, ...any)) []coolRecord {
	var out []coolRecord
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
			out = append(out, r)
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

// cooling is how many permits k's coolings take at now, at most
// semaphore.MaxPermits, and when the first of them ends (zero without
// one); under the grant lock, removing those that ended.
func (k *keyDir) cooling(now time.Time) (int, time.Time) {
	n, first := 0, time.Time{}
	for _, r := range k.coolings(now, true, nil) {
		n = min(n+r.Weight, semaphore.MaxPermits)
		if end := time.UnixMilli(r.EndsMS); first.IsZero() || end.Before(first) {
			first = end
		}
	}
	return n, first
}
