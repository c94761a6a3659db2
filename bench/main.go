// Command bench measures semrun next to its peers, flock(1) and GNU sem, on
// this machine, in one run, and prints ratios as well as absolute times:
// absolute times on a shared machine say little, ratios to a peer measured
// in the same run do.
//
//	go run ./bench [-only overhead,handoff,commands,utilization,rss,line,cost] [-markdown]
//
// Its parts, each printed as a table with its targets:
//
//   - overhead: whole-process time of one uncontended run, beside flock(1)
//     and beside the floor of any Go wrapper (gowrap: os/exec and nothing
//     else), with Redis, a Redis Cluster and Sentinel, and --local.
//   - handoff: 30 processes for 1 permit, each child holding 50ms; the gaps
//     from one child's end to the next one's start, p50 and p99, and where
//     their time goes.
//   - commands: Redis commands per grant, 100 semruns started at once; and
//     what logging events costs Redis per grant and release, events on and
//     off (NoEvents) A/B, and the memory of a key's whole log.
//   - utilization: 60 jobs of 200ms from 20 processes under 3 permits,
//     against the same jobs run in 3 lanes with no lock.
//   - rss: resident memory of a waiting and of a holding semrun.
//   - line: Redis's CPU and semrun's commands per grant, and the order of
//     grants, with 50, 500 and 2,000 waiters on one key of 10 permits, all
//     of priority 0, and again with mixed priorities (-100..100).
//   - cost: what a run costs Redis, a process a run, beside the minimal
//     Redis semaphore (bench/minimal), and what each command of a run costs.
//
// -markdown prints the tables as markdown, for docs/benchmarks.md; -compare
// BIN measures another semrun binary beside this tree's, as "semrun B", for
// an A/B of a change in one run; -h lists the options. The children the contenders run are a small C program where a C
// compiler is found (childc.go), else a small Go one (child.go): each
// records its start and end on CLOCK_MONOTONIC.
//
// bench/run installs the peers (flock, GNU sem) when they are missing and
// then runs this. The Redis parts need redis-server: the bench starts its
// own on a free loopback port, and a Redis Cluster of 3 and a Sentinel
// (with redis-cli) beside it. Every process it starts is stopped, on an
// error or a signal too, and its temporary directory removed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/redistest"
)

type options struct {
	only     string
	markdown bool

	rounds, semRounds int // overhead

	handoffRounds, handoffSemRounds, waiters int
	hold                                     time.Duration
	handoffTrace                             bool

	commandWaiters int

	utilRounds, utilSemRounds int

	lineSizes []int

	// compare is another semrun binary, measured beside this tree's as
	// "semrun B": an A/B of a change in one run.
	compare string
}

type part struct {
	name string
	run  func(*bench) ([]*table, error)
}

var parts = []part{
	{"overhead", (*bench).overhead},
	{"handoff", (*bench).handoff},
	{"commands", (*bench).commands},
	{"utilization", (*bench).utilization},
	{"rss", (*bench).rss},
	{"line", (*bench).line},
	{"cost", (*bench).cost},
}

