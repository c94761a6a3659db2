package redistest

import "errors"

// terminate ends the server: Windows cannot send another process a
// request to exit.
func (s *Server) terminate() { _ = s.cmd.Process.Kill() }

// Pause is not supported on Windows, which has no SIGSTOP.
func (s *Server) Pause() error { return errors.ErrUnsupported }

// Resume is not supported on Windows, which has no SIGCONT.
func (s *Server) Resume() error { return errors.ErrUnsupported }
