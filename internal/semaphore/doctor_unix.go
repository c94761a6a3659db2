//go:build unix

// The checks of semrun doctor on the local store, which only unix has.

package semaphore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Doctor checks the lock directory: that it can be used (it exists or was
// created, it is safe and writable: NewLocal checked that), who shares it,
// and that a lock can be taken and freed in it. It leaves nothing behind.
func (s *Local) Doctor(ctx context.Context) []Check {
	return []Check{s.describeDir(), s.tryLock(ctx)}
}

// describeDir says who may use the lock directory.
func (s *Local) describeDir() Check {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.dir.Fd()), &st); err != nil {
		return Check{Name: "lock-dir", Status: CheckFail, Detail: fmt.Sprintf("%s: %v", s.path, err),
			Fix: "choose another lock directory (--lock-dir)"}
	}
	who := "this user's"
	switch {
	case st.Mode&unix.S_ISGID != 0 && st.Mode&0o020 != 0:
		group := "gid " + strconv.Itoa(int(st.Gid))
		if g, err := user.LookupGroupId(strconv.Itoa(int(st.Gid))); err == nil {
			group = "group " + g.Name
		}
		who = "shared by " + group + " (setgid, group-writable)"
	case st.Uid != uint32(os.Geteuid()):
		who = userName(st.Uid) + "'s"
	}
	return Check{Name: "lock-dir", Status: CheckOK, Detail: fmt.Sprintf("%s: %s (mode %04o), writable", s.path, who, st.Mode&0o7777)}
}

// tryLock takes a permit of a throw-away key and frees it, then removes
// the key's directory.
func (s *Local) tryLock(ctx context.Context) Check {
	key := doctorKey()
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	l, err := s.Acquire(ctx, Request{Key: key, Permits: 1, TTL: doctorTimeout, NoWait: true, Holder: HolderInfo{Command: "doctor"}})
	if err == nil {
		err = l.Release(ctx)
	}
	if rmErr := s.removeKey(key); err == nil && rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = fmt.Errorf("remove the throw-away key's directory: %w", rmErr)
	}
	if err != nil {
		return Check{Name: "lock", Status: CheckFail, Detail: err.Error(),
			Fix: "choose a lock directory on a local file system that supports flock(2) (--lock-dir)"}
	}
	return Check{Name: "lock", Status: CheckOK, Detail: "took and freed a lock (flock) on a throw-away key"}
}

// removeKey removes a key's directory and its files, never through a
// symbolic link. Only doctor's own keys are removed: a key in use must
// keep its files.
func (s *Local) removeKey(key string) error {
	name := keyDirName(key)
	dir, err := openDir(int(s.dir.Fd()), name, filepath.Join(s.path, name))
	if err != nil {
		return err
	}
	entries, err := dir.ReadDir(-1)
	for _, e := range entries {
		if uerr := unix.Unlinkat(int(dir.Fd()), e.Name(), 0); err == nil {
			err = uerr
		}
	}
	dir.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(int(s.dir.Fd()), name, unix.AT_REMOVEDIR)
}
