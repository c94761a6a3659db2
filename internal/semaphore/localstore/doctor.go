//go:build unix

package localstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// Doctor checks the lock directory: that it can be used (it exists or was
// created, it is safe and writable: New checked that), who shares it,
// and that a lock can be taken and freed in it. It leaves nothing behind.
func (s *Store) Doctor(ctx context.Context) []semaphore.Check {
	return []semaphore.Check{s.describeDir(), s.tryLock(ctx)}
}

// describeDir says who may use the lock directory.
func (s *Store) describeDir() semaphore.Check {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.dir.Fd()), &st); err != nil {
		return semaphore.Check{Name: "lock-dir", Status: semaphore.CheckFail, Detail: fmt.Sprintf("%s: %v", s.path, err),
			Fix: fmt.Sprintf("choose another lock directory (%s)", s.names.Name(DirSetting))}
	}
	who := "this user's"
	switch {
	case groupShared(modeOf(&st)):
		who = "shared by " + groupName(st.Gid) + " (setgid, group-writable, sticky)"
	case st.Uid != uint32(os.Geteuid()):
		who = userName(st.Uid) + "'s"
	}
	return semaphore.Check{Name: "lock-dir", Status: semaphore.CheckOK, Detail: fmt.Sprintf("%s: %s (mode %04o), writable", s.path, who, st.Mode&0o7777)}
}

// doctorLock bounds the lock doctor takes.
const doctorLock = 5 * time.Second

// tryLock takes a permit of a throw-away key and frees it, then removes
// the key's directory.
func (s *Store) tryLock(ctx context.Context) semaphore.Check {
	key := "semrun-doctor-" + rand.Text()
	ctx, cancel := context.WithTimeout(ctx, doctorLock)
	defer cancel()
	l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: doctorLock, NoWait: true, Holder: semaphore.HolderInfo{Command: "doctor"}})
	if err == nil {
		err = l.Release(ctx)
	}
	if rmErr := s.removeKey(key); err == nil && rmErr != nil && !errors.Is(rmErr, unix.ENOENT) {
		err = fmt.Errorf("remove the throw-away key's directory: %w", rmErr)
	}
	if err != nil {
		return semaphore.Check{Name: "lock", Status: semaphore.CheckFail, Detail: err.Error(),
			Fix: fmt.Sprintf("choose a lock directory on a local file system that supports %s (%s)", locksNeeded, s.names.Name(DirSetting))}
	}
	return semaphore.Check{Name: "lock", Status: semaphore.CheckOK, Detail: "took and freed a lock (" + locksTaken + ") on a throw-away key"}
}

// removeKey removes the throw-away key's directory, as status removes a
// stale one (removeUnused): never from under a caller that opened it.
func (s *Store) removeKey(key string) error {
	k, err := s.openKeyDir(keyDirName(key))
	if err != nil {
		return err
	}
	defer k.close()
	if !s.removeUnused(k, 0) {
		return fmt.Errorf("key directory %s: in use", k.path)
	}
	return nil
}
