package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Fake is a server that speaks just enough RESP to be dialled, and answers
// each command with what Reply says: a broken or hostile server, whose
// replies no real Redis would send.
type Fake struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string
	ln   net.Listener
	// reply gives the raw bytes to answer a command with (its name in
	// upper case, and its arguments).
	reply func(cmd string, args []string) string

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewFake starts a Fake on a free loopback port, stopped when the test
// ends. reply answers every command but the handshake (HELLO is refused,
// so that clients fall back to RESP2; CLIENT is answered +OK).
func NewFake(t testing.TB, reply func(cmd string, args []string) string) *Fake {
	t.Helper()
	f, err := StartFake(reply)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// StartFake starts a Fake as NewFake does, for callers that stop it
// themselves with Close.
func StartFake(reply func(cmd string, args []string) string) (*Fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	f := &Fake{Addr: ln.Addr().String(), ln: ln, reply: reply, conns: map[net.Conn]bool{}}
	f.wg.Go(f.serve)
	return f, nil
}

// URL is the redis:// URL of the Fake.
func (f *Fake) URL() string { return "redis://" + f.Addr + "/0" }

// Close stops the Fake and closes its connections.
func (f *Fake) Close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *Fake) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		f.wg.Go(func() { f.handle(c) })
	}
}

func (f *Fake) handle(c net.Conn) {
	defer func() {
		_ = c.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		var out string
		switch name {
		case "HELLO":
			out = "-ERR unknown command 'HELLO'\r\n"
		case "CLIENT":
			out = "+OK\r\n"
		default:
			out = f.reply(name, args[1:])
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// readCommand reads one command, an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 1024 {
		return nil, fmt.Errorf("array length %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bulk length %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}
