package metrics

import (
	"cmp"
	"crypto/rand"
	"os"
	"path/filepath"
)

// WriteTextfile writes text to path through a new file of its own in
// path's directory, renamed onto path. Not the client library's
// WriteToTextfile: it sets the new file's mode by its name, while it
// reads the store, and in a directory others may write (node_exporter's,
// shared with a group) one of them could put a symbolic link under that
// name, and have root's cron job make any file readable by all. Here the
// store is read first (text), and the file is made (O_EXCL, never through
// a link), its mode set, and renamed, through one descriptor of the
// directory and one of the file.
func WriteTextfile(path string, text []byte) (err error) {
	dir, name := filepath.Split(path)
	root, err := os.OpenRoot(cmp.Or(dir, "."))
	if err != nil {
		return err
	}
	defer root.Close()
	// Not *.prom, which node_exporter would read half written.
	tmp := "." + name + "." + rand.Text()[:16] + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	_, err = f.Write(text)
	if err == nil {
		// node_exporter runs as another user.
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return root.Rename(tmp, name)
}
