//go:build unix

package localstore

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// record is what a seat's or a waiter's file says about who holds or waits.
type record struct {
	semaphore.HolderInfo
	Permits int   `json:"permits"`
	Weight  int   `json:"weight"`
	Token   int64 `json:"token,omitempty"` // a waiter has none
	SinceMS int64 `json:"since_ms"`
}

// write puts r in f in place of what it said.
func (r record) write(f *os.File) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
}

// readRecord reads a record, bounded: a seat's file is anyone's in the
// group to write.
func readRecord(f *os.File) (record, error) {
	var r record
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 64<<10))
	if err != nil {
		return r, err
	}
	if len(b) == 0 {
		return r, io.EOF // taken or given back this instant
	}
	return r, json.Unmarshal(b, &r)
}

// makeRecord leaves a file named prefix and a random suffix in k that
// says r, locked for as long as the file returned is open. The file
// returned is read-only: a holder's is the one its child inherits.
func (k *keyDir) makeRecord(prefix string, r record) (*os.File, string, error) {
	for range maxRecordNames {
		name := prefix + rand.Text()[:16]
		w, err := createFile(int(k.dir.Fd()), name, k.path, k.fileMode())
		if err != nil {
			return nil, "", err
		}
		f, err := lockRecord(k, name, w)
		if err == nil && f != nil {
			err = r.write(w)
		}
		w.Close()
		if err != nil {
			if f != nil {
				f.Close()
			}
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
			return nil, "", err
		}
		if f != nil {
			return f, name, nil
		}
	}
	return nil, "", fmt.Errorf("no file of its own in %s after %d tries", k.path, maxRecordNames)
}

// maxRecordNames bounds the names tried for a holder's or waiter's file.
const maxRecordNames = 8

// lockRecord opens the file name that w was just made as read-only, and
// locks it. It returns nil, without error, when the name was meanwhile
// taken for a file whose owner is gone and removed (removeStale), or
// someone else holds it locked: the caller tries another name.
func lockRecord(k *keyDir, name string, w *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(k.dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), w.Name())
	var made, opened unix.Stat_t
	if unix.Fstat(int(w.Fd()), &made) != nil || unix.Fstat(fd, &opened) != nil || made.Dev != opened.Dev || made.Ino != opened.Ino {
		f.Close()
		return nil, nil // replaced by name meanwhile
	}
	// Never waiting: someone else holding the caller's new file locked
	// sends it to another name.
	ok, err := flock(f, unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		f.Close()
		return nil, err
	}
	// Between the create and the lock, another caller may have taken the
	// file for a gone one's and removed it.
	if !ok || unix.Fstat(fd, &opened) != nil || opened.Nlink == 0 {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// removeStale removes the files named prefix* whose holder or waiter is
// gone: nobody holds them locked.
func (k *keyDir) removeStale(prefix string) {
	for _, name := range k.names(prefix) {
		f, err := k.open(name, os.O_RDONLY)
		if err != nil {
			continue
		}
		// Removed only under its lock: a caller locks its file before it
		// checks that the file is still there.
		if free, _ := flock(f, unix.LOCK_EX|unix.LOCK_NB); free {
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
		}
		f.Close()
	}
}
