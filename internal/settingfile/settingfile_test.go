//go:build linux

package settingfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/semrun/semrun/internal/settingfile"
)

func TestSecretRefusesWhatIsNoSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	own, shared, big, fifo := filepath.Join(dir, "own"), filepath.Join(dir, "shared"), filepath.Join(dir, "big"), filepath.Join(dir, "fifo")
	for path, mode := range map[string]os.FileMode{own: 0o600, shared: 0o640} {
		if err := os.WriteFile(path, []byte("s3cret\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(big, make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := settingfile.Secret(own, 4096); err != nil || string(b) != "s3cret\n" {
		t.Errorf("Secret(an owner-only file of mine): got %q, %v; want its text", b, err)
	}
	for path, want := range map[string]string{
		shared:                     "readable by others (mode 0640)",
		big:                        "larger than 4096 bytes",
		fifo:                       "is a FIFO, not a regular file",
		"/proc/self/environ":       "a file the system writes as it is read",
		filepath.Join(dir, "none"): "no such file",
	} {
		if _, err := settingfile.Secret(path, 4096); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), dir) {
			t.Errorf("Secret(%s): got %v, want an error saying %q that names no file", path, err, want)
		}
	}
}
