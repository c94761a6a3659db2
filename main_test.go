//go:build linux

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/cmd"
	"github.com/semrun/semrun/internal/redistest"
)

func TestMain(m *testing.M) {
	testscript.Main(scriptsAtOnce{m}, map[string]func(){
		"semrun": func() {
			f := cmd.System()
			// Scripts never read the host's system config file, only their own.
			f.SystemConfigFile = os.Getenv(envSystemConfig)
			// Nor look for Redis at the host's default address.
			if url := os.Getenv(envDefaultRedis); url != "" {
				f.DefaultRedisURL = url
			}
			os.Exit(cmd.Run(context.Background(), os.Args[1:], f))
		},
		"jobrec": jobrec,
	})
}

// scriptsAtOnce runs the tests with -parallel 8 unless -parallel is given:
// the scripts wait for processes, timeouts and leases far more than they
// compute, so the default (one per CPU) left a 2-CPU machine idle for most
// of their run.
type scriptsAtOnce struct{ m *testing.M }

func (s scriptsAtOnce) Run() int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "8")
	}
	return s.m.Run()
}

// TestScripts runs the end-to-end scripts in testdata/script against the
// real semrun binary, once with each store: real redis-server processes,
// and a lock directory in the script's work directory. Scripts say which
// store they need: [store] is true when this run's store is there, [redis]
// and [local] name the store of this run.
func TestScripts(t *testing.T) {
	startWithDefaultSignals()
	for _, store := range []string{"redis", "local"} {
		t.Run(store, func(t *testing.T) {
			// The stores' scripts share the -parallel slots: one store's
			// last long scripts leave none idle for the other's.
			t.Parallel()
			testscript.Run(t, testscript.Params{
				Dir:                 "testdata/script",
				RequireExplicitExec: true,
				RequireUniqueNames:  true,
				Setup: func(env *testscript.Env) error {
					// Scripts start their own redis-server and use it at once:
					// restart_fence.txtar is where the fence is tested.
					env.Setenv("SEMRUN_RESTART_FENCE", "0")
					// A program built with -race sleeps 1s before it exits, to
					// catch the races of goroutines still running: a second
					// more for each semrun a script runs, in which semrun has
					// released its permit and its command has ended. A GORACE
					// the tests were given still wins.
					env.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=0 "+os.Getenv("GORACE")))
					env.Setenv(envSystemConfig, filepath.Join(env.WorkDir, "etc", "semrun", "config.yaml"))
					env.Setenv(envDefaultRedis, "redis://127.0.0.1:1/0")
					if store == "local" {
						env.Setenv("SEMRUN_LOCAL", "true")
						env.Setenv("SEMRUN_LOCK_DIR", filepath.Join(env.WorkDir, "locks"))
					}
					env.Values[stateKey{}] = &scriptState{store: store, vars: slices.Clone(env.Vars), procs: map[string]*proc{}}
					// Keepers that semrun acquire left, detached from the
					// script, end with it.
					env.Defer(func() { killKeepers(env.WorkDir) })
					return nil
				},
				Condition: func(cond string) (bool, error) {
					// In CI a missing redis-server fails the script instead of skipping it.
					redisUp := redistest.Available() == nil || redistest.Required()
					switch cond {
					case "store":
						return store == "local" || redisUp, nil
					case "redis":
						return store == "redis" && redisUp, nil
					case "local":
						return store == "local", nil
					case "root":
						return os.Geteuid() == 0, nil
					}
					return false, fmt.Errorf("unknown condition %q", cond)
				},
				Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
					"store":      cmdStore,
					"redis":      cmdRedis,
					"proxy":      cmdProxy,
					"exits":      cmdExits,
					"start":      cmdStart,
					"signal":     cmdSignal,
					"await":      cmdAwait,
					"waitfile":   cmdWaitfile,
					"gone":       cmdGone,
					"overlap":    cmdOverlap,
					"pty":        cmdPty,
					"waitout":    cmdWaitout,
					"pidstate":   cmdPidstate,
					"ignoring":   cmdIgnoring,
					"jsonlog":    cmdJSONLog,
					"brokenpipe": cmdBrokenpipe,
					"zombies":    cmdZombies,
					"scrape":     cmdScrape,
				},
			})
		})
	}
}

