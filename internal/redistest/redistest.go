// Package redistest starts real redis-server processes on free loopback
// ports for tests, and stops them when the test ends.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Available reports whether redis-server can be started here.
func Available() error {
	_, err := exec.LookPath("redis-server")
	return err
}

// Required reports whether a missing redis-server must fail the tests
// instead of skipping them: in CI it always must.
func Required() bool { return os.Getenv("CI") == "true" }

// Start starts a redis-server keeping its files in dir, with no persistence.
// The caller must Stop it.
func Start(dir string) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var err error
	for range 5 { // another process may take the free port before redis binds it
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, port: port}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port)))
	if err != nil {
		return err
	}
	defer log.Close()
	s.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.ping() == nil {
			return nil
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(string(out)))
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer within 10s", s.port)
}

// ping sends a raw PING, so that this package needs no client library.
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("unexpected reply " + strconv.Quote(line))
	}
	return nil
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Stop ends the server and waits for it. Stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot exit
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.Kill()
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Pause stops the server with SIGSTOP: it keeps its connections but answers nothing.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Restart kills the server and starts an empty one on the same port, as a
// crash without persistence would.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// New starts a server for t and stops it when t ends. Without redis-server
// it skips t, or fails it in CI.
func New(t testing.TB) *Server {
	t.Helper()
	if err := Available(); err != nil {
		if Required() {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
	s, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
