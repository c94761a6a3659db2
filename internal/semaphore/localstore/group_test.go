//go:build unix

package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// fourthUID is one more member of the shared group.
const fourthUID = 54323

// groupLockDir makes the lock directory the README has root share with a
// group: install -d -m 3770 -g GROUP DIR, in run.
func groupLockDir(t *testing.T, run string) string {
	t.Helper()
	dir := filepath.Join(run, "semrun")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("mkdir %s: %v", dir, err)
	}
	if err := os.Chown(dir, 0, sharedGID); err != nil {
		t.Fatalf("chgrp %s: %v", dir, err)
	}
	if err := os.Chmod(dir, 0o770|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatalf("chmod %s: %v", dir, err)
	}
	return dir
}

// In a group-shared lock directory, no member is refused a key because
// another member made one of its files, and no member can make more than
// N hold it: not by planting the files of permits the key's first caller
// did not need, nor by renaming, while it holds a permit, every file it
// owns in the key's directory.
func TestLocalGroupMembersNeitherBlockNorOverfillKeys(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	st := newLocal(t, dir, nil)
	const n = 3

	holding := func(who string, got string) {
		t.Helper()
		if !strings.HasPrefix(got, "holding ") {
			t.Errorf("%s: got %q, want it holding", who, got)
		}
	}
	busy := func(who string, got string) {
		t.Helper()
		if !strings.Contains(got, "no permit available") {
			t.Errorf("%s: got %q, want it busy (no permit available): never more than %d hold", who, got, n)
		}
	}
	rootTakes := func(key string) (semaphore.Lease, error) {
		t.Helper()
		return acquireFor(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: n, TTL: time.Second, NoWait: true})
	}
	// plant makes, as uid, the files the permits past the first would have
	// had, one a permit of its own.
	plant := func(uid int, key string) {
		t.Helper()
		for _, name := range []string{"seat.1", "seat.2", "seat.3", "seats.1"} {
			mustAs(t, uid, "touch", filepath.Join(dir, key, name))
		}
	}
	// renameOwn renames, as uid, every file of the key that uid owns, and
	// tries the others' too (refused: sticky).
	renameOwn := func(uid int, key string) {
		t.Helper()
		_, _ = as(t, uid, "sh", "-c", `for f in "$1"/*; do mv "$f" "$f.aside"; done 2>/dev/null; true`, "sh", filepath.Join(dir, key))
	}

	t.Run("a member's key, with files another member planted", func(t *testing.T) {
		const key = "planted"
		holding("the first caller, with N=1", holdAsOf(t, bin, otherUID, dir, key, 1))
		plant(thirdUID, key)
		holding("the key's owner, with N=3, past the planted files", holdAsOf(t, bin, otherUID, dir, key, n))
		holding("the member who planted them", holdAsOf(t, bin, thirdUID, dir, key, n))
		busy("a third member, all 3 held", holdAsOf(t, bin, fourthUID, dir, key, n))
	})

	t.Run("a member's key, a holder renaming its files", func(t *testing.T) {
		const key = "renamed"
		holding("the first caller, with N=1", holdAsOf(t, bin, otherUID, dir, key, 1))
		holding("a member, with N=3", holdAsOf(t, bin, thirdUID, dir, key, n))
		renameOwn(thirdUID, key)
		holding("a third member, one permit left", holdAsOf(t, bin, fourthUID, dir, key, n))
		for _, uid := range []int{otherUID, thirdUID, fourthUID} {
			busy(fmt.Sprintf("uid %d once the holder renamed its files", uid), holdAsOf(t, bin, uid, dir, key, n))
		}
	})

	t.Run("root's key", func(t *testing.T) {
		const key = "roots"
		hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second})
		plant(otherUID, key)
		holding("a member, with N=3, past the files it planted", holdAsOf(t, bin, otherUID, dir, key, n))
		renameOwn(otherUID, key)
		l, err := rootTakes(key)
		if err != nil {
			t.Fatalf("root's Acquire of its own key, N=3, with files a member planted and renamed: got %v, want a permit", err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
		busy("a member, all 3 held", holdAsOf(t, bin, thirdUID, dir, key, n))
		if l, err := rootTakes(key); !errors.Is(err, semaphore.ErrBusy) {
			if l != nil {
				release(t, l)
			}
			t.Errorf("root's Acquire, all 3 held: got %v, want ErrBusy", err)
		}
		if s := statusOf(t, st, key); s.Held != n {
			t.Errorf("root's Status of its key: got %d held, want %d", s.Held, n)
		}
	})
}

