//go:build unix

package redistest

import "syscall"

// terminate asks the server to exit (SIGTERM), continuing it first: a
// paused server cannot exit.
func (s *Server) terminate() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
}

// Pause stops the server with SIGSTOP: it keeps its connections but answers nothing.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }
