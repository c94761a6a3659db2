//go:build unix

package runner

import (
	"bytes"
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// shebangMax is how much of a script's first line the kernel reads for
// its #! line (Linux's BINPRM_BUF_SIZE).
const shebangMax = 256

// missingInterpreter is the interpreter a script's #! line names when it
// does not exist, so that such a script is refused before any permit is
// taken, as a missing command is; "" otherwise, and whenever it cannot
// tell (the exec then says why). Relative to the working directory, as
// the kernel reads it.
func missingInterpreter(path string) string {
	// Non-blocking: a FIFO on PATH must not hang semrun.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	head := make([]byte, shebangMax)
	n, _ := f.Read(head)
	line, ok := bytes.CutPrefix(head[:n], []byte("#!"))
	if !ok {
		return ""
	}
	if end := bytes.IndexByte(line, '\n'); end >= 0 {
		line = line[:end]
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 {
		return ""
	}
	interp := string(fields[0])
	if _, err := os.Stat(interp); errors.Is(err, fs.ErrNotExist) {
		return interp
	}
	return ""
}