// killKeepers kills the keepers semrun acquire started in the script whose
// work directory is work: those whose environment names it. It tells how
// many it found.
func killKeepers(work string) int {
	mark := []byte("\x00WORK=" + work + "\x00")
	dirs, _ := os.ReadDir("/proc")
	n := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(append([]byte{0}, env...), mark) && bytes.Equal(cmdline, []byte("semrun\x00keeper\x00")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// envDefaultRedis is where the semrun of the scripts looks for Redis when
// none is named: a port nothing listens on.
const envDefaultRedis = "SEMRUNTEST_DEFAULT_REDIS"

// envSystemConfig is where the semrun of the scripts finds the system
// config file (etc/semrun/config.yaml in the script's work directory),
// instead of /etc/semrun/config.yaml.
const envSystemConfig = "SEMRUNTEST_SYSTEM_CONFIG"

type stateKey struct{}

// scriptState is what the custom commands of one script share.
type scriptState struct {
	store string   // "redis" or "local"
	vars  []string // the script's environment at setup
	redis *redistest.Server
	proxy *redistest.Proxy
	// sentinels watch redis as the master "semrun", after redis sentinel.
	sentinels []string
	procs     map[string]*proc
}

func state(ts *testscript.TestScript) *scriptState { return ts.Value(stateKey{}).(*scriptState) }

// environ is the script's current environment, for processes started
// outside testscript's exec.
func (s *scriptState) environ(ts *testscript.TestScript) []string {
	names := append([]string{"REDIS_ADDR"}, semrunVariables()...)
	for _, kv := range s.vars {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	var env []string
	for _, name := range names {
		if v := ts.Getenv(name); v != "" && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// semrunVariables are the variables semrun reads, as its man page lists
// them: a script's env sets them for start as it does for exec.
var semrunVariables = sync.OnceValue(func() []string {
	var names []string
	for _, s := range cmd.ManSections(cmd.NewCmdRoot(cmd.System())) {
		if s.Title == "ENVIRONMENT" {
			for _, e := range s.Entries {
				names = append(names, e.Term)
			}
		}
	}
	return names
})

// jobrec LOG HOLD [N]: a child that appends its start and end, on the
// system-wide monotonic clock, and its fencing token, to LOG. With N, it
// holds on after HOLD until LOG shows that N jobs ran at once (for at most
// 30s): copies that start slowly on a loaded machine still overlap, and a
// semaphore that lets fewer than N run still fails overlap's check.
func jobrec() {
	if len(os.Args) < 3 || len(os.Args) > 4 {
		fmt.Fprintln(os.Stderr, "usage: jobrec LOG HOLD [N]")
		os.Exit(2)
	}
	hold, err := time.ParseDuration(os.Args[2])
	together := 0
	if err == nil && len(os.Args) == 4 {
		together, err = strconv.Atoi(os.Args[3])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobrec LOG HOLD [N]:", err)
		os.Exit(2)
	}
	// With JOBREC_KEY, the token is that key's, of several held.
	token := os.Getenv("SEMRUN_FENCING_TOKEN")
	if key := os.Getenv("JOBREC_KEY"); key != "" {
		token = ""
		for _, line := range strings.Split(os.Getenv("SEMRUN_FENCING_TOKENS"), "\n") {
			if i := strings.LastIndexByte(line, '='); i >= 0 && line[:i] == key {
				token = line[i+1:]
			}
		}
	}
	record := func(event string) {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		f, err := os.OpenFile(os.Args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(f, "%s %d %s\n", event, ts.Nano(), token)
		f.Close()
	}
	record("start")
	time.Sleep(hold)
	// The bound only keeps a broken semaphore from holding the script up.
	for deadline := time.Now().Add(30 * time.Second); together > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(os.Args[1]); err == nil && mostAtOnce(string(b)) >= together {
			break
		}
	}
	record("end")
}

// mostAtOnce is the most jobs of a jobrec log that ran at once, a job
// that has not ended running still. Lines still being written are left
// out.
func mostAtOnce(log string) int {
	type event struct {
		at    int64
		delta int
	}
	var events []event
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		d := 1
		if f[0] == "end" {
			d = -1
		}
		events = append(events, event{at, d})
	}
	// At equal times an end comes first: touching runs do not overlap.
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	running, most := 0, 0
	for _, e := range events {
		running += e.delta
		most = max(most, running)
	}
	return most
}

// store start: get this run's store ready: start a redis-server, or
// nothing for the lock directory Setup chose.
func cmdStore(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || args[0] != "start" {
		ts.Fatalf("usage: store start")
	}
	if state(ts).store == "redis" {
		cmdRedis(ts, false, args)
	}
}

// redis start: start a redis-server for this script and point
// SEMRUN_REDIS_URL at it; redis cluster and redis sentinel start a Redis
// Cluster or a master watched by sentinels instead.
// redis replicas N: start N replicas of the server, online.
// redis stop|kill|restart|pause|resume: control the server (the master).
// redis promoted: wait until the sentinels have promoted the replica.
// redis tls: start a TLS server instead, with certificates (see startTLS).
// redis COMMAND ARGS...: send one command and print its reply.
// proxy start|delay D|heal: start a proxy to the script's redis-server and
// point SEMRUN_REDIS_URL at it (REDIS_DIRECT_URL keeps the server's own);
// deliver each reply D late from now on; end the delay.
func cmdProxy(ts *testscript.TestScript, neg bool, args []string) {
	st := state(ts)
	switch {
	case neg || len(args) == 0:
		ts.Fatalf("usage: proxy start|delay D|heal")
	case args[0] == "start":
		if st.redis == nil {
			ts.Fatalf("proxy start: no server started")
		}
		p, err := redistest.StartProxy(st.redis.Addr, 1)
		ts.Check(err)
		ts.Defer(p.Close)
		st.proxy = p
		ts.Setenv("REDIS_DIRECT_URL", st.redis.URL())
		ts.Setenv("SEMRUN_REDIS_URL", p.URL())
	case st.proxy == nil:
		ts.Fatalf("proxy %s: no proxy started", args[0])
	case args[0] == "delay" && len(args) == 2:
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		st.proxy.Delay(d)
	case args[0] == "heal":
		st.proxy.Heal()
	default:
		ts.Fatalf("usage: proxy start|delay D|heal")
	}
}

// startFake starts a server that answers every script call with REPLY, a
// Go-quoted string of raw RESP, and PING with PONG: a hostile Redis.
func startFake(ts *testscript.TestScript, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: redis fake REPLY")
	}
	reply, err := strconv.Unquote(args[0])
	if err != nil {
		ts.Fatalf("redis fake: REPLY must be Go-quoted: %v", err)
	}
	f, err := redistest.StartFake(func(cmd string, _ []string) string {
		switch cmd {
		case "EVALSHA", "EVAL":
			return reply
		case "PING":
			return "+PONG\r\n"
		}
		return "-ERR fake\r\n"
	})
	ts.Check(err)
	ts.Defer(f.Close)
	ts.Setenv("SEMRUN_REDIS_URL", f.URL())
}

func cmdRedis(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: redis start|stop|kill|restart|pause|resume|COMMAND ARGS...")
	}
	st := state(ts)
	if args[0] == "start" {
		needRedis(ts)
		s, err := redistest.Start(ts.MkAbs("."))
		ts.Check(err)
		ts.Defer(s.Stop)
		st.redis = s
		ts.Setenv("SEMRUN_REDIS_URL", s.URL())
		ts.Setenv("REDIS_ADDR", s.Addr)
		return
	}
	switch args[0] {
	case "cluster":
		startCluster(ts)
		return
	case "sentinel":
		startSentinel(ts)
		return
	case "promoted":
		awaitPromotion(ts)
		return
	case "tls":
		startTLS(ts)
		return
	case "fake":
		startFake(ts, args[1:])
		return
	}
	if st.redis == nil {
		ts.Fatalf("redis %s: no server started", args[0])
	}
	switch args[0] {
	case "replicas":
		n, err := strconv.Atoi(args[len(args)-1])
		if len(args) != 2 || err != nil || n < 1 {
			ts.Fatalf("usage: redis replicas N")
		}
		startReplicas(ts, st.redis, n)
	case "stop":
		st.redis.Stop()
	case "kill":
		st.redis.Kill()
	case "restart":
		ts.Check(st.redis.Restart())
	case "pause":
		ts.Check(st.redis.Pause())
	case "resume":
		ts.Check(st.redis.Resume())
	default:
		c := redis.NewClient(&redis.Options{Addr: st.redis.Addr, Protocol: 2, DisableIdentity: true})
		defer c.Close()
		cmdArgs := make([]any, len(args))
		for i, a := range args {
			cmdArgs[i] = a
		}
		v, err := c.Do(context.Background(), cmdArgs...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if !neg {
				ts.Fatalf("redis %s: %v", strings.Join(args, " "), err)
			}
			return
		}
		if neg {
			ts.Fatalf("redis %s: unexpected success", strings.Join(args, " "))
		}
		fmt.Fprintln(ts.Stdout(), formatReply(v))
	}
}

// startCluster starts a Redis Cluster of 3 masters, each with a replica,
// and points semrun at it: SEMRUN_CLUSTER, and two seeds in the URL.
func startCluster(ts *testscript.TestScript) {
	needRedis(ts)
	nodes, err := redistest.StartCluster(ts.MkAbs("."), 3, 1)
	ts.Check(err)
	for _, s := range nodes {
		ts.Defer(s.Stop)
	}
	ts.Setenv("SEMRUN_REDIS_URL", "redis://"+nodes[0].Addr+"/0?addr="+nodes[1].Addr)
	ts.Setenv("SEMRUN_CLUSTER", "true")
}

// startReplicas starts n replicas of master and waits (at most 30s) until
// the master counts them all online.
func startReplicas(ts *testscript.TestScript, master *redistest.Server, n int) {
	ctx := context.Background()
	host, port, _ := strings.Cut(master.Addr, ":")
	for range n {
		replica, err := redistest.Start(ts.MkAbs("."))
		ts.Check(err)
		ts.Defer(replica.Stop)
		c := redis.NewClient(&redis.Options{Addr: replica.Addr, Protocol: 2, DisableIdentity: true})
		err = c.Do(ctx, "REPLICAOF", host, port).Err()
		c.Close()
		ts.Check(err)
	}
	c := redis.NewClient(&redis.Options{Addr: master.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	waitFor(ts, 30*time.Second, fmt.Sprintf("redis replicas: %d replicas online", n), func() (bool, string) {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r", n)) && strings.Count(info, "state=online") == n, fmt.Sprint(err, info)
	})
}

// startSentinel starts a master, its replica and three sentinels that
// watch it under the name "semrun", and points semrun at the sentinels.
// Later redis commands (kill, ...) act on the master.
func startSentinel(ts *testscript.TestScript) {
	needRedis(ts)
	dir := ts.MkAbs(".")
	master, err := redistest.Start(dir)
	ts.Check(err)
	ts.Defer(master.Stop)
	replica, err := redistest.Start(dir)
	ts.Check(err)
	ts.Defer(replica.Stop)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: replica.Addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	host, port, _ := strings.Cut(master.Addr, ":")
	ts.Check(c.Do(ctx, "REPLICAOF", host, port).Err())
	// The sentinels learn of the replica from the master once it is in sync.
	waitFor(ts, 30*time.Second, "redis sentinel: the replica in sync", func() (bool, string) {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), fmt.Sprint(err, info)
	})
	var addrs []string
	for range 3 {
		s, err := redistest.StartSentinel(dir, "semrun", master.Addr, 2)
		ts.Check(err)
		ts.Defer(s.Stop)
		addrs = append(addrs, s.Addr)
	}
	// A failover needs sentinels that know the replica and each other.
	for _, addr := range addrs {
		sc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
		defer sc.Close()
		waitFor(ts, 30*time.Second, "redis sentinel: sentinel "+addr+" knows the replica and the other sentinels", func() (bool, string) {
			info, err := sc.Info(ctx, "sentinel").Result()
			return err == nil && strings.Contains(info, "slaves=1,sentinels=3"), fmt.Sprint(err, info)
		})
	}
	state(ts).redis = master
	state(ts).sentinels = addrs
	ts.Setenv("SEMRUN_REDIS_URL", "redis://"+addrs[0]+"/0?addr="+addrs[1]+"&addr="+addrs[2])
	ts.Setenv("SEMRUN_SENTINEL_MASTER", "semrun")
}

// startTLS writes a CA, a server and a client certificate signed by it,
// and another CA, to the script's directory (ca.pem, server.pem,
// client.pem, each with its NAME-key.pem, other-ca.pem), starts a
// TLS-only redis-server that requires a client certificate, and points
// SEMRUN_REDIS_URL at it (rediss://).
func startTLS(ts *testscript.TestScript) {
	needRedis(ts)
	p, err := redistest.WritePKI(ts.MkAbs("."))
	ts.Check(err)
	s, err := redistest.StartTLS(ts.MkAbs("."), p.TLSFiles(true))
	ts.Check(err)
	ts.Defer(s.Stop)
	state(ts).redis = s
	ts.Setenv("SEMRUN_REDIS_URL", s.URL())
}

// awaitPromotion waits until the sentinels name another master than the
// one redis sentinel started.
func awaitPromotion(ts *testscript.TestScript) {
	st := state(ts)
	if len(st.sentinels) == 0 {
		ts.Fatalf("redis promoted: no sentinels started")
	}
	c := redis.NewSentinelClient(&redis.Options{Addr: st.sentinels[0], Protocol: 2, DisableIdentity: true})
	defer c.Close()
	waitFor(ts, 60*time.Second, "redis promoted: the sentinels name another master", func() (bool, string) {
		addr, err := c.GetMasterAddrByName(context.Background(), "semrun").Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] != st.redis.Addr, fmt.Sprint("they name ", addr, err)
	})
}

// needRedis fails the script without redis-server.
func needRedis(ts *testscript.TestScript) {
	if err := redistest.Available(); err != nil {
		ts.Fatalf("redis-server is required: %v", err)
	}
}

// waitFor polls ok until it says so, and fails the script with "what not
// true within patience" and what ok saw once patience has passed. The
// patience only catches a hang: it is no assertion about speed.
func waitFor(ts *testscript.TestScript, patience time.Duration, what string, ok func() (bool, string)) {
	for deadline := time.Now().Add(patience); ; time.Sleep(10 * time.Millisecond) {
		done, saw := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s not true within %v: %s", what, patience, saw)
		}
	}
}

// endedWithin waits at most patience for a process to end, as done tells,
// and fails the script with what it showed (show) if it has not.
func endedWithin(ts *testscript.TestScript, patience time.Duration, done <-chan error, what string, show func() string) error {
	select {
	case err := <-done:
		return err
	case <-time.After(patience):
		ts.Fatalf("%s still runs after %v%s", what, patience, show())
		return nil
	}
}

func formatReply(v any) string {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, e := range list {
			parts[i] = formatReply(e)
		}
		return strings.Join(parts, "\n")
	}
	return fmt.Sprint(v)
}

