package main

import (
	"bufio"
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A monitor records when Redis ran the scripts clients sent (EVALSHA,
// EVAL) and the wake-ups (RPUSH) of the scripts, from MONITOR, on the children's
// clock: it traces one handoff round, to tell where a gap's time goes.
type monitor struct {
	conn   net.Conn
	offset int64 // CLOCK_REALTIME - CLOCK_MONOTONIC, ns
	done   chan struct{}
	mu     sync.Mutex
	seen   []scriptCall
}

type scriptCall struct {
	at      int64  // CLOCK_MONOTONIC ns
	client  string // the client's address, or "lua"
	publish bool   // a script's RPUSH: the wake-up sent
}

func startMonitor(addr string) (*monitor, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	m := &monitor{conn: c, offset: realtimeOffset(), done: make(chan struct{})}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(c, 1<<16)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		c.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return // closed by stop
			}
			// +1700000000.123456 [0 127.0.0.1:5555] "evalsha" ...
			ts, rest, _ := strings.Cut(strings.TrimPrefix(line, "+"), " [")
			client, rest, _ := strings.Cut(rest, "] ")
			_, client, _ = strings.Cut(client, " ")
			publish := client == "lua" && strings.HasPrefix(strings.ToLower(rest), `"rpush"`)
			if !publish && !strings.HasPrefix(rest, `"evalsha"`) && !strings.HasPrefix(rest, `"eval"`) {
				continue
			}
			sec, usec, _ := strings.Cut(ts, ".")
			s, err1 := strconv.ParseInt(sec, 10, 64)
			us, err2 := strconv.ParseInt(usec, 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			m.mu.Lock()
			m.seen = append(m.seen, scriptCall{at: s*1e9 + us*1e3 - m.offset, client: client, publish: publish})
			m.mu.Unlock()
		}
	}()
	return m, nil
}

// calls ends the monitor and returns the script calls, in time order.
func (m *monitor) calls() []scriptCall {
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	slices.SortStableFunc(m.seen, func(a, b scriptCall) int { return cmp.Compare(a.at, b.at) })
	return m.seen
}

// A handoff's phases, as Redis saw them: the holder's child ends; the
// holder's release reaches Redis, and its script pushes the wake-up;
// the next holder's granted acquire reaches Redis; its child starts.
type phases struct{ release, publish, wake, start []time.Duration }

// split finds, for each gap of ivs (sorted by start), the first script
// call after the child's end (the release), the first wake-up push after it
// (the wake-up), and the last script call before the next child's start
// from another client (the acquire that granted it).
func split(ivs []interval, calls []scriptCall) phases {
	var p phases
	var scripts, publishes []scriptCall
	for _, c := range calls {
		if c.publish {
			publishes = append(publishes, c)
		} else {
			scripts = append(scripts, c)
		}
	}
	for i := 1; i < len(ivs); i++ {
		end, next := ivs[i-1].end, ivs[i].start
		r := slices.IndexFunc(scripts, func(c scriptCall) bool { return c.at > end })
		if r < 0 || scripts[r].at > next {
			continue
		}
		a := -1
		for j := r + 1; j < len(scripts) && scripts[j].at < next; j++ {
			if scripts[j].client != scripts[r].client {
				a = j
			}
		}
		if a < 0 {
			continue
		}
		release, acquire := scripts[r].at, scripts[a].at
		p.release = append(p.release, time.Duration(release-end))
		p.wake = append(p.wake, time.Duration(acquire-release))
		p.start = append(p.start, time.Duration(next-acquire))
		if k := slices.IndexFunc(publishes, func(c scriptCall) bool { return c.at >= release }); k >= 0 && publishes[k].at <= acquire {
			p.publish = append(p.publish, time.Duration(publishes[k].at-release))
		}
	}
	return p
}
