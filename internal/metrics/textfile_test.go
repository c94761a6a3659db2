//go:build unix

package metrics

import (
	"os"
	"path/filepath"
	"testing"
)

// swapper plays another user who may write the textfile's directory: it
// puts a symbolic link to target in place of every file there but the
// textfile, as a cron job run by root writes it.
type swapper struct {
	dir, target, keep string
}

func (c *swapper) swapAll() {
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries {
		if e.Name() == c.keep || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		p := filepath.Join(c.dir, e.Name())
		if os.Rename(p, p+".moved") == nil {
			_ = os.Symlink(c.target, p)
		}
	}
}

// The textfile's directory is shared (node_exporter's, with a group):
// another user who puts a symbolic link in place of semrun's new file,
// while semrun reads the store or after, cannot have semrun change the
// mode of the file it points to (root's cron job would make it readable
// by all), nor write to it.
func TestMetricsTextfileFollowsNoLink(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	precious := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(precious, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(out, "semrun.prom")
	c := &swapper{dir: out, target: precious, keep: filepath.Base(file)}
	text := []byte("# TYPE semrun_up gauge\nsemrun_up 1\n")
	// And at any moment of the write.
	stop := make(chan struct{})
	swapping := make(chan struct{})
	go func() {
		defer close(swapping)
		for {
			select {
			case <-stop:
				return
			default:
				c.swapAll()
			}
		}
	}()
	for range 20 {
		c.swapAll()
		_ = WriteTextfile(file, text) // it may fail: the other user may move its file
	}
	close(stop)
	<-swapping
	fi, err := os.Stat(precious)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file a link in the textfile's directory points to: got mode %v (%v), want 0600 still", fi.Mode(), err)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "secret\n" {
		t.Errorf("the file a link points to: got %q (%v), want it untouched", b, err)
	}
}