// checkStatus compares how a process ended with want: an exit status, or
// a signal name such as SIGTERM for a death by that signal.
func checkStatus(ts *testscript.TestScript, what string, err error, want string) {
	got := "0"
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		ws := exitErr.Sys().(syscall.WaitStatus)
		got = strconv.Itoa(ws.ExitStatus())
		if ws.Signaled() {
			got = unix.SignalName(ws.Signal())
			if ws.CoreDump() {
				got += "+core"
			}
		}
	} else if err != nil {
		ts.Fatalf("%s: %v", what, err)
	}
	if got != want {
		ts.Fatalf("%s: got status %s, want %s", what, got, want)
	}
}

// exits WANT CMD ARGS...: run CMD and check how it ended (see checkStatus).
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits STATUS|SIGNAME CMD ARGS...")
	}
	checkStatus(ts, args[1], ts.Exec(args[1], args[2:]...), args[0])
}

// proc is a process started in the background by start.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan error
}

// lookPath finds a program on the script's PATH, which the test's lacks.
func lookPath(ts *testscript.TestScript, name string) string {
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return name
}

// start NAME CMD ARGS...: start CMD in the background, named NAME.
func cmdStart(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: start NAME CMD ARGS...")
	}
	st := state(ts)
	if st.procs[args[0]] != nil {
		ts.Fatalf("start: %s already started", args[0])
	}
	p := &proc{cmd: exec.Command(lookPath(ts, args[1]), args[2:]...), done: make(chan error, 1)}
	p.cmd.Dir = ts.MkAbs(".")
	p.cmd.Env = st.environ(ts)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A grandchild left behind must not keep the output pipes, and us, waiting.
	p.cmd.WaitDelay = time.Second
	ts.Check(p.cmd.Start())
	st.procs[args[0]] = p
	go func() { p.done <- p.cmd.Wait() }()
	ts.Defer(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
}

