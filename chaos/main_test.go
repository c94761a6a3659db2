//go:build linux

package chaos

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	duration   = flag.Duration("chaos.duration", 15*time.Second, "how long each nemesis injects faults")
	killTrials = flag.Int("chaos.kill-trials", 50, "SIGKILL trials of the kill9 nemesis")
	seed       = flag.Uint64("chaos.seed", 0, "seed of the random choices (0: a new one, logged)")
	holdMin    = flag.Duration("chaos.hold-min", 100*time.Millisecond, "shortest hold of a child")
	holdMax    = flag.Duration("chaos.hold-max", time.Second, "longest hold of a child")
	keysFlag   = flag.Int("chaos.keys", 1, "keys per nemesis (kill9 has four times as many)")
	grantsGoal = flag.Int64("chaos.grants", 0, "after -chaos.duration, go on until the nemeses have made this many grants in all (for at most 4 times as long)")
	long       = flag.Bool("chaos.long", false, "the long run: the values of longRun for the flags not given")
)

// longRun is what -chaos.long sets: ten minutes per nemesis, 1000 kill
// trials, and 100k grants in all, with the children's holds short so that
// grants come fast.
var longRun = map[string]string{
	"chaos.duration":    "10m",
	"chaos.kill-trials": "1000",
	"chaos.hold-min":    "20ms",
	"chaos.hold-max":    "200ms",
	"chaos.grants":      "100000",
	"chaos.hold-crowd":  "200",
}

// The child is this test binary, started again by semrun with these
// variables in its environment.
const (
	childEnv  = "CHAOS_CHILD"  // "1" in a child
	socketEnv = "CHAOS_SOCKET" // the harness's unix socket
	untilEnv  = "CHAOS_UNTIL"  // a file: the child ends as soon as it exists
	childArg  = "chaos-child"  // the child's first argument
)

func TestMain(m *testing.M) {
	began := mono() // first: the child's start
	if os.Getenv(childEnv) == "1" {
		os.Exit(child(began, os.Args[1:]))
	}
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// The nemeses wait far more than they compute: they run at once unless
	// -parallel says otherwise.
	if !given["test.parallel"] {
		_ = flag.Set("test.parallel", strconv.Itoa(max(16, len(nemeses))))
	}
	if *long {
		for name, value := range longRun {
			if !given[name] {
				_ = flag.Set(name, value)
			}
		}
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// mono is CLOCK_MONOTONIC in nanoseconds: the clock every process of the
// host shares, so that the children's times and the harness's compare.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// child is what semrun runs: chaos-child RUN HOLD_MS CODE. It tells the
// harness "S pid ppid start token key run" when it starts and "E end how"
// when it ends, how being done (it held for HOLD_MS, or until the file
// $CHAOS_UNTIL appeared if sooner, and exits with CODE) or term (SIGTERM:
// it exits 143 at once). Its start is the first thing the process did, its
// end the last thing before exit.
func child(began int64, args []string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if len(args) != 4 || args[0] != childArg {
		fmt.Fprintf(os.Stderr, "chaos child: usage: %s RUN HOLD_MS CODE, got %q\n", childArg, args)
		return 2
	}
	run, err1 := strconv.Atoi(args[1])
	hold, err2 := strconv.Atoi(args[2])
	code, err3 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintf(os.Stderr, "chaos child: bad arguments %q\n", args)
		return 2
	}
	token := os.Getenv("SEMRUN_FENCING_TOKEN")
	key := os.Getenv("SEMRUN_HELD_KEY")
	conn, err := net.Dial("unix", os.Getenv(socketEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 3
	}
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "S %d %d %d %s %s %d\n", os.Getpid(), os.Getppid(), began, token, key, run)
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 3
	}
	how := "done"
	select {
	case <-held(time.Duration(hold)*time.Millisecond, os.Getenv(untilEnv)):
	case <-term:
		how, code = "term", 128+int(syscall.SIGTERM)
	}
	fmt.Fprintf(w, "E %d %s\n", mono(), how)
	_ = w.Flush()
	return code
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

var (
	buildOnce sync.Once
	binDir    string
	semrunBin string
	buildErr  error
)

// semrun builds the semrun binary once per test binary, without -race, as
// users run it.
func semrun(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "chaos-bin-"); buildErr != nil {
			return
		}
		semrunBin = filepath.Join(binDir, "semrun")
		cmd := exec.Command("go", "build", "-o", semrunBin, "github.com/semrun/semrun")
		cmd.Dir = ".." // the module's root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build semrun: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return semrunBin
}
