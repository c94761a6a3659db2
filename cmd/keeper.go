//go:build unix

package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// keeperArg is the one argument semrun acquire starts its keeper with:
// the rest, the handle included, comes on a pipe, never in argv, where
// other users see it.
const keeperArg = "keeper"

// The keeper's inherited descriptors: what to keep (keeperMessage), where
// to say it keeps it, and --owner-pid's process, where there is a pidfd.
const (
	keeperInFD    = 3
	keeperReadyFD = 4
	keeperOwnerFD = 5
)

// keeperMessage is what semrun acquire tells its keeper.
type keeperMessage struct {
	// Args are acquire's own arguments: the keeper reads the same
	// settings, from the same flags, variables and files.
	Args   []string `json:"args"`
	Handle string   `json:"handle"`
	// MaxRuntime is what is left of --max-runtime; 0 for none.
	MaxRuntime time.Duration `json:"max_runtime"`
	// OwnerPID is --owner-pid; OwnerFD says that a pidfd of it comes as
	// keeperOwnerFD.
	OwnerPID int  `json:"owner_pid"`
	OwnerFD  bool `json:"owner_fd"`
	// ready is where the keeper says it keeps the hold ("ok"), or why
	// not, once: nil after.
	ready *os.File
	// in is the rest of what acquire says: that it printed the handle.
	in     *bufio.Reader
	inFile *os.File
}

// say tells acquire, once, that the keeper keeps the hold ("ok") or why
// not; later calls say nothing.
func (m *keeperMessage) say(s string) {
	if m.ready != nil {
		fmt.Fprintln(m.ready, s)
		m.ready.Close()
		m.ready = nil
	}
}

// maxKeeperMessage bounds what a keeper reads, and keeperStart how long
// acquire waits for it to say it keeps the permit.
const (
	maxKeeperMessage = 64 << 10
	keeperStart      = 10 * time.Second
)

// startKeeper makes the permit of lease a hold kept by a new keeper
// process: its own session, no terminal, stdio on the null device, in
// acquire's working directory, where the paths of its settings are
// relative to. It returns once the keeper renews the hold, with the pipe
// on which acquire says it printed the handle (printedLine).
func (o *acquireOptions) startKeeper(ctx context.Context, store semaphore.Store, lease semaphore.Lease, granted time.Time) (semaphore.Handle, int, *os.File, error) {
	in, toKeeper, err := os.Pipe()
	if err != nil {
		return semaphore.Handle{}, 0, nil, fmt.Errorf("start its keeper: %w", err)
	}
	defer in.Close()
	kept := false
	defer func() {
		if !kept {
			toKeeper.Close()
		}
	}()
	fromKeeper, ready, err := os.Pipe()
	if err != nil {
		return semaphore.Handle{}, 0, nil, fmt.Errorf("start its keeper: %w", err)
	}
	defer fromKeeper.Close()
	defer ready.Close()
	files := []*os.File{in, ready}
	if f := o.owner.file(); f != nil {
		files = append(files, f)
	}
	exe := o.f.Self
	if exe == "" {
		exe = self()
	}
	c := exec.Command(exe, keeperArg)
	c.Args[0] = os.Args[0] // the name it was started by, as a test's copy needs
	c.Env, c.ExtraFiles = o.f.Environ, files
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		return semaphore.Handle{}, 0, nil, fmt.Errorf("start its keeper: %w", err)
	}
	pid := c.Process.Pid
	in.Close()
	ready.Close()
	_ = c.Process.Release() // it outlives us: its parent is init's

	host, _ := os.Hostname()
	h, err := store.Hold(ctx, lease, semaphore.HolderInfo{Host: host, PID: pid, MaxRuntime: o.maxRuntime, Label: o.req.Holder.Label})
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return semaphore.Handle{}, 0, nil, err
	}
	msg := keeperMessage{Args: o.args, Handle: h.String(), OwnerPID: o.ownerPID, OwnerFD: o.owner.file() != nil}
	if o.maxRuntime > 0 {
		msg.MaxRuntime = max(o.maxRuntime-time.Since(granted), time.Millisecond)
	}
	sent := json.NewEncoder(toKeeper).Encode(msg)
	// A keeper that is gone says so by closing its end: that says more
	// than the broken pipe.
	if err = awaitKeeper(fromKeeper, keeperStart+o.connectTimeout); err == nil && sent != nil {
		err = sent
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		end := semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper did not start"}
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
		defer cancel()
		_, _, _ = store.EndHold(endCtx, h, end)
		return semaphore.Handle{}, 0, nil, fmt.Errorf("its keeper did not start: %w", err)
	}
	kept = true
	return h, pid, toKeeper, nil
}

// self is semrun's own executable: on Linux the very file this process
// runs, even once an upgrade replaced it.
func self() string {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe"
	}
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

// awaitKeeper waits, at most patience, for the keeper to say it keeps the
// hold ("ok"), or why not.
func awaitKeeper(r *os.File, patience time.Duration) error {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(io.LimitReader(r, 1024)).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		switch {
		case s == "ok":
			return nil
		case s == "":
			return errors.New("it exited")
		}
		return errors.New(s)
	case <-time.After(patience):
		return fmt.Errorf("it said nothing within %v", patience)
	}
}