// started is the process start named name.
func started(ts *testscript.TestScript, cmd, name string) *proc {
	p := state(ts).procs[name]
	if p == nil {
		ts.Fatalf("%s: no process %s", cmd, name)
	}
	return p
}

// signal NAME SIG: send SIG (TERM, HUP, KILL...) to a started process.
func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: signal NAME SIG")
	}
	p := started(ts, "signal", args[0])
	sig := unix.SignalNum("SIG" + strings.TrimPrefix(args[1], "SIG"))
	if n, err := strconv.Atoi(args[1]); err == nil {
		sig = syscall.Signal(n) // a real-time signal, say
	}
	if sig == 0 {
		ts.Fatalf("signal: unknown signal %s", args[1])
	}
	ts.Check(p.cmd.Process.Signal(sig))
}

// await NAME WANT: wait (at most 60s) for a started process to end, check
// how it ended, and make its output what stdout and stderr match next.
func cmdAwait(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: await NAME STATUS|SIGNAME")
	}
	p := started(ts, "await", args[0])
	err := endedWithin(ts, 60*time.Second, p.done, "await: "+args[0], func() string {
		return "; its stderr:\n" + p.stderr.String()
	})
	p.done <- err
	fmt.Fprint(ts.Stdout(), p.stdout.String())
	fmt.Fprint(ts.Stderr(), p.stderr.String())
	checkStatus(ts, args[0], err, args[1])
}

