//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
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
	long       = flag.Bool("chaos.long", false, "the long run: the values of longRun for the flags not given (and -chaos)")
	enabled    = flag.Bool("chaos", false, "run the nemeses (docs/chaos.md); without it TestChaos skips, and only the checks' own tests run")
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

// The child's environment (chaos/child).
const (
	socketEnv = "CHAOS_SOCKET" // the harness's unix socket
	untilEnv  = "CHAOS_UNTIL"  // a file: the child ends as soon as it exists
)

// parallel is how many nemeses run at once unless -parallel says
// otherwise: on 2 CPUs, six leave room for the renewals of each, and for
// what else the machine runs.
const parallel = 6

func TestMain(m *testing.M) {
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["test.parallel"] {
		_ = flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	if *long {
		*enabled = true
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

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds, once per test binary, semrun and the child semrun runs
// (chaos/child), without -race, as users run semrun, and returns their
// paths.
func binaries(t *testing.T) (semrun, child string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "chaos-bin-"); buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "github.com/semrun/semrun", "github.com/semrun/semrun/chaos/child")
		cmd.Dir = ".." // the module's root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build semrun and the child: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "semrun"), filepath.Join(binDir, "child")
}
