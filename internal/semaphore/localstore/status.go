//go:build unix

package localstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// Status implements Store. With no keys, it reports on every key held,
// waited for, used in the last StaleAfter, or with settings (policy.go),
// and removes the directories of the others it may remove
// (removeUnused).
func (s *Store) Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	if len(keys) == 0 {
		return s.statusAll(ctx)
	}
	out := make([]semaphore.KeyStatus, 0, len(keys))
	for _, key := range keys {
		st := emptyStatus(key)
		k, err := s.openKeyDir(keyDirName(key))
		if err == nil {
			st, err = s.statusIn(ctx, k, key)
			k.close()
		}
		if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: never used
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		out = append(out, st)
	}
	return out, nil
}

func emptyStatus(key string) semaphore.KeyStatus {
	return semaphore.KeyStatus{Key: key, Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{}, Cooling: []semaphore.Cooling{}}
}

// statusAll reports on every key that has a directory and is in use, or
// was lately. Directories the caller may not use (another user's) are
// left out, as are names no key has.
func (s *Store) statusAll(ctx context.Context) ([]semaphore.KeyStatus, error) {
	entries, err := s.entries()
	if err != nil {
		return nil, err
	}
	out := []semaphore.KeyStatus{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			s.sweepHidden(name)
			continue
		}
		if !e.IsDir() {
			continue // not a key's: no symbolic link, no stray file
		}
		k, err := s.openKeyDir(name)
		if err != nil {
			continue // gone meanwhile, or not the caller's to use
		}
		st, ok, err := s.statusOfDir(ctx, k)
		k.close()
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b semaphore.KeyStatus) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// statusOfDir reports on the key whose directory k is; ok is false for a
// directory no key has, or one unused for StaleAfter and with no
// settings, which it removes.
func (s *Store) statusOfDir(ctx context.Context, k *keyDir) (semaphore.KeyStatus, bool, error) {
	key, ok := keyFromDirName(k.name)
	if !ok && strings.HasPrefix(k.name, "#") {
		key, ok = k.readKey()
	}
	if !ok {
		return semaphore.KeyStatus{}, false, nil
	}
	st, err := s.statusIn(ctx, k, key)
	if err != nil {
		return st, false, fmt.Errorf("status of key %q: %w", key, err)
	}
	if st.Held == 0 && len(st.Waiters) == 0 && st.StoredCapacity == 0 && st.Paused == nil && time.Since(k.lastUse()) >= StaleAfter {
		// Its past stays for semrun events and metrics as long as a
		// Redis keeps it: last night's job is still there in the
		// morning.
		if time.Since(k.lastEvent()) >= semaphore.EventLife {
			s.removeUnused(k, StaleAfter)
		}
		return st, false, nil
	}
	return st, true, nil
}

// keyFile names the file in which a hashed key directory keeps its key.
const keyFile = "key"

// readKey reads the key of a hashed key directory; ok is false when the
// file is missing or names another key.
func (k *keyDir) readKey() (string, bool) {
	f, err := k.open(keyFile, os.O_RDONLY)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, semaphore.MaxKeyLen+1))
	key := string(b)
	return key, err == nil && keyDirName(key) == k.name
}

// statusGrantWait bounds the wait for the grant lock status looks at the
// permits under; past it (a holder stopped there), it looks without.
const statusGrantWait = 50 * time.Millisecond

// lockForStatus takes k's grant lock for a status, waiting at most
// statusGrantWait: nil, and no error, when the key has no grant file or
// its lock is held longer (status then reads without it).
func lockForStatus(ctx context.Context, k *keyDir) (*os.File, error) {
	grant, err := k.open(grantFile, os.O_RDONLY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, statusGrantWait)
	err = lockWait(waitCtx, grant)
	cancel()
	switch {
	case err == nil:
		return grant, nil
	case ctx.Err() != nil:
		return nil, ctx.Err() // lockWait closed grant
	case waitCtx.Err() != nil:
		return nil, nil // lockWait closed it
	}
	return nil, err // lockWait closed grant
}