// waitfile FILE...: wait (at most 60s, a hang bound) until each file exists.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: waitfile FILE...")
	}
	waitFor(ts, 60*time.Second, fmt.Sprintf("waitfile: %q all exist", args), func() (bool, string) {
		for _, f := range args {
			if _, err := os.Stat(ts.MkAbs(f)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

// gone PIDFILE TIMEOUT: check that the process whose pid is in PIDFILE
// ends within TIMEOUT.
func cmdGone(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gone PIDFILE TIMEOUT")
	}
	pid := readPid(ts, args[0])
	limit, err := time.ParseDuration(args[1])
	ts.Check(err)
	waitFor(ts, limit, fmt.Sprintf("gone: process %d ended", pid), func() (bool, string) {
		return !alive(pid), "it still runs"
	})
}

// readPid reads the pid a script's child wrote to file: a shell's
// `echo $$ > file` makes the file before it writes, so an empty or partly
// written one is read again.
func readPid(ts *testscript.TestScript, file string) int {
	var pid int
	waitFor(ts, 10*time.Second, fmt.Sprintf("readPid: %s holds a pid", file), func() (bool, string) {
		text := ts.ReadFile(file)
		var err error
		pid, err = strconv.Atoi(strings.TrimSpace(text))
		return err == nil && strings.HasSuffix(text, "\n"), fmt.Sprintf("%q", text)
	})
	return pid
}

// alive tells whether pid runs; a zombie no longer does, whoever is to
// reap it.
func alive(pid int) bool {
	if unix.Kill(pid, 0) != nil {
		return false
	}
	// Without /proc the state is unknown: trust kill.
	return !strings.HasPrefix(procStatus(pid, "State"), "Z")
}

// procStatus is a line of /proc/PID/status, e.g. SigCgt.
func procStatus(pid int, field string) string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitout [-stdout] NAME REGEXP: wait (at most 30s) until the started
// process has written a line matching REGEXP on stderr (or stdout).
func cmdWaitout(ts *testscript.TestScript, neg bool, args []string) {
	stream := "stderr"
	if len(args) > 0 && args[0] == "-stdout" {
		stream, args = "stdout", args[1:]
	}
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitout [-stdout] NAME REGEXP")
	}
	p := started(ts, "waitout", args[0])
	out := &p.stderr
	if stream == "stdout" {
		out = &p.stdout
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	waitFor(ts, 30*time.Second, fmt.Sprintf("waitout: a line matching %q on the %s of %s", args[1], stream, args[0]), func() (bool, string) {
		text := out.String()
		return re.MatchString(text), stream + ":\n" + text
	})
}

// scrape NAME: GET the metrics that semrun metrics --listen, started as
// NAME, serves at the address its stderr names (waiting at most 30s for
// that line), check the answer is 200, and print it on stdout.
func cmdScrape(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: scrape NAME")
	}
	p := started(ts, "scrape", args[0])
	serving := regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)
	var url string
	waitFor(ts, 30*time.Second, "scrape: "+args[0]+" says where it serves metrics", func() (bool, string) {
		if m := serving.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
		}
		return url != "", "stderr:\n" + p.stderr.String()
	})
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
	ts.Check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	ts.Check(err)
	if resp.StatusCode != http.StatusOK {
		ts.Fatalf("scrape: GET %s: %s\n%s", url, resp.Status, body)
	}
	fmt.Fprint(ts.Stdout(), string(body))
}

