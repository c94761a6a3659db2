//go:build linux

package chaos

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections from 127.0.0.1 to a Redis server, and
// breaks them on demand: it cuts them, holds them (a blackhole), or drops
// replies after Redis ran the command.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[*link]struct{}
	hold  bool    // new connections start held: the blackhole
	drop  float64 // probability that a reply is dropped, its connection closed
	rng   *rand.Rand
	// What was done, for the figures.
	cut, held, closedAtHeal, deliveredLate, dropped int
	closed                                          bool
	wg                                              sync.WaitGroup
}

// link is one client connection and its connection to Redis.
type link struct {
	p              *proxy
	client, server net.Conn
	mu             sync.Mutex
	held           bool
	pending        [2][]byte // read while held: to the server, to the client
	once           sync.Once
}

const (
	toServer = 0
	toClient = 1
)

// newProxy listens on a free loopback port and forwards to target until t
// ends.
func newProxy(t *testing.T, target string, seed uint64) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[*link]struct{}{}, rng: rand.New(rand.NewPCG(seed, 7))}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is what semrun is given to reach Redis through the proxy.
func (p *proxy) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{p: p, client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		l.held = p.hold
		if l.held {
			p.held++
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go l.pipe(toServer, c, s)
		go l.pipe(toClient, s, c)
	}
}

// pipe copies from src to dst, which is dir, until either ends.
func (l *link) pipe(dir int, src, dst net.Conn) {
	defer l.p.wg.Done()
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.forward(dir, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward passes b on, keeps it while the link is held, or drops the
// connection instead of passing a reply on. It tells whether to go on.
func (l *link) forward(dir int, dst net.Conn, b []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		l.pending[dir] = append(l.pending[dir], b...)
		return true
	}
	if dir == toClient && l.p.dropReply() {
		return false // Redis ran the command; the client never hears of it
	}
	_, err := dst.Write(b)
	return err == nil
}

func (p *proxy) dropReply() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop > 0 && p.rng.Float64() < p.drop {
		p.dropped++
		return true
	}
	return false
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
		l.p.mu.Lock()
		delete(l.p.conns, l)
		l.p.mu.Unlock()
	})
}

// links returns the open links.
func (p *proxy) links() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		out = append(out, l)
	}
	return out
}

// Cut closes every open connection; new ones are accepted. It returns how
// many it closed.
func (p *proxy) Cut() int {
	ls := p.links()
	for _, l := range ls {
		l.close()
	}
	p.mu.Lock()
	p.cut += len(ls)
	p.mu.Unlock()
	return len(ls)
}

// Blackhole holds every connection, open or new: nothing is forwarded
// until Heal.
func (p *proxy) Blackhole() {
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
	for _, l := range p.links() {
		l.mu.Lock()
		if !l.held {
			l.held = true
			p.mu.Lock()
			p.held++
			p.mu.Unlock()
		}
		l.mu.Unlock()
	}
}

// Heal ends a blackhole: each held connection is either closed, what it
// held lost (the network dropped it and the connection was reset), or
// given what it held, late (the network delivered it after all), by the
// toss of a coin. It ends dropping replies too.
func (p *proxy) Heal() {
	p.mu.Lock()
	p.hold, p.drop = false, 0
	p.mu.Unlock()
	for _, l := range p.links() {
		l.mu.Lock()
		if !l.held {
			l.mu.Unlock()
			continue
		}
		p.mu.Lock()
		late := p.rng.IntN(2) == 0
		p.mu.Unlock()
		ok := late
		if late {
			// The client's requests reach Redis late; replies reach a
			// client that has most likely given up on them.
			_, err1 := l.server.Write(l.pending[toServer])
			_, err2 := l.client.Write(l.pending[toClient])
			ok = err1 == nil && err2 == nil
		}
		l.held, l.pending = false, [2][]byte{}
		l.mu.Unlock()
		p.mu.Lock()
		if late {
			p.deliveredLate++
		} else {
			p.closedAtHeal++
		}
		p.mu.Unlock()
		if !ok {
			l.close()
		}
	}
}

// DropReplies drops each reply with probability prob, closing its
// connection, until Heal.
func (p *proxy) DropReplies(prob float64) {
	p.mu.Lock()
	p.drop = prob
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range p.links() {
		l.close()
	}
	p.wg.Wait()
}
