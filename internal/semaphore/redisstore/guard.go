package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// What one reply may declare. go-redis trusts the lengths a server sends:
// it allocates an array or a bulk string as soon as its header arrives and
// reads nested arrays by recursion, so one short reply (*3000000000) would
// end semrun with a runtime fatal error that no recover catches. The
// largest replies semrun reads (status lists of MaxStatusList holders,
// COMMAND for a cluster, INFO) stay far below these.
const (
	maxReplyBulk     = 16 << 20 // bytes of one bulk string
	maxReplyElements = 4 << 20  // elements all arrays of one reply declare
	maxReplyDepth    = 16       // arrays within arrays
	maxReplyLine     = 64 << 10 // bytes of one header or simple reply
)

// guardDialer wraps dial so that every connection's replies are checked
// before go-redis reads them.
func guardDialer(dial func(context.Context, string, string) (net.Conn, error), timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	if dial == nil {
		d := &net.Dialer{Timeout: timeout}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &guardedConn{Conn: conn}, nil
	}
}

// guardedConn is a connection whose reads pass through a replyGuard: a
// chunk that holds the start of an absurd reply is never handed on.
type guardedConn struct {
	net.Conn
	guard replyGuard
	err   error
	// timedOut: a read or write ran out of time, so requests may still sit
	// unsent or unacknowledged in the kernel.
	timedOut atomic.Bool
}

func (c *guardedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	c.saw(err)
	if n > 0 {
		if gerr := c.guard.scan(p[:n]); gerr != nil {
			c.err = fmt.Errorf("%w: %w", errAbsurdReply, gerr)
			if errors.Is(gerr, errNotRedis) {
				c.err = gerr
			}
			_ = c.Conn.Close()
			return 0, c.err
		}
	}
	return n, err
}

func (c *guardedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.saw(err)
	return n, err
}

func (c *guardedConn) saw(err error) {
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		c.timedOut.Store(true)
	}
}

// Close resets a connection that timed out instead of closing it politely:
// the kernel would otherwise go on sending what it holds, and a request
// (a waiter's ask, which keeps its place in line) could reach Redis long
// after semrun gave up on it.
func (c *guardedConn) Close() error {
	if c.timedOut.Load() {
		conn := c.Conn
		if tc, ok := conn.(interface{ NetConn() net.Conn }); ok {
			conn = tc.NetConn()
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
	}
	return c.Conn.Close()
}

// SyscallConn lets go-redis's pool peek at an idle connection, as it does
// on a plain one, to find those the server closed.
func (c *guardedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// replyGuard follows the RESP stream as it is read, across reads of any
// size, and fails on what go-redis would allocate or recurse into without
// bound. semrun asks for RESP2; go-redis talks RESP3 to sentinels.
type replyGuard struct {
	line     []byte      // a header or simple reply read so far
	body     int64       // bytes of a bulk string still to come, CRLF included
	open     []aggregate // the aggregates being read, innermost last
	declared int64       // elements the aggregates of this reply declared
	// spoke: a reply was read whole, so the server speaks RESP; before,
	// a line that is none is a server of another protocol (notRedis).
	spoke bool
}

// aggregate is an array, set, push or map being read.
type aggregate struct {
	left int64 // elements still to come (a map's keys and values both count)
}

func (g *replyGuard) scan(b []byte) error {
	for len(b) > 0 {
		if g.body > 0 {
			k := min(g.body, int64(len(b)))
			g.body -= k
			b = b[k:]
			if g.body == 0 {
				g.done()
			}
			continue
		}
		part := b // a line's start, or all of it, newline included
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			part = b[:i+1]
		}
		if len(g.line)+len(part) > maxReplyLine {
			return fmt.Errorf("a line of more than %d bytes", maxReplyLine)
		}
		g.line = append(g.line, part...)
		b = b[len(part):]
		if part[len(part)-1] != '\n' {
			return nil // the rest of the line comes with the next read
		}
		err := g.header(g.line)
		if err != nil && !g.spoke && len(g.open) == 0 {
			err = notRedis(g.line, err)
		}
		g.line = g.line[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

// header takes one complete line, CRLF included, at the start of an element.
func (g *replyGuard) header(h []byte) error {
	if len(h) < 3 || h[len(h)-2] != '\r' {
		return errors.New("a line not ended by CRLF")
	}
	kind := h[0]
	switch kind {
	case '+', '-', ':', '_', ',', '#', '(':
		g.done()
		return nil
	case '$', '=', '!', '*', '~', '>', '%':
	default:
		// Attributes ('|') too: go-redis skips them by recursion, and one
		// with a nil length is no element to it, so no count of this
		// guard's would bound them. semrun never asks for any.
		return fmt.Errorf("a reply of type %q", kind)
	}
	n, err := strconv.ParseInt(string(h[1:len(h)-2]), 10, 64)
	switch {
	case err != nil || n < -1:
		return fmt.Errorf("a length of %.20q", h[1:len(h)-2])
	case n == -1:
		g.done() // a nil
	case kind == '$' || kind == '=' || kind == '!':
		if n > maxReplyBulk {
			return fmt.Errorf("a string of %d bytes", n)
		}
		g.body = n + 2
	default:
		return g.aggregate(n, kind)
	}
	return nil
}

// aggregate begins one of n elements (pairs, for a map).
func (g *replyGuard) aggregate(n int64, kind byte) error {
	if n > maxReplyElements {
		return fmt.Errorf("an aggregate of %d elements", n)
	}
	if kind == '%' {
		n *= 2
	}
	switch {
	case n == 0:
		g.done()
		return nil
	case len(g.open) == maxReplyDepth:
		return fmt.Errorf("aggregates nested more than %d deep", maxReplyDepth)
	case n > maxReplyElements-g.declared:
		return fmt.Errorf("aggregates of more than %d elements", maxReplyElements)
	}
	g.declared += n
	g.open = append(g.open, aggregate{left: n})
	return nil
}

// done counts one element as read, and with it each aggregate it completes.
func (g *replyGuard) done() {
	for len(g.open) > 0 {
		top := &g.open[len(g.open)-1]
		if top.left--; top.left > 0 {
			return
		}
		g.open = g.open[:len(g.open)-1]
	}
	g.declared = 0 // the reply is complete
	g.spoke = true
}

// notRedis is the error of a server whose first answer is no RESP at all:
// another service at the address (a web server, SSH), not a broken Redis.
// What it said is shown short, escaped where it is printed.
func notRedis(first []byte, err error) error {
	what := "a server there"
	switch {
	case bytes.HasPrefix(first, []byte("HTTP/")):
		what = "an HTTP server there"
	case bytes.HasPrefix(first, []byte("SSH-")):
		what = "an SSH server there"
	}
	// Two %w: go-redis unwraps a handshake's error once, which would leave
	// the bare errNotRedis of an error with one.
	return fmt.Errorf("%w: %s answered %.30q (%w)", errNotRedis, what, bytes.TrimRight(first, "\r\n"), err)
}

// errNotRedis is a server at the address that does not speak Redis's
// protocol; nothing is retried after it.
var errNotRedis = errors.New("not Redis")