// pidstate PIDFILE|NAME STATE: wait (at most 10s) until the process whose pid is
// in PIDFILE, or the one start started as NAME, is in STATE, a letter of
// /proc/PID/status: T for stopped.
func cmdPidstate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: pidstate PIDFILE|NAME STATE")
	}
	var pid int
	if p, ok := state(ts).procs[args[0]]; ok {
		pid = p.cmd.Process.Pid // a process start started
	} else {
		pid = readPid(ts, args[0])
	}
	waitFor(ts, 10*time.Second, fmt.Sprintf("pidstate: process %d in state %s", pid, args[1]), func() (bool, string) {
		state := procStatus(pid, "State")
		return strings.HasPrefix(state, args[1]), fmt.Sprintf("its state is %q", state)
	})
}

// zombies NAME N: wait (at most 10s) until the process start started as
// NAME has at most N children that have exited and not been reaped.
func cmdZombies(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: zombies NAME N")
	}
	pid := started(ts, "zombies", args[0]).cmd.Process.Pid
	most, err := strconv.Atoi(args[1])
	ts.Check(err)
	waitFor(ts, 10*time.Second, fmt.Sprintf("zombies: process %d has at most %d zombie children", pid, most), func() (bool, string) {
		z := zombieChildren(ts, pid)
		return len(z) <= most, fmt.Sprintf("it has %d: %v", len(z), z)
	})
}

// zombieChildren lists the children of pid that have exited and not been
// reaped, from /proc.
func zombieChildren(ts *testscript.TestScript, pid int) []int {
	entries, err := os.ReadDir("/proc")
	ts.Check(err)
	var zombies []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if procStatus(child, "PPid") == strconv.Itoa(pid) && strings.HasPrefix(procStatus(child, "State"), "Z") {
			zombies = append(zombies, child)
		}
	}
	return zombies
}

// ignoring NAME SIG: wait (at most 10s) until the process start started as
// NAME ignores signal number SIG (SigIgn of /proc/PID/status).
func cmdIgnoring(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: ignoring NAME SIG")
	}
	pid := started(ts, "ignoring", args[0]).cmd.Process.Pid
	sig, err := strconv.Atoi(args[1])
	if err != nil || sig < 1 || sig > 64 {
		ts.Fatalf("ignoring: bad signal number %q", args[1])
	}
	waitFor(ts, 10*time.Second, fmt.Sprintf("ignoring: process %d ignores signal %d", pid, sig), func() (bool, string) {
		mask, err := strconv.ParseUint(procStatus(pid, "SigIgn"), 16, 64)
		return err == nil && mask&(1<<(sig-1)) != 0, fmt.Sprintf("its ignored set is %#x", mask)
	})
}

