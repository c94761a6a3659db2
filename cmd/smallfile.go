package cmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// readSmallFile reads a file semrun takes a setting from (a config or
// password file): a regular file of at most limit bytes, opened without
// blocking, so that a FIFO, a device or /dev/stdin can neither hang semrun,
// nor feed it without end, nor eat the command's input.
func readSmallFile(path string, limit int64) ([]byte, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("is %s, not a regular file", kindOf(st.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(b)) > limit {
		return nil, nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, st, nil
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

// oneLine joins the lines of a multi-line error (YAML's type errors) into
// one: semrun says each error in one line.
func oneLine(err error) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return err
	}
	var parts []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return errors.New(strings.Join(parts, " "))
}
