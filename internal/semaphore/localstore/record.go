//go:build unix

package localstore

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"strings"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// record is what a permit's or a waiter's file says about who holds or
// waits.
type record struct {
	// ID is a holder's public id (semaphore.Holder.ID): random, drawn at
	// its grant, and nothing else; a waiter has none.
	ID string `json:"id,omitempty"`
	semaphore.HolderInfo
	Permits int   `json:"permits"`
	Weight  int   `json:"weight"`
	Token   int64 `json:"token,omitempty"` // a waiter has none
	SinceMS int64 `json:"since_ms"`
	// Slots are the slots a holder holds, and their names (slots.go); a
	// waiter has none.
	Slots     []int    `json:"slots,omitempty"`
	SlotNames []string `json:"slot_names,omitempty"`
}

// slots are the slots r says its holder holds, checked.
func (r record) slots() semaphore.Slots {
	return checkedSlots(r.Slots, r.SlotNames, r.Permits, r.Weight)
}

// withSlots is r holding the slots s.
func (r record) withSlots(s semaphore.Slots) record {
	r.Slots, r.SlotNames = s.Numbers, keptNames(s.Names)
	return r
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

// readRecord reads a record, bounded: a permit's file is anyone's in the
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

// decodeBounded reads f, at most most bytes, as the JSON of v. A file
// longer, or no JSON, is a *badFileError that names it what.
func decodeBounded(f *os.File, most int, what string, v any) error {
	b, err := io.ReadAll(io.LimitReader(f, int64(most)+1))
	switch {
	case err != nil:
		return fmt.Errorf("read %s: %w", f.Name(), err)
	case len(b) > most:
		return &badFileError{msg: fmt.Sprintf("%s %s: longer than %d bytes", what, f.Name(), most)}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &badFileError{msg: fmt.Sprintf("%s %s: %v", what, f.Name(), err)}
	}
	return nil
}

// idLen is the length of a holder's public id: ten base32 digits, 50
// random bits, short enough to type, and telling nothing of any other
// value (a hold's secret, a record's name).
const idLen = 10

// newID draws a holder's public id.
func newID() string { return rand.Text()[:idLen] }

// validID tells whether s could be newID's.
func validID(s string) bool { return semaphore.IsRandText(s, idLen) }

// makeRecord leaves a file named prefix and a random suffix in k that
// says r, locked for as long as the file returned is open. The file
// returned is read-only: a holder's is the one its child inherits.
func (k *keyDir) makeRecord(prefix string, r record) (*os.File, string, error) {
	w, f, name, err := k.makeLocked(prefix)
	if err != nil {
		return nil, "", err
	}
	err = r.write(w)
	w.Close()
	if err != nil {
		f.Close()
		_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
		return nil, "", err
	}
	return f, name, nil
}

// makeLocked makes a file named prefix and a random suffix in k, locked
// through the read-only file f for as long as it is open; w writes it.
func (k *keyDir) makeLocked(prefix string) (w, f *os.File, name string, err error) {
	for range maxRecordNames {
		name = prefix + rand.Text()[:16]
		w, err = createFile(int(k.dir.Fd()), name, k.path, k.fileMode())
		if err != nil {
			return nil, nil, "", err
		}
		f, err = lockRecord(k, name, w)
		if err == nil && f != nil {
			return w, f, name, nil
		}
		w.Close()
		if err != nil {
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
			return nil, nil, "", err
		}
	}
	return nil, nil, "", fmt.Errorf("no file of its own in %s after %d tries", k.path, maxRecordNames)
}

// A holder's record is made before the caller takes the grant lock, as a
// draft that status and the sweeps of held.* files do not look at, and
// only written and renamed held.* under the lock once permits are taken:
// making and locking a file there would hold every other caller up.
const draftPrefix = "taking."

// draft is a holder's record to be.
type draft struct {
	k    *keyDir
	w, f *os.File
	dir  *os.File // the key's directory, for the lease to remove the record by
	name string
}

func (k *keyDir) makeDraft() (*draft, error) {
	dir, err := reopenDir(k.dir)
	if err != nil {
		return nil, err
	}
	w, f, name, err := k.makeLocked(draftPrefix)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return &draft{k: k, w: w, f: f, dir: dir, name: name}, nil
}

// publish writes r in the draft and names it a holder's, under the grant
// lock. It returns the record's file, its directory and name, which are
// the caller's then.
func (d *draft) publish(r record) (*os.File, *os.File, string, error) {
	if err := r.write(d.w); err != nil {
		return nil, nil, "", fmt.Errorf("write %s: %w", d.w.Name(), err)
	}
	name := heldPrefix + d.name[len(draftPrefix):]
	// The suffix is 80 random bits: no other holder's has it.
	if err := renameNoReplace(int(d.k.dir.Fd()), d.name, name); err != nil {
		return nil, nil, "", fmt.Errorf("rename %s: %w", d.w.Name(), err)
	}
	f, dir := d.f, d.dir
	d.f, d.dir = nil, nil
	return f, dir, name, nil
}

// close removes the draft unless it was published.
func (d *draft) close() {
	d.w.Close()
	if d.f != nil {
		_ = unix.Unlinkat(int(d.k.dir.Fd()), d.name, 0)
		d.f.Close()
		d.dir.Close()
	}
}

// writeWhole makes b k's file name, whole or not at all: it is written
// under a name of draftPrefix and a random suffix, then renamed in place
// by rename, renameOver to replace a file of that name, renameNoReplace
// to fail with EEXIST.
func (k *keyDir) writeWhole(name, draftPrefix string, b []byte, rename func(dirfd int, from, to string) error) error {
	draft := draftPrefix + rand.Text()[:16]
	w, err := createFile(int(k.dir.Fd()), draft, k.path, k.fileMode())
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rename(int(k.dir.Fd()), draft, name)
	}
	if err != nil {
		_ = unix.Unlinkat(int(k.dir.Fd()), draft, 0)
	}
	return err
}