// overlap LOG N: from jobrec's LOG, check that at most N jobs ran at once
// and that N did at some point; fencing tokens are unique, and rise with
// every start when N is 1.
func cmdOverlap(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: overlap LOG N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	type event struct {
		at    int64
		delta int
		token int64
	}
	var events []event
	sc := bufio.NewScanner(strings.NewReader(ts.ReadFile(args[0])))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			ts.Fatalf("overlap: malformed line %q", sc.Text())
		}
		at, err := strconv.ParseInt(f[1], 10, 64)
		ts.Check(err)
		token, err := strconv.ParseInt(f[2], 10, 64)
		ts.Check(err)
		d := 1
		if f[0] == "end" {
			d = -1
		}
		events = append(events, event{at, d, token})
	}
	// At equal times an end comes first: touching runs do not overlap.
	slices.SortFunc(events, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta
	})
	running, most, starts := 0, 0, 0
	var lastToken int64
	seen := map[int64]bool{}
	for _, e := range events {
		running += e.delta
		most = max(most, running)
		if e.delta != 1 {
			continue
		}
		starts++
		if seen[e.token] {
			ts.Fatalf("overlap: fencing token %d handed out twice", e.token)
		}
		seen[e.token] = true
		// One at a time, jobs start in the order of their grants.
		if want == 1 && e.token <= lastToken {
			ts.Fatalf("overlap: fencing token %d after %d", e.token, lastToken)
		}
		lastToken = e.token
	}
	if most != want {
		ts.Fatalf("overlap: got at most %d jobs at once, want %d", most, want)
	}
	fmt.Fprintf(ts.Stdout(), "%d jobs, at most %d at once\n", starts, most)
}

// lockedBuffer is a buffer one goroutine writes while another reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pty STEPS CMD ARGS...: run CMD as the leader of a new session whose
// controlling terminal is a new pseudo-terminal, in its foreground as a
// login shell would be; play the lines of file STEPS ("wait FILE" until it
// exists, "send TEXT" typed with Go string escapes such as \x03 for
// Ctrl-C, "sleep DURATION"); wait for CMD to exit 0, and print what the
// terminal showed.
func cmdPty(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: pty STEPS CMD ARGS...")
	}
	steps := strings.Split(strings.TrimSpace(ts.ReadFile(args[0])), "\n")
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	ts.Check(err)
	defer master.Close()
	ts.Check(unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	ts.Check(err)
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	ts.Check(err)

	c := exec.Command(lookPath(ts, args[1]), args[2:]...)
	c.Dir = ts.MkAbs(".")
	c.Env = state(ts).environ(ts)
	c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = c.Start()
	tty.Close()
	ts.Check(err)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	ts.Defer(func() { _ = c.Process.Kill() })

	var screen lockedBuffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&screen, master) // ends with EIO once the terminal's last user is gone
		close(copied)
	}()
	for _, step := range steps {
		verb, arg, _ := strings.Cut(step, " ")
		switch verb {
		case "":
		case "wait":
			waitFor(ts, 20*time.Second, "pty: "+arg+" exists", func() (bool, string) {
				_, err := os.Stat(ts.MkAbs(arg))
				return err == nil, "the terminal showed:\n" + screen.String()
			})
		case "send":
			text, err := strconv.Unquote(`"` + strings.ReplaceAll(arg, `"`, `\"`) + `"`)
			ts.Check(err)
			_, err = master.Write([]byte(text))
			ts.Check(err)
		case "sleep":
			d, err := time.ParseDuration(arg)
			ts.Check(err)
			time.Sleep(d)
		default:
			ts.Fatalf("pty: unknown step %q", step)
		}
	}
	err = endedWithin(ts, 20*time.Second, done, "pty: "+args[1], func() string {
		return "; the terminal showed:\n" + screen.String()
	})
	select {
	case <-copied:
	case <-time.After(time.Second):
	}
	fmt.Fprint(ts.Stdout(), strings.ReplaceAll(screen.String(), "\r\n", "\n"))
	if (err != nil) != neg {
		ts.Fatalf("pty: %s ended with %v", args[1], err)
	}
}