// In a group-shared lock directory, a member's cooling keeps the key
// taken for root and the other members, who read it but cannot remove
// it once it ended (sticky): its maker, or root, does.
func TestLocalGroupMembersCoolingsHoldForAll(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	st := newLocal(t, dir, nil)
	// 8s: the checks below must all come while it cools, on a loaded
	// machine too, each starting a helper process.
	const key, minHold = "cooled", 8 * time.Second
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req)) // root's key: every member uses it

	cmd := exec.Command(bin, "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperKeyEnv+"="+key, helperCoolEnv+"="+minHold.String())
	cmd.SysProcAttr = asMember(otherUID)
	if got, _ := startHelper(t, cmd); !strings.HasPrefix(got, "cooled ") {
		t.Fatalf("a member finishing with a min hold: got %q, want it cooled", got)
	}
	if got := holdAs(t, bin, thirdUID, dir, key); !strings.Contains(got, "no permit available") {
		t.Errorf("another member while the first one's permit cools: got %q, want it busy", got)
	}
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("root while a member's permit cools: got (%v, %v), want ErrBusy", l, err)
	}
	s := statusOf(t, st, key)
	if s.Held != 1 || len(s.Cooling) != 1 || s.Cooling[0].ExitStatus != 4 {
		t.Fatalf("Status while a member's permit cools: got %+v, want it held by that cooling, exit status 4", s)
	}
	cools, _ := filepath.Glob(filepath.Join(dir, key, "cool.*"))
	if len(cools) != 1 {
		t.Fatalf("cooling files: got %q, want one", cools)
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(cools[0], &fst); err != nil || fst.Uid != otherUID || fst.Gid != sharedGID || fst.Mode&0o777 != 0o660 {
		t.Errorf("cooling file: got uid %d gid %d mode %o (%v), want the member's, the group's, 0660", fst.Uid, fst.Gid, fst.Mode&0o777, err)
	}

	waitFor(t, minHold+10*time.Second, "another member granted the key once the cooling ended", func() bool {
		got := holdAs(t, bin, thirdUID, dir, key)
		if !strings.HasPrefix(got, "holding ") && !strings.Contains(got, "no permit available") {
			t.Fatalf("another member once the cooling ends: got %q, want it holding or busy", got)
		}
		return strings.HasPrefix(got, "holding ")
	})
	if _, err := os.Lstat(cools[0]); err != nil {
		t.Errorf("the cooling that ended, after another member's grant: got %v, want it left (not that member's to remove)", err)
	}
}

// In a group-shared lock directory, any member may set a key's settings,
// and they hold for every member and root: a member's pause, resumed by
// another member (who cannot replace the first one's file, sticky, and
// writes it in place), a member's capacity, unset by root.
func TestLocalGroupMembersSettingsHoldForAll(t *testing.T) {
	needRoot(t)
	t.Parallel()
	run := runLock(t)
	bin := helperIn(t, run)
	dir := groupLockDir(t, run)
	st := newLocal(t, dir, nil)
	const key = "operated"
	req := semaphore.Request{Key: key, Permits: 3, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req)) // root's key: every member uses it
	policy := filepath.Join(dir, key, "policy")
	ownedBy := func(uid int) {
		t.Helper()
		var fst syscall.Stat_t
		if err := syscall.Stat(policy, &fst); err != nil || fst.Uid != uint32(uid) || fst.Gid != sharedGID || fst.Mode&0o777 != 0o660 {
			t.Errorf("settings file: got uid %d gid %d mode %o (%v), want uid %d's, the group's, 0660", fst.Uid, fst.Gid, fst.Mode&0o777, err, uid)
		}
	}

	operateAs(t, bin, otherUID, dir, key, "pause nightly upgrade")
	var paused *semaphore.PausedError
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.As(err, &paused) || paused.Pause.Reason != "nightly upgrade" {
		if l != nil {
			release(t, l)
		}
		t.Errorf("root's Acquire of its key a member paused: got %v, want a *PausedError, reason \"nightly upgrade\"", err)
	}
	if got := holdAsOf(t, bin, thirdUID, dir, key, 3); !strings.Contains(got, "is paused (nightly upgrade)") {
		t.Errorf("another member's Acquire: got %q, want it told the key is paused, and why", got)
	}
	if s := statusOf(t, st, key); s.Paused == nil || s.Paused.Reason != "nightly upgrade" {
		t.Errorf("root's Status: got pause %+v, want the member's", s.Paused)
	}
	ownedBy(otherUID)

	operateAs(t, bin, thirdUID, dir, key, "resume")
	ownedBy(otherUID) // written in place
	release(t, acquire(t, st, req))

	operateAs(t, bin, thirdUID, dir, key, "capacity 1")
	if got := holdAsOf(t, bin, otherUID, dir, key, 3); !strings.HasPrefix(got, "holding ") {
		t.Fatalf("a member's Acquire (n=3) of a key set to 1: got %q, want it holding", got)
	}
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		if l != nil {
			release(t, l)
		}
		t.Errorf("root's Acquire (n=3) of its key a member set to 1, one holding: got %v, want ErrBusy", err)
	}
	if s := statusOf(t, st, key); s.StoredCapacity != 1 {
		t.Errorf("root's Status: got stored capacity %d, want the member's 1", s.StoredCapacity)
	}
	if err := st.SetCapacity(ctxTimeout(t, 5*time.Second), key, 0); err != nil {
		t.Fatalf("root's SetCapacity(0) of the member's setting: got %v, want nil", err)
	}
	if _, err := os.Lstat(policy); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("settings file once root unset the last setting: got %v, want it removed", err)
	}
	release(t, acquire(t, st, req))
}
