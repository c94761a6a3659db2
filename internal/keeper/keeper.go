// Package keeper is the process that keeps a hold (semrun acquire) after
// the acquire that took it has exited: how it is started, what it is told
// on its pipes, how it lets go of everything of its caller's but the hold,
// and what ends it (its max runtime, --owner-pid's exit, a stop signal).
// What it keeps and what it says are cmd's; how it renews is the runner's
// (runner.Keep).
package keeper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// Arg is the one argument a keeper is started with: the rest, the handle
// included, comes on a pipe, never in argv, where other users see it.
const Arg = "keeper"

// The keeper's descriptors besides stdio: what to keep (a Message), where
// to say it keeps it, and --owner-pid's process, where there is a pidfd.
const (
	inFD    = 3
	readyFD = 4
	ownerFD = 5
)

// Message is what semrun acquire tells its keeper.
type Message struct {
	// Args are acquire's own arguments: the keeper reads the same
	// settings, from the same flags, variables and files.
	Args   []string `json:"args"`
	Handle string   `json:"handle"`
	// MaxRuntime is what is left of --max-runtime; 0 for none.
	MaxRuntime time.Duration `json:"max_runtime"`
	// OwnerPID is --owner-pid; OwnerFD says that a pidfd of it comes as
	// the keeper's descriptor 5.
	OwnerPID int  `json:"owner_pid"`
	OwnerFD  bool `json:"owner_fd"`
}

// maxMessage bounds what a keeper reads, and Patience how long acquire
// waits for it to say it keeps the permit, and it for acquire's lines.
const (
	maxMessage = 64 << 10
	Patience   = 10 * time.Second
)

// printedLine is what acquire tells its keeper once it printed the
// handle; a keeper that does not hear it ends the hold, which nobody
// could name.
const printedLine = "printed"

// okLine is what a keeper tells acquire once it keeps the hold.
const okLine = "ok"

// Started is a keeper as the acquire that started it sees it.
type Started struct {
	PID int
	// tell is acquire's end of the keeper's descriptor 3, heard its end
	// of descriptor 4.
	tell, heard *os.File
}

// Tell hands m to the keeper.
func (k *Started) Tell(m Message) error { return json.NewEncoder(k.tell).Encode(m) }

// Await waits, at most patience, for the keeper to say that it keeps the
// hold, or why not. A keeper that is gone says so by closing its end.
func (k *Started) Await(patience time.Duration) error {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(io.LimitReader(k.heard, 1024)).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		switch s {
		case okLine:
			return nil
		case "":
			return errors.New("it exited")
		}
		return errors.New(s)
	case <-time.After(patience):
		return fmt.Errorf("it said nothing within %v", patience)
	}
}

// Printed tells the keeper that acquire printed the handle: its last word.
func (k *Started) Printed() error {
	_, err := fmt.Fprintln(k.tell, printedLine)
	return err
}

// Close lets go of the keeper's pipes; a keeper not told Printed by then
// ends its hold.
func (k *Started) Close() {
	k.tell.Close()
	k.heard.Close()
}

// Parent is acquire as its keeper sees it: what it was told, and where to
// answer.
type Parent struct {
	Message
	// ready is where the keeper says it keeps the hold ("ok"), or why
	// not, once: nil after.
	ready *os.File
	// in is the rest of what acquire says: that it printed the handle.
	in     *bufio.Reader
	inFile *os.File
}

// readMessage reads what acquire told this keeper on in, within a bound,
// as anything a process inherits is untrusted. Its errors say what is
// wrong, not who started the keeper: the caller does.
func readMessage(in *os.File) (*Parent, error) {
	r := bufio.NewReaderSize(in, maxMessage)
	var p Parent
	line, err := readLine(r, Patience)
	if err == nil {
		err = json.Unmarshal(line, &p.Message)
	}
	switch {
	case err != nil:
		return nil, err
	case len(p.Args) == 0 || p.Args[0] == Arg:
		return nil, errors.New("no arguments")
	}
	p.in, p.inFile = r, in
	return &p, nil
}

// Say tells acquire, once, that the keeper keeps the hold (Kept) or why
// not; later calls say nothing.
func (p *Parent) Say(s string) {
	if p != nil && p.ready != nil {
		fmt.Fprintln(p.ready, s)
		p.ready.Close()
		p.ready = nil
	}
}

// Kept tells acquire that the keeper keeps the hold.
func (p *Parent) Kept() { p.Say(okLine) }

// Printed tells whether acquire printed the handle: its last line.
func (p *Parent) Printed() bool {
	defer p.inFile.Close()
	line, err := readLine(p.in, Patience)
	return err == nil && strings.TrimSpace(string(line)) == printedLine
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

// End is why a keeper must end its hold: the max runtime it was told ran
// out, its owner exited, or else it got Signal.
type End struct {
	RanOut, OwnerExited bool
	Signal              syscall.Signal
}

// Watch says, once, why the keeper must end the hold, and calls stop then:
// the MaxRuntime it was told ran out (on a clock that counts a suspend of
// the host), OwnerPID's process exited, or one of signals came (the stop
// signals it catches). It says nothing once ctx ends.
func (p *Parent) Watch(ctx context.Context, signals <-chan os.Signal, stop func()) <-chan End {
	var alarm *clock.Alarm
	var ranOut <-chan struct{} // nil, which never delivers, without a bound
	if p.MaxRuntime > 0 {
		alarm = clock.NewAlarm(clock.Now().Add(p.MaxRuntime))
		ranOut = alarm.C
	}
	var ownerGone chan struct{}
	if p.OwnerPID > 0 {
		w := p.owner()
		ownerGone = make(chan struct{})
		go func() {
			defer w.Close()
			if w.wait(ctx) {
				close(ownerGone)
			}
		}()
	}
	ends := make(chan End, 1)
	go func() {
		defer alarm.Stop()
		var end End
		select {
		case <-ranOut:
			end.RanOut = true
		case <-ownerGone:
			end.OwnerExited = true
		case sig := <-signals:
			end.Signal, _ = sig.(syscall.Signal)
		case <-ctx.Done():
			return
		}
		ends <- end
		stop()
	}()
	return ends
}

// wait tells, once it knows, that the owner exited; false when ctx ended
// first. It looks every second where it cannot be told (no pidfd).
func (o *Owner) wait(ctx context.Context) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if o.exited() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
