//go:build unix

package localstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

func TestDoctorLocal(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	s, err := localstore.New(localstore.Options{Dir: dir, Names: flagNames{}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	checks := s.Doctor(context.Background())
	got := map[string]semaphore.CheckStatus{}
	for _, c := range checks {
		got[c.Name] = c.Status
	}
	if len(checks) != 2 || got["lock-dir"] != semaphore.CheckOK || got["lock"] != semaphore.CheckOK {
		t.Errorf("doctor of a fresh lock directory: got %+v, want lock-dir and lock ok", checks)
	}
	if c := checks[0]; c.Name != "lock-dir" || !strings.HasPrefix(c.Detail, dir+": this user's") {
		t.Errorf("first check: got %+v, want lock-dir naming %s as this user's", c, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) > 0 {
		t.Errorf("lock directory after doctor: got %v (%v), want it empty", entries, err)
	}
}

// TestDoctorUnusableLock: a lock that cannot be taken fails, with a fix
// that names the setting as Names does.
func TestDoctorUnusableLock(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "locks")
	s, err := localstore.New(localstore.Options{Dir: dir, Names: flagNames{}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	// Removed under the store, which has it open: nothing can be created
	// in it, by root either.
	if err := os.Remove(dir); err != nil {
		t.Fatalf("remove the lock directory: %v", err)
	}
	checks := s.Doctor(context.Background())
	if c := checks[len(checks)-1]; c.Name != "lock" || c.Status != semaphore.CheckFail || !strings.HasSuffix(c.Fix, "(--lock-dir)") {
		t.Errorf("last check in a lock directory removed: got %+v, want lock failing, its fix naming --lock-dir", c)
	}
}

// flagNames name the lock directory as the command line does.
type flagNames struct{}

func (flagNames) Name(s semaphore.Setting) string       { return "--lock-dir" }
func (flagNames) Ways(semaphore.Setting, string) string { return "--lock-dir" }
