//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// Status implements Store. With no keys, it reports on every key that has
// a directory in the lock directory.
func (s *Store) Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	all := len(keys) == 0
	if all {
		var err error
		if keys, err = s.keys(); err != nil {
			return nil, err
		}
	}
	out := make([]semaphore.KeyStatus, 0, len(keys))
	for _, key := range keys {
		st, err := s.status(ctx, key)
		if all && errors.Is(err, os.ErrPermission) {
			continue // another user's private key
		}
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// keys lists the keys that have a directory, in order.
func (s *Store) keys() ([]string, error) {
	d, err := reopenDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", s.path, unwrapPath(err))
	}
	var keys []string
	for _, e := range entries {
		if !e.IsDir() {
			continue // not a key's: no symbolic link, no stray file
		}
		name := e.Name()
		if key, ok := keyFromDirName(name); ok {
			keys = append(keys, key)
		} else if strings.HasPrefix(name, "#") {
			if key, err := s.readKeyFile(name); err == nil && keyDirName(key) == name {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// keyFile names the file in which a hashed key directory keeps its key.
const keyFile = "key"

func (s *Store) readKeyFile(name string) (string, error) {
	fd, err := unix.Openat(int(s.dir.Fd()), name+"/"+keyFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), keyFile)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, semaphore.MaxKeyLen+1))
	return string(b), err
}

func (s *Store) status(ctx context.Context, key string) (semaphore.KeyStatus, error) {
	st := semaphore.KeyStatus{Key: key, Holders: []semaphore.Holder{}, Waiters: []semaphore.Waiter{}}
	dir, err := openDir(int(s.dir.Fd()), keyDirName(key), filepath.Join(s.path, keyDirName(key)))
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return st, nil // never used
		}
		return st, err
	}
	k := &keyDir{dir: dir, path: dir.Name()}
	defer k.close()
	// Looking at the seats under the grant lock keeps a probe of a free
	// seat from making someone taking it think it held.
	grant, err := k.open(grantFile, os.O_RDONLY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return st, nil
		}
		return st, err
	}
	defer func() {
		if grant != nil {
			grant.Close()
		}
	}()
	if err := lockWait(ctx, grant); err != nil {
		if ctx.Err() != nil {
			grant = nil // lockWait closes it
		}
		return st, err
	}
	if b, err := k.readSmall(capacityFile); err == nil {
		st.Capacity, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	now := time.Now()
	// A holder of weight K has a record in each of its K seats.
	seen := map[int64]bool{}
	for _, r := range k.lockedRecords(seatPrefix) {
		st.Held++
		if seen[r.Token] {
			continue
		}
		seen[r.Token] = true
		st.Holders = append(st.Holders, semaphore.Holder{
			HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: r.Weight, Token: r.Token,
			Age: now.Sub(time.UnixMilli(r.SinceMS)),
		})
	}
	_, _ = flock(grant, unix.LOCK_UN)
	for _, r := range k.lockedRecords(waitPrefix) {
		st.Waiters = append(st.Waiters, semaphore.Waiter{HolderInfo: r.HolderInfo, Permits: r.Permits, Weight: r.Weight, Waited: now.Sub(time.UnixMilli(r.SinceMS))})
	}
	slices.SortStableFunc(st.Holders, func(a, b semaphore.Holder) int { return int(b.Age - a.Age) })
	slices.SortStableFunc(st.Waiters, func(a, b semaphore.Waiter) int { return int(b.Waited - a.Waited) })
	return st, nil
}

// lockedRecords reads the records of the files named prefix* that someone
// holds locked: live holders or waiters.
func (k *keyDir) lockedRecords(prefix string) []record {
	var out []record
	k.eachLocked(prefix, func(f *os.File) bool {
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
	k.eachLocked(prefix, func(*os.File) bool {
		found = true
		return false
	})
	return found
}

// eachLocked calls fn with each file named prefix* that someone holds
// locked, while fn returns true.
func (k *keyDir) eachLocked(prefix string, fn func(*os.File) bool) {
	for _, name := range k.names(prefix) {
		f, err := k.open(name, os.O_RDONLY)
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
