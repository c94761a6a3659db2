package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from 127.0.0.1 to a Redis server, and
// breaks them on demand: it cuts them, holds them (a blackhole), drops
// replies after Redis ran the command, or delivers replies late.
type Proxy struct {
	// Addr is where it listens, 127.0.0.1:port.
	Addr string
	ln   net.Listener

	mu     sync.Mutex
	target string // the server's host:port
	conns  map[*link]struct{}
	hold   bool          // new connections start held: the blackhole
	drop   float64       // probability that a reply is dropped, its connection closed
	delay  time.Duration // how late each reply is delivered
	rng    *rand.Rand
	count  ProxyCounts
	// closed: Close began; no connection is accepted after it.
	closed bool
	wg     sync.WaitGroup
}

// ProxyCounts is what a Proxy did, for a test's figures.
type ProxyCounts struct {
	// Cut is how many connections Cut closed.
	Cut int
	// Held is how many connections a blackhole held; at Heal each was
	// either closed (ClosedAtHeal) or given what it held (DeliveredLate).
	Held, ClosedAtHeal, DeliveredLate int
	// Dropped is how many replies were dropped with their connections.
	Dropped int
	// Delayed is how many replies were delivered late by Delay.
	Delayed int
}

// link is one client connection and its connection to Redis.
type link struct {
	p              *Proxy
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

// StartProxy listens on a free loopback port and forwards to target, the
// server's host:port, until Close. seed makes its coin tosses repeatable.
func StartProxy(target string, seed uint64) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, conns: map[*link]struct{}{}, rng: rand.New(rand.NewPCG(seed, 7))}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is what semrun is given to reach Redis through the proxy.
func (p *Proxy) URL() string { return "redis://" + p.Addr + "/0" }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, time.Second)
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
			p.count.Held++
		}
		p.conns[l] = struct{}{}
		p.wg.Add(3)
		p.mu.Unlock()
		replies := make(chan chunk, 1024)
		go l.pipe(toServer, c, s, nil)
		go l.pipe(toClient, s, c, replies)
		go l.deliver(c, replies)
	}
}

// chunk is a read from the server and when it was read.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies from src to dst, which is dir, until either ends. Replies go
// through late, which delivers each at its time.
func (l *link) pipe(dir int, src, dst net.Conn, late chan<- chunk) {
	defer l.p.wg.Done()
	defer l.close()
	if late != nil {
		defer close(late)
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if late != nil {
				late <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			} else if !l.forward(dir, dst, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver passes each reply on at its time: Delay after it was read.
func (l *link) deliver(dst net.Conn, replies <-chan chunk) {
	defer l.p.wg.Done()
	defer l.close()
	for c := range replies {
		l.p.mu.Lock()
		delay := l.p.delay
		if delay > 0 {
			l.p.count.Delayed++
		}
		l.p.mu.Unlock()
		time.Sleep(time.Until(c.at.Add(delay)))
		if !l.forward(toClient, dst, c.b) {
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

func (p *Proxy) dropReply() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop > 0 && p.rng.Float64() < p.drop {
		p.count.Dropped++
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
func (p *Proxy) links() []*link {
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
func (p *Proxy) Cut() int {
	ls := p.links()
	for _, l := range ls {
		l.close()
	}
	p.mu.Lock()
	p.count.Cut += len(ls)
	p.mu.Unlock()
	return len(ls)
}

// Retarget forwards the connections accepted from now on to target, as a
// failover moves a service address to the new master; open ones go on to
// the old target until Cut.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Blackhole holds every connection, open or new: nothing is forwarded
// until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
	for _, l := range p.links() {
		l.mu.Lock()
		if !l.held {
			l.held = true
			p.mu.Lock()
			p.count.Held++
			p.mu.Unlock()
		}
		l.mu.Unlock()
	}
}

// Heal ends a blackhole: each held connection is either closed, what it
// held lost (the network dropped it and the connection was reset), or
// given what it held, late (the network delivered it after all), by the
// toss of a coin. It ends dropping and delaying replies too.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.hold, p.drop, p.delay = false, 0, 0
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
			p.count.DeliveredLate++
		} else {
			p.count.ClosedAtHeal++
		}
		p.mu.Unlock()
		if !ok {
			l.close()
		}
	}
}

// DropReplies drops each reply with probability prob, closing its
// connection, until Heal.
func (p *Proxy) DropReplies(prob float64) {
	p.mu.Lock()
	p.drop = prob
	p.mu.Unlock()
}

// Delay delivers each reply read from now on d after Redis sent it, in
// order, until Heal or Delay(0): Redis ran the command on time, and the
// client hears of it late.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Counts returns what the proxy did so far.
func (p *Proxy) Counts() ProxyCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range p.links() {
		l.close()
	}
	p.wg.Wait()
}