func main() {
	var o options
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.name
	}
	flag.StringVar(&o.only, "only", strings.Join(names, ","), "comma-separated parts to run")
	flag.BoolVar(&o.markdown, "markdown", false, "print markdown tables, for the README")
	flag.IntVar(&o.rounds, "rounds", 400, "overhead: rounds; each runs every contender once, in random order")
	flag.IntVar(&o.semRounds, "sem-rounds", 30, "overhead: rounds that also run GNU sem, which is slow")
	flag.IntVar(&o.handoffRounds, "handoff-rounds", 8, "handoff: rounds per contender")
	flag.IntVar(&o.handoffSemRounds, "handoff-sem-rounds", 2, "handoff: rounds for GNU sem, whose waiters poll")
	flag.IntVar(&o.waiters, "waiters", 30, "handoff: processes per round, one permit")
	flag.DurationVar(&o.hold, "hold", 50*time.Millisecond, "handoff: how long each child holds")
	flag.BoolVar(&o.handoffTrace, "handoff-trace", true, "handoff: one more round of semrun with Redis, traced with MONITOR")
	flag.IntVar(&o.commandWaiters, "command-waiters", 100, "commands: semrun processes started at once")
	flag.IntVar(&o.utilRounds, "util-rounds", 3, "utilization: rounds per contender")
	flag.IntVar(&o.utilSemRounds, "util-sem-rounds", 1, "utilization: rounds for GNU sem")
	flag.StringVar(&o.compare, "compare", "", "another semrun binary, measured beside this tree's as semrun B (overhead, handoff, utilization, rss)")
	sizes := flag.String("line-waiters", "50,500,2000", "line: sizes of the line, shortest first")
	flag.Parse()
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -line-waiters: %q is not a size\n", f)
			os.Exit(2)
		}
		o.lineSizes = append(o.lineSizes, n)
	}
	var chosen []part
	for _, name := range strings.Split(o.only, ",") {
		i := slices.IndexFunc(parts, func(p part) bool { return p.name == strings.TrimSpace(name) })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "bench: -only: unknown part %q (parts: %s)\n", name, strings.Join(names, ","))
			os.Exit(2)
		}
		chosen = append(chosen, parts[i])
	}
	if o.waiters < 2 || o.commandWaiters < 1 {
		fmt.Fprintln(os.Stderr, "bench: -waiters must be at least 2, -command-waiters at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, o, chosen)
	stop()
	os.Exit(code)
}

// bench is what every part needs.
type bench struct {
	ctx    context.Context
	o      options
	dir    string // removed at the end
	root   string // the module's root
	semrun string // built as releases are
	// unlinked is semrun built without the metrics code (overhead).
	unlinked string
	gowrap   string   // the floor of a Go wrapper, built the same way
	child    string   // the child the contenders run (see childc.go)
	childC   bool     // written in C, else in Go
	env      []string // for every process started
	redis    *redistest.Server
	// cluster and sentinel are the other topologies, when they started:
	// a Redis Cluster of 3 masters, and a Sentinel watching redis.
	cluster  []*redistest.Server
	sentinel *redistest.Server
	flock    bool
	sem      bool
	seq      int // for fresh key names
}

func run(ctx context.Context, o options, chosen []part) int {
	dir, err := os.MkdirTemp("", "semrun-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	b := &bench{ctx: ctx, o: o, dir: dir}
	defer func() { // on every path: the processes, then the server, then the files
		running.stopAll()
		for _, s := range append(b.cluster, b.sentinel, b.redis) {
			if s != nil {
				s.Stop()
			}
		}
		os.RemoveAll(dir)
	}()
	if err := b.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	header := b.machine()
	if o.markdown {
		fmt.Printf("Measured with `go run ./bench` on %s.\n\n", header)
	} else {
		fmt.Printf("semrun bench: %s\n\n", header)
	}
	code := 0
	for _, p := range chosen {
		if ctx.Err() != nil {
			break
		}
		began := time.Now()
		tables, err := p.run(b)
		for _, t := range tables {
			t.print(os.Stdout, o.markdown)
		}
		if err != nil && ctx.Err() == nil { // once interrupted, failures are the bench's own doing
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", p.name, err)
			code = 1
		}
		fmt.Fprintf(os.Stderr, "bench: %s took %v\n", p.name, time.Since(began).Round(100*time.Millisecond))
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	return code
}

// benchFence is the restart fence the bench's semruns ask, and wait out
// once before the first measure.
const benchFence = time.Second

// setup builds semrun, finds the peers and starts redis-server.
func (b *bench) setup() error {
	var err error
	// Isolated from the user's semrun config and SEMRUN_* variables, and
	// GNU sem keeps its semaphores in the temporary directory.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEMRUN_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") &&
			!strings.HasPrefix(kv, "PARALLEL_HOME=") {
			b.env = append(b.env, kv)
		}
	}
	b.env = append(b.env, "XDG_CONFIG_HOME="+filepath.Join(b.dir, "config"), "PARALLEL_HOME="+filepath.Join(b.dir, "parallel"),
		// A restart fence, as every run has by default (it costs the
		// scripts an INFO), but short: the bench's Redis is fresh.
		"SEMRUN_RESTART_FENCE="+benchFence.String())
	// The module's root, wherever in it the bench was started.
	out, err := exec.CommandContext(b.ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("find the module's root (run the bench inside it): %w", err)
	}
	b.root = strings.TrimSpace(string(out))
	if b.semrun, err = b.build("semrun", "."); err != nil {
		return err
	}
	if b.gowrap, err = b.build("gowrap", "./bench/gowrap"); err != nil {
		return err
	}
	if err := b.buildChild(); err != nil {
		return err
	}
	if _, err := exec.LookPath("flock"); err == nil {
		b.flock = true
	} else {
		fmt.Fprintln(os.Stderr, "bench: flock not found (Debian package util-linux); left out")
	}
	if _, err := exec.LookPath("sem"); err == nil {
		b.sem = true
	} else {
		fmt.Fprintln(os.Stderr, "bench: GNU sem not found (Debian package parallel); left out")
	}
	if redistest.Available() == nil {
		if b.redis, err = redistest.Start(b.dir); err != nil {
			return err
		}
		b.startTopologies()
		time.Sleep(benchFence + time.Second) // uptime counts whole seconds
	} else {
		fmt.Fprintln(os.Stderr, "bench: redis-server not found; Redis left out")
	}
	return nil
}

// sentinelMaster is the name the bench's Sentinel knows its master by.
const sentinelMaster = "bench"

// startTopologies starts a Redis Cluster of 3 masters and a Sentinel that
// watches the bench's Redis, or says why one is left out.
func (b *bench) startTopologies() {
	dir := filepath.Join(b.dir, "cluster")
	err := os.Mkdir(dir, 0o700)
	if err == nil {
		b.cluster, err = redistest.StartCluster(dir, 3, 0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: Redis Cluster left out: %v\n", err)
	}
	if b.sentinel, err = redistest.StartSentinel(b.dir, sentinelMaster, b.redis.Addr, 1); err != nil {
		fmt.Fprintf(os.Stderr, "bench: Sentinel left out: %v\n", err)
	}
}

// build compiles pkg, relative to the module's root, as releases are
// built: static, trimmed, stripped; with the build tags tags.
func (b *bench) build(name, pkg string, tags ...string) (string, error) {
	out := filepath.Join(b.dir, name)
	cmd := exec.CommandContext(b.ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-tags="+strings.Join(tags, ","), "-o", out, pkg)
	cmd.Dir = b.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return out, nil
}

// buildChild builds the child in C when a C compiler is found (static
// where the C library allows), else in Go.
func (b *bench) buildChild() error {
	b.child = filepath.Join(b.dir, "child")
	if cc, err := exec.LookPath("cc"); err == nil {
		src := filepath.Join(b.dir, "child.c")
		if err := os.WriteFile(src, []byte(childC), 0o644); err != nil {
			return err
		}
		for _, static := range []bool{true, false} {
			args := []string{"-O2", "-o", b.child, src}
			if static {
				args = append(args, "-static")
			}
			cmd := exec.CommandContext(b.ctx, cc, args...)
			if out, err := cmd.CombinedOutput(); err == nil {
				b.childC = true
				return nil
			} else if !static {
				fmt.Fprintf(os.Stderr, "bench: cc child.c: %v: %s; using the Go child\n", err, out)
			}
		}
	}
	_, err := b.build("child", filepath.Join("bench", "child.go"))
	return err
}

// childName says what the child is, for the notes.
func (b *bench) childName() string {
	if b.childC {
		return "a small C program (childc.go, built with cc)"
	}
	return "a small Go program (bench/child.go; no C compiler was found)"
}

// machine names the machine, the date and the peers' versions.
func (b *bench) machine() string {
	host, _ := os.Hostname()
	cpu := ""
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(info), "\n") {
			if name, val, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(name) == "model name" {
				cpu = " (" + strings.TrimSpace(val) + ")"
				break
			}
		}
	}
	s := fmt.Sprintf("%s, %d CPUs%s, host %s, %s, %s", runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), cpu,
		host, time.Now().Format("2006-01-02 15:04 MST"), runtime.Version())
	g := newGroup(b.ctx, b.env)
	defer g.close()
	version := func(argv ...string) string {
		p, err := g.start(argv, true)
		if err != nil || p.wait() != nil {
			return ""
		}
		line, _, _ := strings.Cut(p.out.String(), "\n")
		return strings.TrimSpace(line)
	}
	if b.redis != nil {
		v := version("redis-server", "--version")
		if i := strings.Index(v, "v="); i >= 0 {
			v, _, _ = strings.Cut(v[i+2:], " ")
		}
		s += ", redis-server " + v
	}
	if b.flock {
		s += ", " + version("flock", "--version")
	}
	if b.sem {
		s += ", " + version("parallel", "--version")
	}
	return s
}

// A locker runs a command under one of n permits of a key.
type locker struct {
	name string
	argv func(key string, n int, command []string) []string
}

// lockers are semrun with Redis, semrun --local, flock and GNU sem, those
// that are here and that can count to n; with topologies, semrun with a
// Redis Cluster and with Sentinel too.
func (b *bench) lockers(n int, topologies bool) []*locker {
	var ls []*locker
	semrun := func(bin, name string, store ...string) {
		ls = append(ls, &locker{name: name, argv: func(key string, n int, c []string) []string {
			argv := append(append([]string{bin}, store...), "-k", key, "-n", strconv.Itoa(n), "--")
			return append(argv, c...)
		}})
	}
	locks := filepath.Join(b.dir, "locks")
	for _, bin := range []string{b.semrun, b.o.compare} {
		name := "semrun"
		switch {
		case bin == "":
			continue
		case bin == b.o.compare:
			name = "semrun B"
		}
		if b.redis != nil {
			semrun(bin, name+" (Redis)", "--redis", b.redis.URL())
		}
		if topologies && len(b.cluster) > 0 {
			semrun(bin, name+" (Redis Cluster)", "--cluster", "--redis", b.cluster[0].URL())
		}
		if topologies && b.sentinel != nil {
			semrun(bin, name+" (Sentinel)", "--sentinel-master", sentinelMaster, "--redis", b.sentinel.URL())
		}
		semrun(bin, name+" --local", "--local", "--lock-dir", locks)
	}
	if b.flock && n == 1 {
		ls = append(ls, &locker{name: "flock", argv: func(key string, _ int, c []string) []string {
			return append([]string{"flock", filepath.Join(b.dir, "flock-"+key)}, c...)
		}})
	}
	if b.sem {
		ls = append(ls, &locker{name: "GNU sem", argv: func(key string, n int, c []string) []string {
			return append([]string{"sem", "--will-cite", "--fg", "--id", "semrun-bench-" + key, "-j", strconv.Itoa(n)}, c...)
		}})
	}
	return ls
}

func find(ls []*locker, name string) *locker {
	for _, l := range ls {
		if l.name == name {
			return l
		}
	}
	return nil
}

// key returns a key, and log path, used by nothing before.
func (b *bench) key(what string) (string, string) {
	b.seq++
	k := fmt.Sprintf("%s-%d", what, b.seq)
	return k, filepath.Join(b.dir, k+".log")
}

// childArgv is the child that records its run in log, holding for hold:
// a duration, or gate:PATH to hold until PATH exists.
func (b *bench) childArgv(log, hold string) []string {
	if d, err := time.ParseDuration(hold); err == nil {
		hold = strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	}
	return []string{b.child, log, hold}
}

// code shows a command line as code in markdown.
func (b *bench) code(s string) string {
	if b.o.markdown {
		return "`" + s + "`"
	}
	return s
}