// statusIn reports on key, whose directory k is.
func (s *Store) statusIn(ctx context.Context, k *keyDir, key string) (semaphore.KeyStatus, error) {
	st := emptyStatus(key)
	// Under the grant lock, the permits held and the holders' files agree.
	grant, err := lockForStatus(ctx, k)
	if err != nil {
		return st, err
	}
	if grant != nil {
		defer grant.Close()
	}
	if b, err := k.readSmall(capacityFile); err == nil {
		st.Capacity, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	now := time.Now()
	p := k.policyOrNone(key, now, s.warnf)
	st.StoredCapacity, st.Paused, st.SlotNames = p.Capacity, p.paused(now), slices.Clone(p.slotNames())
	// A hold is one holder, its keeper, however many are attached to it.
	recs := append(k.lockedRecords(heldPrefix, s.warnf), k.holdHolders(key, s.warnf)...)
	held, err := k.countHeld(s.warnf, cmp.Or(max(st.StoredCapacity, 0), st.Capacity))
	old, oldRecs := k.olderHolders()
	if err != nil && !(errors.Is(err, unix.ENOENT) && len(recs) == 0) {
		// Never a silent 0: the holders' records say who holds.
		var bad *badFileError
		switch {
		case errors.As(err, &bad):
			s.warnf("skipped %s", err)
		case errors.Is(err, unix.ENOENT):
			s.warnf("key %q: key directory %s: %v", key, k.path, errPermitsGone)
		default:
			s.warnf("key %q: %v", key, err)
		}
		held = 0
		for _, r := range recs {
			held += max(r.Weight, 1)
		}
	}
	st.Held = held + old
	// Permits held that no record says who holds (its holder's could not
	// be made, or was lost, or is being written) are held all the same, as
	// a grant counts them: by a holder not listed, so that no one reads
	// the key as free (semrun key drain).
	listed := 0
	for _, r := range recs {
		listed += min(max(r.Weight, 1), semaphore.MaxPermits)
	}
	if held > listed {
		st.Unlisted++
	}
	live := map[string]bool{}
	for _, r := range append(recs, oldRecs...) {
		if !validID(r.ID) {
			r.ID = "" // not one semrun drew: nothing to revoke it by
		}
		live[r.ID] = true
		st.Holders = append(st.Holders, semaphore.Holder{
			ID: r.ID, HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: r.Weight, Token: r.Token,
			Age: now.Sub(time.UnixMilli(r.SinceMS)), Slots: r.slots(),
		})
	}
	// After the permits, as a grant counts them (cool.go); a pending one's
	// holder is among the holders.
	probe, _ := k.openPermits()
	coolings := k.coolings(now, grant != nil, s.warnf, probe.anyFree)
	probe.close()
	for _, r := range coolings {
		st.Held += r.Weight
		c := semaphore.Cooling{
			HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: r.Weight,
			EndsIn: time.UnixMilli(r.EndsMS).Sub(now), ExitStatus: r.ExitStatus, Slots: r.slots(),
		}
		if validID(r.ID) {
			c.ID = r.ID
		}
		st.Cooling = append(st.Cooling, c)
	}
	if grant != nil {
		k.sweepHolds(sweepFew)
		k.sweepRevokes(live)
		for _, prefix := range []string{coolDraftPrefix, policyDraftPrefix, revokeDraftPrefix, eventsDraftPrefix} {
			k.sweepDrafts(prefix, sweepFew)
		}
		_, _ = flock(grant, unix.LOCK_UN)
	}
	for _, r := range k.lockedRecords(waitPrefix, s.warnf) {
		st.Waiters = append(st.Waiters, semaphore.Waiter{HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: r.Weight, Waited: now.Sub(time.UnixMilli(r.SinceMS))})
	}
	st.Counts = k.counts(s.warnf)
	slices.SortStableFunc(st.Holders, func(a, b semaphore.Holder) int { return int(b.Age - a.Age) })
	slices.SortStableFunc(st.Waiters, func(a, b semaphore.Waiter) int { return int(b.Waited - a.Waited) })
	slices.SortStableFunc(st.Cooling, func(a, b semaphore.Cooling) int { return int(a.EndsIn - b.EndsIn) })
	return st, nil
}

// lockedRecords reads the records of the files named prefix* that someone
// holds locked: live holders or waiters.
// A file that is not a regular one with one link is skipped, with a line
// to warnf.
func (k *keyDir) lockedRecords(prefix string, warnf func(string, ...any)) []record {
	var out []record
	k.eachLocked(prefix, warnf, func(f *os.File) bool {
		// No record: taken or given back this instant.
		if r, err := readRecord(f); err == nil {
			out = append(out, r)
		}
		return true
	})
	return out
}

// anyLocked tells whether someone holds a file named prefix* locked.
func (k *keyDir) anyLocked(prefix string) bool {
	found := false
	k.eachLocked(prefix, nil, func(*os.File) bool {
		found = true
		return false
	})
	return found
}

// eachLocked calls fn with each file named prefix* that someone holds
// locked, while fn returns true. Files semrun will not use are skipped,
// said to warnf when it is set.
func (k *keyDir) eachLocked(prefix string, warnf func(string, ...any), fn func(*os.File) bool) {
	for _, name := range k.names(prefix) {
		f, err := k.open(name, os.O_RDONLY)
		var bad *badFileError
		if errors.As(err, &bad) && warnf != nil {
			warnf("skipped %s", err)
		}
		if err != nil {
			continue
		}
		free, err := flock(f, unix.LOCK_SH|unix.LOCK_NB)
		more := true
		if err == nil && !free {
			more = fn(f)
		}
		f.Close()
		if !more {
			return
		}
	}
}

// readSmall reads the start of one of the key's small files.
func (k *keyDir) readSmall(name string) ([]byte, error) {
	f, err := k.open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 64))
}
