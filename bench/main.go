// Command bench measures semrun next to its peers on this machine, in one
// run, and prints each one's time as a ratio to flock(1)'s, measured in the
// same run: absolute times on a shared machine say little, ratios do.
//
//	go run ./bench [-rounds 400] [-sem-rounds 30]
//
// bench/run installs the peers (flock, GNU sem) when they are missing and
// then runs this.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/semrun/semrun/internal/redistest"
)

// A contender is one command line whose whole-process time is measured.
type contender struct {
	name  string
	argv  []string
	every int // measured in one round out of every
	times []time.Duration
}

func main() {
	rounds := flag.Int("rounds", 400, "rounds; each runs every contender once, in random order")
	semRounds := flag.Int("sem-rounds", 30, "rounds that also run GNU sem, which is slow")
	flag.Parse()
	if err := run(*rounds, *semRounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rounds, semRounds int) error {
	dir, err := os.MkdirTemp("", "semrun-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	semrun, err := build(dir)
	if err != nil {
		return err
	}

	cs := []*contender{
		{name: "true", argv: []string{"true"}},
		{name: "flock f true", argv: []string{"flock", filepath.Join(dir, "f"), "true"}},
		{name: "semrun --local -n 3 -- true", argv: []string{semrun, "--local", "--lock-dir", filepath.Join(dir, "locks"), "-k", "b", "-n", "3", "--", "true"}},
		{name: "semrun version", argv: []string{semrun, "version"}},
	}
	if _, err := exec.LookPath("sem"); err == nil {
		cs = append(cs, &contender{name: "sem -j 3 true", every: max(rounds/max(semRounds, 1), 1),
			argv: []string{"sem", "--will-cite", "--fg", "--id", "semrun-bench", "-j", "3", "true"}})
	} else {
		fmt.Fprintln(os.Stderr, "bench: GNU sem not found (Debian package parallel); left out")
	}
	if redistest.Available() == nil {
		srv, err := redistest.Start(dir)
		if err != nil {
			return err
		}
		defer srv.Stop()
		cs = append(cs, &contender{name: "semrun -n 3 -- true (Redis)",
			argv: []string{semrun, "--redis", srv.URL(), "-k", "b", "-n", "3", "--", "true"}})
	} else {
		fmt.Fprintln(os.Stderr, "bench: redis-server not found; Redis left out")
	}
	for _, c := range cs {
		if _, err := exec.LookPath(c.argv[0]); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if err := exec.Command(c.argv[0], c.argv[1:]...).Run(); err != nil { // warm caches
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}

	for r := range rounds {
		for _, i := range rand.Perm(len(cs)) {
			c := cs[i]
			if c.every > 1 && r%c.every != 0 {
				continue
			}
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.times = append(c.times, time.Since(start))
		}
	}
	report(cs, rounds)
	return nil
}

// build compiles semrun as releases are built: static, trimmed, stripped.
func build(dir string) (string, error) {
	out := filepath.Join(dir, "semrun")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build semrun: %w", err)
	}
	return out, nil
}

func report(cs []*contender, rounds int) {
	var base time.Duration
	for _, c := range cs {
		slices.Sort(c.times)
		if c.name == "flock f true" {
			base = quantile(c.times, 0.5)
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("whole-process time, %d rounds in random order, %s, %d CPUs, %s, %s\n\n",
		rounds, runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), host, time.Now().Format("2006-01-02"))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "command\truns\tp50\tp90\tp50 / flock's\t")
	for _, c := range cs {
		p50 := quantile(c.times, 0.5)
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%.2f×\t\n", c.name, len(c.times),
			p50.Round(10*time.Microsecond), quantile(c.times, 0.9).Round(10*time.Microsecond), float64(p50)/float64(base))
	}
	tw.Flush()
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}
