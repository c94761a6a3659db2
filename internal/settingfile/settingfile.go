// Package settingfile reads the small files a setting names (a config
// file, a password file, a TLS certificate or key): each is untrusted, so
// it is read only when it is a regular file, bounded, without blocking,
// and a file that holds a secret only when nobody else can read or choose
// it. Its errors name no file: the caller says which setting named it.
package settingfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Read reads a regular file of at most limit bytes, opened without
// blocking, so that a FIFO, a device or /dev/stdin can neither hang
// semrun, nor feed it without end, nor eat the command's input.
func Read(path string, limit int64) ([]byte, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, bare(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, bare(err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("is %s, not a regular file", kindOf(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, bare(err)
	}
	if int64(len(b)) > limit {
		return nil, nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, st, nil
}

// Secret is Read for a file that holds a secret (a password, a TLS key):
// it must also be readable by its owner only, be the caller's own or
// root's (whoever owns it chooses the secret), and be a file, not what the
// system makes as it is read (/proc/self/environ would send semrun's own
// environment as the secret).
func Secret(path string, limit int64) ([]byte, error) {
	b, st, err := Read(path, limit)
	if err != nil {
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("readable by others (mode %04o); chmod 600 it", perm)
	}
	if uid, ok := owner(st); ok && uid != 0 && uid != os.Geteuid() {
		return nil, fmt.Errorf("owned by uid %d, not by you (uid %d) nor root: anyone who owns it chooses the secret", uid, os.Geteuid())
	}
	if st.Size() == 0 && len(b) > 0 {
		return nil, errors.New("a file the system writes as it is read (as in /proc), not a file of its own")
	}
	return b, nil
}

// bare is err without the operation and path of an *fs.PathError: the
// caller names the file.
func bare(err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err
	}
	return err
}

func kindOf(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0, m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file"
}