// jsonlog [-count=N] FIELD=VALUE|FIELD~REGEXP...: check that every line of
// the last command's stderr is a JSON object with a time, a level and a msg,
// and that some line (exactly N lines with -count) has every given field
// equal to VALUE, or matching REGEXP; with !, that none has.
func cmdJSONLog(ts *testscript.TestScript, neg bool, args []string) {
	want := -1
	if len(args) > 0 && strings.HasPrefix(args[0], "-count=") {
		n, err := strconv.Atoi(strings.TrimPrefix(args[0], "-count="))
		ts.Check(err)
		want, args = n, args[1:]
	}
	if neg && want >= 0 {
		ts.Fatalf("usage: ! jsonlog takes no -count")
	}
	type match struct {
		field string
		equal string
		re    *regexp.Regexp
	}
	var matches []match
	for _, a := range args {
		i := strings.IndexAny(a, "=~")
		if i < 1 {
			ts.Fatalf("usage: jsonlog [-count=N] FIELD=VALUE|FIELD~REGEXP...")
		}
		m := match{field: a[:i], equal: a[i+1:]}
		if a[i] == '~' {
			re, err := regexp.Compile(a[i+1:])
			ts.Check(err)
			m.re = re
		}
		matches = append(matches, m)
	}
	got := 0
	for _, line := range strings.Split(strings.TrimSuffix(ts.ReadFile("stderr"), "\n"), "\n") {
		if line == "" {
			continue
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			ts.Fatalf("jsonlog: stderr line %q is not a JSON object: %v", line, err)
		}
		for _, f := range []string{"time", "level", "msg"} {
			if _, ok := obj[f].(string); !ok {
				ts.Fatalf("jsonlog: stderr line %q has no %s", line, f)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, obj["time"].(string)); err != nil {
			ts.Fatalf("jsonlog: stderr line %q: time: %v", line, err)
		}
		all := true
		for _, m := range matches {
			v, ok := obj[m.field]
			s := fmt.Sprint(v)
			all = all && ok && (m.re == nil && s == m.equal || m.re != nil && m.re.MatchString(s))
		}
		if all {
			got++
		}
	}
	switch {
	case neg && got > 0:
		ts.Fatalf("jsonlog: %d stderr lines match %q, want none", got, args)
	case !neg && want < 0 && got == 0:
		ts.Fatalf("jsonlog: no stderr line matches %q", args)
	case want >= 0 && got != want:
		ts.Fatalf("jsonlog: got %d stderr lines matching %q, want %d", got, args, want)
	}
}

// startWithDefaultSignals makes the processes scripts start begin with
// SIGINT and SIGHUP at their default, even when the tests themselves run
// with them ignored (a background job of a non-interactive shell): semrun
// keeps an ignored one, which the scripts test on purpose (nohup, sh -c
// "... &"). Asking for them does that; the tests still end on one as they
// would have.
func startWithDefaultSignals() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		sig := <-c
		signal.Reset(sig.(syscall.Signal))
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

// brokenpipe CMD ARGS...: run CMD with its stdout and stderr a pipe whose
// reading end is closed before it starts, and say how it ended on stdout,
// as "status N" or "signal NAME".
func cmdBrokenpipe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: brokenpipe CMD ARGS...")
	}
	r, w, err := os.Pipe()
	ts.Check(err)
	ts.Check(r.Close())
	c := exec.Command(lookPath(ts, args[0]), args[1:]...)
	c.Dir, c.Env = ts.MkAbs("."), state(ts).environ(ts)
	c.Stdout, c.Stderr = w, w
	err = c.Start()
	w.Close()
	ts.Check(err)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	ts.Defer(func() { _ = c.Process.Kill() })
	err = endedWithin(ts, 60*time.Second, done, "brokenpipe: "+args[0], func() string { return "" })
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr) && exitErr.Sys().(syscall.WaitStatus).Signaled():
		fmt.Fprintf(ts.Stdout(), "signal %s\n", unix.SignalName(exitErr.Sys().(syscall.WaitStatus).Signal()))
	case errors.As(err, &exitErr):
		fmt.Fprintf(ts.Stdout(), "status %d\n", exitErr.ExitCode())
	case err != nil:
		ts.Fatalf("brokenpipe: %v", err)
	default:
		fmt.Fprintln(ts.Stdout(), "status 0")
	}
}

// TestCommandCannotReadSemrunsSecrets: the command, run as the same
// user, cannot read the password semrun was given through
// /proc/$PPID/environ (semrun makes itself non-dumpable). As root, since
// root may read any process's; the two run as another user.
func TestCommandCannotReadSemrunsSecrets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("about /proc")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root")
		}
		t.Skip("needs root to run semrun as another user")
	}
	dir, err := os.MkdirTemp("", "semrun-proc-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "semrun") // testscript.Main runs cmd.Main under this name
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-in-the-environment"
	// The bound only catches a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, bin, "-k", "proc", "--", "sh", "-c", `cat /proc/$PPID/environ; echo " cat: $?"`)
	c.WaitDelay = time.Second
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SEMRUN_LOCAL=true", "SEMRUN_LOCK_DIR=" + filepath.Join(dir, "locks"), "SEMRUN_REDIS_PASSWORD=" + secret}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("semrun as uid 65534: %v (%s)", err, out)
	}
	if strings.Contains(string(out), secret) || !strings.Contains(string(out), "cat: 1") {
		t.Errorf("the command reading /proc/$PPID/environ: got %q, want it refused, without the password", out)
	}
}
