package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// Every process the bench starts is the leader of a process group of its
// own, and is registered here until reaped: whatever happens (an error, a
// signal to the bench), stopAll ends every group still running. The
// children the contenders run (child below) also die with their parent.
type registry struct {
	mu      sync.Mutex
	live    map[*exec.Cmd]bool
	stopped bool
}

var running = &registry{live: map[*exec.Cmd]bool{}}

func (r *registry) start(cmd *exec.Cmd) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errors.New("bench is stopping")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	r.live[cmd] = true
	return nil
}

func (r *registry) forget(cmd *exec.Cmd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, cmd)
}

func (r *registry) signalAll(sig syscall.Signal) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for cmd := range r.live {
		signalGroup(cmd, sig)
	}
	return len(r.live)
}

func (r *registry) waitEmpty(d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.live)
		r.mu.Unlock()
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// stopAll terminates the process groups still running, then kills them.
func (r *registry) stopAll() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	if r.signalAll(syscall.SIGTERM) == 0 || r.waitEmpty(3*time.Second) {
		return
	}
	if n := r.signalAll(syscall.SIGKILL); n > 0 {
		fmt.Fprintf(os.Stderr, "bench: killed %d process groups that ignored SIGTERM\n", n)
	}
	r.waitEmpty(3 * time.Second)
}

// A proc is one started process.
type proc struct {
	cmd    *exec.Cmd
	exitAt int64         // CLOCK_MONOTONIC ns when it was reaped
	out    *bytes.Buffer // stdout and stderr, when kept
	done   chan struct{}
	err    error
}

// A group is the processes of one measurement: close ends those still
// running and waits for them all, so no measurement leaves one behind.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	env    []string
	mu     sync.Mutex
	procs  []*proc
}

func newGroup(ctx context.Context, env []string) *group {
	ctx, cancel := context.WithCancel(ctx)
	return &group{ctx: ctx, cancel: cancel, env: env}
}

// start starts argv; keep keeps its output for error messages (otherwise
// it goes to /dev/null, as the overhead measurement wants).
func (g *group) start(argv []string, keep bool) (*proc, error) {
	cmd := exec.CommandContext(g.ctx, argv[0], argv[1:]...)
	cmd.Env = g.env
	ownGroup(cmd)
	cmd.WaitDelay = 3 * time.Second
	p := &proc{cmd: cmd, done: make(chan struct{})}
	if keep {
		p.out = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = p.out, p.out
	}
	if err := running.start(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(argv[0]), err)
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		p.exitAt = monotonic()
		running.forget(cmd)
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// wait waits for p and tells how it failed, with its output.
func (p *proc) wait() error {
	<-p.done
	if p.err == nil {
		return nil
	}
	msg := fmt.Sprintf("%s: %v", strings.Join(shorten(p.cmd.Args), " "), p.err)
	if p.out != nil {
		if out := strings.TrimSpace(p.out.String()); out != "" {
			msg += ": " + out
		}
	}
	return errors.New(msg)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// shorten shows paths by their base name, for messages.
func shorten(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if filepath.IsAbs(a) {
			a = filepath.Base(a)
		}
		out[i] = a
	}
	return out
}

// run starts argv and waits for it.
func (g *group) run(argv []string, keep bool) error {
	p, err := g.start(argv, keep)
	if err != nil {
		return err
	}
	return p.wait()
}

// list is a snapshot of g's processes.
func (g *group) list() []*proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.procs)
}

// waitAll waits for every process of g, returning the first failure.
func (g *group) waitAll() error {
	var first error
	for _, p := range g.list() {
		if err := p.wait(); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		first = g.ctx.Err()
	}
	return first
}

// drop forgets the processes that exited, so a long loop keeps few.
func (g *group) drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.procs = slices.DeleteFunc(g.procs, (*proc).exited)
}

func (g *group) close() {
	g.cancel()
	for _, p := range g.list() {
		<-p.done
	}
}

// settle waits until the processes ps have used no CPU for quiet (as far as
// the clock ticks of /proc/PID/stat tell): started up, and blocked waiting. It gives up after limit, or when one of them exits.
func settle(ctx context.Context, ps []*proc, quiet, limit time.Duration) error {
	start := time.Now()
	last, since := int64(-1), start
	for {
		var total int64
		for _, p := range ps {
			if p.exited() {
				return nil // its wait will tell why
			}
			total += cpuTicks(p.pid())
		}
		now := time.Now()
		switch {
		case total != last:
			last, since = total, now
		case now.Sub(since) >= quiet:
			return nil
		}
		if now.Sub(start) > limit {
			return nil
		}
		if err := clock.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// cpuTicks is a process's user and system time, in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields are counted after its ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

// memory reads VmRSS and VmHWM (peak RSS) of pid, in bytes.
func memory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, val, ok := strings.Cut(s.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			rss = kb * 1024
		} else {
			hwm = kb * 1024
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, s.Err()
}

// An interval is one child's run, in ns on CLOCK_MONOTONIC, its parent,
// and the fencing token semrun gave it.
type interval struct {
	start, end int64
	ppid       int
	token      int64
}

// readLog reads the children's intervals from a log, sorted by start.
func readLog(path string) ([]interval, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	byPID := map[string]*interval{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, l, err)
		}
		iv := byPID[f[1]]
		if iv == nil {
			iv = &interval{}
			byPID[f[1]] = iv
		}
		if f[0] == "S" {
			iv.start = ns
			if len(f) > 3 {
				iv.ppid, _ = strconv.Atoi(f[3])
			}
			if len(f) > 4 {
				iv.token, _ = strconv.ParseInt(f[4], 10, 64)
			}
		} else {
			iv.end = ns
		}
	}
	out := make([]interval, 0, len(byPID))
	for pid, iv := range byPID {
		if iv.start == 0 || iv.end == 0 {
			return nil, fmt.Errorf("%s: child %s did not both start and end", path, pid)
		}
		out = append(out, *iv)
	}
	slices.SortFunc(out, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	return out, nil
}

// started counts the children that wrote their start to a log.
func started(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("S "))
}

// waitStarted waits until n children have started in log, or p has exited.
func waitStarted(ctx context.Context, path string, n int, p *proc, limit time.Duration) error {
	for deadline := time.Now().Add(limit); started(path) < n; {
		if p.exited() {
			if err := p.wait(); err != nil {
				return err
			}
			return fmt.Errorf("%s exited before its child started", filepath.Base(p.cmd.Path))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no child started within %v", limit)
		}
		if err := clock.Sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
