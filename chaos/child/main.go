//go:build linux

// Command child is what the chaos harness's semruns run: child RUN
// HOLD_MS CODE. It tells the harness "S pid ppid start token key run" when
// it starts; then "T tokens", SEMRUN_FENCING_TOKENS (every key's token,
// KEY=TOKEN a line) quoted as Go does, when semrun gave it; then "L slot
// slots keyslots name names", SEMRUN_SLOT, SEMRUN_SLOTS, SEMRUN_KEY_SLOTS
// (KEY=SLOTS a line), SEMRUN_SLOT_NAME and SEMRUN_SLOT_NAMES, each quoted
// or "-" when unset, when semrun gave any of them;
// and "E end how code" when it ends, how being done (it held for HOLD_MS,
// or until the file $CHAOS_UNTIL appeared if sooner, and exits with CODE)
// or term (SIGTERM: it exits 143 at once). Its start is the first thing
// the process did, its end the last thing before exit, both on
// CLOCK_MONOTONIC, which every process of the host shares. The harness
// builds it without -race, as it builds semrun: a child costs a few
// milliseconds of CPU to start, not the tens the race detector adds.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	began := mono() // first: the child's start
	os.Exit(child(began, os.Args[1:]))
}

// mono is CLOCK_MONOTONIC in nanoseconds.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func child(began int64, args []string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "chaos child: usage: child RUN HOLD_MS CODE, got %q\n", args)
		return 2
	}
	run, err1 := strconv.Atoi(args[0])
	hold, err2 := strconv.Atoi(args[1])
	code, err3 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintf(os.Stderr, "chaos child: bad arguments %q\n", args)
		return 2
	}
	token := os.Getenv("SEMRUN_FENCING_TOKEN")
	key := os.Getenv("SEMRUN_HELD_KEY")
	conn, err := net.Dial("unix", os.Getenv("CHAOS_SOCKET"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 3
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "S %d %d %d %s %s %d\n", os.Getpid(), os.Getppid(), began, token, key, run)
	if tokens, ok := os.LookupEnv("SEMRUN_FENCING_TOKENS"); ok {
		// In the same write as S: the harness never sees one without the other.
		fmt.Fprintf(w, "T %s\n", strconv.Quote(tokens))
	}
	if line, ok := slotsLine(); ok {
		fmt.Fprintln(w, line) // in the same write as S, as T
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 3
	}
	how := "done"
	select {
	case <-held(time.Duration(hold)*time.Millisecond, os.Getenv("CHAOS_UNTIL")):
	case <-term:
		how, code = "term", 128+int(syscall.SIGTERM)
	}
	fmt.Fprintf(w, "E %d %s %d\n", mono(), how, code)
	_ = w.Flush()
	return code
}

// slotsLine is the L line, false when semrun gave no slot: a key of more
// than 1024 permits numbers none.
func slotsLine() (string, bool) {
	line, any := "L", false
	for _, name := range []string{"SEMRUN_SLOT", "SEMRUN_SLOTS", "SEMRUN_KEY_SLOTS", "SEMRUN_SLOT_NAME", "SEMRUN_SLOT_NAMES"} {
		v, ok := os.LookupEnv(name)
		if !ok {
			line += " -"
			continue
		}
		line, any = line+" "+strconv.Quote(v), true
	}
	return line, any
}

// held is closed after d, or once the file until exists if sooner.
func held(d time.Duration, until string) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		deadline := time.Now().Add(d)
		for until != "" && time.Now().Before(deadline) {
			if _, err := os.Stat(until); err == nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Until(deadline))
	}()
	return ch
}