// readKeeperMessage is what acquire told this keeper: read within a
// bound, as anything a process inherits is untrusted.
func readKeeperMessage() (*keeperMessage, error) {
	in := os.NewFile(keeperInFD, "keeper message")
	if in == nil {
		return nil, errors.New("semrun keeper: started by semrun acquire only")
	}
	r := bufio.NewReaderSize(in, maxKeeperMessage)
	var msg keeperMessage
	line, err := readLine(r, keeperStart)
	if err == nil {
		err = json.Unmarshal(line, &msg)
	}
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("semrun keeper: started by semrun acquire only: %w", err)
	}
	if len(msg.Args) == 0 || msg.Args[0] == keeperArg {
		in.Close()
		return nil, errors.New("semrun keeper: started by semrun acquire only: no arguments")
	}
	msg.in, msg.inFile = r, in
	msg.ready = os.NewFile(keeperReadyFD, "keeper ready")
	return &msg, nil
}

// readLine reads one line of r, at most its buffer long, within patience.
func readLine(r *bufio.Reader, patience time.Duration) ([]byte, error) {
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := r.ReadSlice('\n')
		got <- result{bytes.Clone(line), err}
	}()
	select {
	case res := <-got:
		return res.line, res.err
	case <-time.After(patience):
		return nil, fmt.Errorf("nothing within %v", patience)
	}
}

// printedLine is what acquire tells its keeper once it printed the
// handle; a keeper that does not hear it ends the hold, which nobody
// could name.
const printedLine = "printed"

// printed tells whether acquire printed the handle: its last line.
func (m *keeperMessage) printed() bool {
	defer m.inFile.Close()
	line, err := readLine(m.in, keeperStart)
	return err == nil && strings.TrimSpace(string(line)) == printedLine
}

// watchEnds says, once, why the keeper must end the hold, and calls stop
// then: --max-runtime ran out, --owner-pid's process exited, or a signal
// came. It says nothing once ctx ends.
func (o *acquireOptions) watchEnds(ctx context.Context, signals <-chan os.Signal, stop func()) <-chan semaphore.HoldEnd {
	msg := o.keeper
	var alarm *clock.Alarm
	var ranOut <-chan struct{} // nil, which never delivers, without a bound
	if msg.MaxRuntime > 0 {
		alarm = clock.NewAlarm(clock.Now().Add(msg.MaxRuntime))
		ranOut = alarm.C
	}
	var ownerGone chan struct{}
	if msg.OwnerPID > 0 {
		w := ownerOf(msg.OwnerPID, msg.OwnerFD)
		ownerGone = make(chan struct{})
		go func() {
			defer w.close()
			if w.wait(ctx) {
				close(ownerGone)
			}
		}()
	}
	ends := make(chan semaphore.HoldEnd, 1)
	go func() {
		defer alarm.Stop()
		var end semaphore.HoldEnd
		select {
		case <-ranOut:
			end = semaphore.HoldEnd{State: semaphore.HoldMaxRuntime, Why: fmt.Sprintf("its --max-runtime of %v ran out", o.maxRuntime)}
		case <-ownerGone:
			end = semaphore.HoldEnd{State: semaphore.HoldReleased, Why: fmt.Sprintf("its owner, pid %d, exited", msg.OwnerPID)}
		case sig := <-signals:
			end = semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper got " + runner.SignalName(sig.(syscall.Signal))}
		case <-ctx.Done():
			return
		}
		ends <- end
		stop()
	}()
	return ends
}

// keep is the keeper: it attaches to the hold, says so to acquire, and
// renews it until the first of: the hold ended elsewhere (semrun
// release), --max-runtime, --owner-pid's exit, SIGTERM, SIGINT or SIGHUP,
// or its loss; then it ends the hold with why, and exits.
func (o *acquireOptions) keep(ctx context.Context, store semaphore.Store, log *logger) error {
	msg := o.keeper
	h, err := semaphore.ParseHandle(msg.Handle)
	if err != nil {
		return err
	}
	signals, stopSignals := runner.UntilStopped(syscall.SIGHUP)
	defer stopSignals()
	lease, info, err := store.Attach(ctx, h, true)
	if err != nil {
		return err
	}
	msg.say("ok")
	if !msg.printed() {
		// acquire was killed, or could not print: nobody has the handle.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.connectTimeout)
		defer cancel()
		_, _, _ = store.EndHold(endCtx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun acquire ended before it printed the handle"})
		return lease.Release(endCtx)
	}

	keepCtx, stop := context.WithCancel(ctx)
	defer stop()
	ends := o.watchEnds(keepCtx, signals, stop)
	lost := runner.Keep(keepCtx, runner.Spec{TTL: info.TTL, Warnf: log.Warnf}, lease)

	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.connectTimeout)
	defer cancel()
	var ended *semaphore.HoldEndedError
	switch {
	case errors.As(lost, &ended):
		// Ended elsewhere: semrun release, a revoke.
	case lost != nil:
		// Said, if the store can be told, for release and --handle runs.
		_, _, _ = store.EndHold(endCtx, h, semaphore.HoldEnd{State: semaphore.HoldLost, Why: "its keeper lost it: " + runner.LostWhy(lost)})
	default:
		end := semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper stopped"}
		select {
		case end = <-ends:
		default:
		}
		_, _, _ = store.EndHold(endCtx, h, end)
	}
	return lease.Release(endCtx)
}