// renameOver renames from to to in the directory dirfd, replacing to.
func renameOver(dirfd int, from, to string) error { return unix.Renameat(dirfd, from, dirfd, to) }

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
	k.removeUnlocked(k.names(prefix))
}

// removeUnlocked removes those of k's files names that nobody holds
// locked.
func (k *keyDir) removeUnlocked(names []string) {
	var lost []semaphore.Event
	for _, name := range names {
		f, err := k.open(name, os.O_RDONLY)
		if err != nil {
			continue
		}
		// Removed only under its lock: a caller locks its file before it
		// checks that the file is still there.
		if free, _ := flock(f, unix.LOCK_EX|unix.LOCK_NB); free && unix.Unlinkat(int(k.dir.Fd()), name, 0) == nil &&
			strings.HasPrefix(name, heldPrefix) {
			// A holder gives its permit back after its file is gone: one
			// left is a holder's that vanished. Whoever removes it, once,
			// notes the loss.
			lost = append(lost, lostEvent(f))
		}
		f.Close()
	}
	// At once: the sweep after a grant runs before the line is left.
	k.noteAll(lost)
}

// sweepFew bounds the files of holders to be looked at a grant sweeps
// when there is no sign of one gone.
const sweepFew = 2

// sweepRecords removes the files of holders that are gone, and of callers
// that died before they held, after a grant and outside the grant lock:
// all of them when there are more holders' files than the limit permits
// (no more holders can be), else a few of each, picked at random.
func (k *keyDir) sweepRecords(limit int) {
	held, drafts := k.namesOf(heldPrefix, draftPrefix)
	if len(held) <= limit {
		held = pick(held, sweepFew)
	}
	k.removeUnlocked(append(held, pick(drafts, sweepFew)...))
}

// namesOf lists k's files named a*, and those named b*.
func (k *keyDir) namesOf(a, b string) (as, bs []string) {
	for _, name := range k.names("") {
		switch {
		case strings.HasPrefix(name, a):
			as = append(as, name)
		case strings.HasPrefix(name, b):
			bs = append(bs, name)
		}
	}
	return as, bs
}

// pick picks at most n of names at random.
func pick(names []string, n int) []string {
	mathrand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names[:min(len(names), n)]
}

// lostEvent is the loss of the holder whose file, left behind, is f; how
// long it held is not known.
func lostEvent(f *os.File) semaphore.Event {
	e := semaphore.Event{Kind: semaphore.EventLost}
	if r, err := readRecord(f); err == nil {
		if validID(r.ID) {
			e.Holder = r.ID
		}
		e.HolderInfo, e.Permits, e.Weight, e.Token, e.Slots = r.HolderInfo, r.Permits, r.Weight, r.Token, r.slots()
	}
	return e
}
