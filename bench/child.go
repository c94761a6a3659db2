//go:build ignore

// The child the contenders run where no C compiler is found (see childC
// in childc.go, which does the same and starts faster): the bench builds
// it on its own, small, so that starting it costs little of the gaps it
// measures.
//
//	child LOG HOLD
//
// appends "S pid ns ppid token" when it starts and "E pid ns" when it ends
// to LOG, on CLOCK_MONOTONIC, which every process of the host shares; token
// is semrun's $SEMRUN_FENCING_TOKEN, 0 without it. It holds for
// HOLD seconds, or with HOLD gate:PATH until PATH exists. It dies with
// its parent, so a killed contender leaves no child behind.
package main

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	began := ts.Nano()
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	ppid := os.Getppid()
	if ppid == 1 {
		os.Exit(1) // the parent is already gone
	}
	if len(os.Args) != 3 {
		fail("usage: child LOG HOLD|gate:PATH")
	}
	f, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err.Error())
	}
	pid := strconv.Itoa(os.Getpid())
	token := os.Getenv("SEMRUN_FENCING_TOKEN")
	if token == "" {
		token = "0"
	}
	// One write each: appends of a short line do not interleave.
	if _, err := f.WriteString("S " + pid + " " + strconv.FormatInt(began, 10) + " " + strconv.Itoa(ppid) + " " + token + "\n"); err != nil {
		fail(err.Error())
	}
	if gate, ok := strings.CutPrefix(os.Args[2], "gate:"); ok {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Millisecond) {
			if _, err := os.Stat(gate); err == nil {
				break
			}
			if time.Now().After(deadline) {
				fail("the gate never opened")
			}
		}
	} else {
		s, err := strconv.ParseFloat(os.Args[2], 64)
		if err != nil {
			fail("HOLD: want seconds, like 0.05")
		}
		time.Sleep(time.Duration(s * float64(time.Second)))
	}
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	if _, err := f.WriteString("E " + pid + " " + strconv.FormatInt(ts.Nano(), 10) + "\n"); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	os.Stderr.WriteString("child: " + msg + "\n")
	os.Exit(2)
}
