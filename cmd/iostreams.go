package cmd

import (
	"io"
	"os"

	"golang.org/x/term"

	"github.com/semrun/semrun/internal/runner"
)

// IOStreams are where semrun and its child read and write: the process's
// standard files (SystemStreams), or buffers in a test.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// ErrTerminal is the terminal ErrOut writes to, where a waiting semrun
	// keeps its line up to date; nil when ErrOut is no terminal.
	ErrTerminal Terminal
}

// Terminal is what the wait line needs to know of a terminal.
type Terminal interface {
	// Width is how many columns it has; 0 when it cannot tell.
	Width() int
	// Background tells whether another process group than semrun's has the
	// terminal (Ctrl-Z, then bg): the prompt is then the shell's.
	Background() bool
}

// SystemStreams are the process's standard streams.
func SystemStreams() *IOStreams {
	s := &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	if fd := int(os.Stderr.Fd()); term.IsTerminal(fd) {
		s.ErrTerminal = fdTerminal(fd)
	}
	return s
}

// fdTerminal is the terminal open on a file descriptor.
type fdTerminal int

func (t fdTerminal) Width() int {
	width, _, err := term.GetSize(int(t))
	if err != nil {
		return 0
	}
	return width
}

func (t fdTerminal) Background() bool { return runner.InBackground(int(t)) }

// fileOf is the file a stream writes to or reads from, which a child can
// share; nil (the null device, for the child) when the stream is no file.
func fileOf(stream any) *os.File {
	f, _ := stream.(*os.File)
	return f
}
