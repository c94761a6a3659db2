//go:build unix

// The action under attack: text it does not control (a key, a reason an
// operator or whoever can write to Redis gave, what semrun prints) as the
// runner reads the step's output, secrets in the processes it leaves, and
// the runner's ways of ending a step.
package action_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// command is a workflow command the runner acted on.
type command struct {
	name  string
	props map[string]string
	data  string
}

// runnerCommands are the commands the runner knows (ActionCommandManager's
// extensions); a line naming any other is output.
var runnerCommands = map[string]bool{
	"add-mask": true, "warning": true, "error": true, "notice": true, "debug": true,
	"group": true, "endgroup": true, "echo": true, "set-output": true, "save-state": true,
	"set-env": true, "add-path": true, "add-matcher": true, "remove-matcher": true,
	"stop-commands": true,
}

// runnerLog reads a step's output as the runner does (actions/runner,
// ActionCommand.TryParseV2 and TryParse, ActionCommandManager): a line is
// a command when, leading spaces trimmed, it is ::NAME PROPS::DATA, or
// when it holds ##[NAME PROPS]DATA anywhere; stop-commands::TOKEN makes
// every line output until ::TOKEN::. It returns the commands acted on and
// the lines the log shows, each masked with the masks added before it.
func runnerLog(out string) (cmds []command, shown []string) {
	var masks []string
	stopToken := ""
	show := func(line string) {
		for _, m := range masks {
			line = strings.ReplaceAll(line, m, "***")
		}
		shown = append(shown, line)
	}
	for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
		c, ok := parseCommand(line, stopToken)
		if !ok {
			show(line)
			continue
		}
		if stopToken != "" {
			if strings.EqualFold(c.name, stopToken) {
				stopToken = ""
			} else {
				show(line)
			}
			continue
		}
		switch c.name {
		case "stop-commands":
			stopToken = c.data
			show(line)
		case "add-mask":
			if strings.TrimSpace(c.data) != "" {
				masks = append(masks, c.data)
			}
		}
		cmds = append(cmds, c)
	}
	return cmds, shown
}

func parseCommand(line, stopToken string) (command, bool) {
	known := func(name string) bool {
		return runnerCommands[strings.ToLower(name)] || stopToken != "" && strings.EqualFold(name, stopToken)
	}
	// v2: ::NAME k=v,k=v::DATA, after leading spaces.
	if s := strings.TrimLeft(line, " \t"); strings.HasPrefix(s, "::") {
		if end := strings.Index(s[2:], "::"); end >= 0 {
			info := s[2 : 2+end]
			name, props, _ := strings.Cut(info, " ")
			if known(name) {
				c := command{name: name, props: map[string]string{}, data: unescapeData(s[2+end+2:])}
				for _, p := range strings.Split(props, ",") {
					if k, v, ok := strings.Cut(p, "="); ok && k != "" && v != "" {
						c.props[k] = unescape(v)
					}
				}
				return c, true
			}
		}
	}
	// v1: ##[NAME k=v;k=v]DATA, anywhere in the line.
	if i := strings.Index(line, "##["); i >= 0 {
		if end := strings.Index(line[i:], "]"); end >= 0 {
			info := line[i+3 : i+end]
			name, _, _ := strings.Cut(info, " ")
			if known(name) {
				return command{name: name, props: map[string]string{}, data: line[i+end+1:]}, true
			}
		}
	}
	return command{}, false
}

// TestKeyCannotStopTheHandlesMask: semrun names the key in what it says
// before the grant (here, that the key's stored capacity wins over the
// one asked), which the action copies to the log before it masks the
// handle. The runner reads a ##[ command anywhere in a line: a key holding
// ##[stop-commands]TOKEN turns the mask that follows into plain output,
// and the handle is in the log.
func TestKeyCannotStopTheHandlesMask(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	key := "deploy ##[stop-commands]gotcha"
	if _, err := j.semrun("key", "set", key, "--permits", "2"); err != nil {
		t.Fatal(err)
	}
	inputs := map[string]string{"key": key, "permits": "1", "redis-url": srv.URL()}
	main := j.hold(inputs, nil)
	out := main.merged
	handle := main.state["handle"]
	if handle == "" {
		t.Fatalf("main saved no handle: %v", main)
	}
	if !strings.Contains(out, "##[stop-commands]gotcha\"") || strings.Index(out, "gotcha") > strings.Index(out, "::add-mask::") {
		t.Fatalf("semrun named the key before the mask in nothing it said, so this test shows nothing:\n%s", out)
	}
	cmds, shown := runnerLog(out)
	for _, line := range shown {
		if strings.Contains(line, handle) {
			t.Errorf("the log shows the handle: %q\noutput:\n%s", line, out)
		}
	}
	masked := false
	for _, c := range cmds {
		masked = masked || c.name == "add-mask" && c.data == handle
	}
	if !masked {
		t.Errorf("the runner never acted on the handle's mask; commands %+v", cmds)
	}
	if post := j.action("post.js", inputs, nil, main.state); post.code != 0 {
		t.Errorf("post: %v", post)
	}
}

// TestReasonCannotForgeAnAnnotation: the reason of a revoke is whatever
// the operator (or whoever can write to Redis) wrote; semrun release says
// it, and the post step copies that to the log. It must not become a
// command of its own: here an error annotation, and a stop that would
// swallow the post step's warning.
func TestReasonCannotForgeAnAnnotation(t *testing.T) {
	t.Parallel()
	for _, reason := range []string{"##[error title=semrun]the deploy failed: forged", "upkeep ##[stop-commands]quiet"} {
		post := holdThenEnd(t, "forged", map[string]string{}, func(j *job, st keyStatus) {
			if _, err := j.semrun("key", "revoke", "forged", "--holder", st.Holders[0].ID, "--reason", reason); err != nil {
				t.Fatal(err)
			}
		})
		warnings, others := post.annotations("warning"), append(post.annotations("error"), post.annotations("notice")...)
		if len(warnings) != 1 || !strings.HasPrefix(warnings[0], `semrun: an operator revoked the permit of key "forged": `) || len(others) != 0 {
			t.Errorf("reason %q: the runner would annotate warnings %q and %q, want only the post step's warning\noutput:\n%s", reason, warnings, others, post.merged)
		}
	}
}

// TestKeeperHasNoRunnerToken: the runner gives a node action, and no run
// step, the token of the Actions runtime (caches, artifacts). The keeper
// that acquire leaves lives on through the job's later steps, whose
// processes may read its environment: it must not carry that token, nor
// the OIDC request token, neither of which semrun uses.
func TestKeeperHasNoRunnerToken(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc to read a process's environment from")
	}
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	runner := map[string]string{
		"ACTIONS_RUNTIME_URL":            "https://pipelines.example/",
		"ACTIONS_RUNTIME_TOKEN":          "runtime-token-secret",
		"ACTIONS_CACHE_URL":              "https://cache.example/",
		"ACTIONS_RESULTS_URL":            "https://results.example/",
		"ACTIONS_ID_TOKEN_REQUEST_URL":   "https://oidc.example/",
		"ACTIONS_ID_TOKEN_REQUEST_TOKEN": "id-token-secret",
	}
	inputs := map[string]string{"key": "tokens", "redis-url": srv.URL()}
	main := j.hold(inputs, runner)
	st := j.status("tokens")
	if len(st.Holders) != 1 || st.Holders[0].PID <= 0 {
		t.Fatalf("status: want one hold with its keeper's pid: %+v", st)
	}
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.Holders[0].PID), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if strings.Contains(kv, "token-secret") {
			name, _, _ := strings.Cut(kv, "=")
			t.Errorf("the keeper's environment has the runner's %s", name)
		}
	}
	if post := j.action("post.js", inputs, runner, main.state); post.code != 0 {
		t.Errorf("post: %v", post)
	}
}

// TestAHungSemrunOnPathIsBounded: with a version asked for, main asks the
// semrun on PATH its version. One that never answers, ignores SIGTERM and
// leaves a process holding its output (a stale wrapper script, say) must
// not hold the step until the job's timeout: main goes on to install the
// release (here from a server that is not there, which fails the step).
func TestAHungSemrunOnPathIsBounded(t *testing.T) {
	t.Parallel()
	j := newJob(t, "", false)
	stale := filepath.Join(j.dir, "stale")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ntrap '' TERM\nsleep 300\n"
	if err := os.WriteFile(filepath.Join(stale, "semrun"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	j.path = append(j.path, stale)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "http://" + l.Addr().String() + "/releases"
	l.Close()
	main := j.action("main.js", map[string]string{"key": "hung", "local": "true", "release-url": nowhere, "version": version}, nil, nil)
	errs := main.annotations("error")
	if main.code == 0 || len(errs) != 1 || !strings.Contains(errs[0], nowhere+"/download/v"+version) {
		t.Errorf("main with a semrun on PATH that never says its version: want it to go on to the download, and fail there: %q\n%v", errs, main)
	}
}

// TestTwoUsesInOneJob: the docs say two uses of the action in one job
// hold two keys, each post step giving back its own, the later post first.
func TestTwoUsesInOneJob(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	in1 := map[string]string{"key": "first", "redis-url": srv.URL()}
	in2 := map[string]string{"key": "second", "redis-url": srv.URL()}
	m1 := j.hold(in1, nil)
	m2 := j.hold(in2, nil)
	step := j.run(`semrun --handle @SEMRUN_HANDLE -- sh -c 'echo "$SEMRUN_HELD_KEY"'`, nil)
	if step.code != 0 || strings.TrimSpace(step.stdout) != "second" {
		t.Errorf("a step under the later hold: %v", step)
	}
	for _, p := range []struct {
		inputs, state map[string]string
		key           string
	}{{in2, m2.state, "second"}, {in1, m1.state, "first"}} {
		post := j.action("post.js", p.inputs, nil, p.state)
		if post.code != 0 || !strings.Contains(post.stdout, `gave the permit of key "`+p.key+`" back`) || len(post.annotations("warning")) != 0 {
			t.Errorf("post of %s: %v", p.key, post)
		}
		if st := j.status(p.key); st.Held != 0 {
			t.Errorf("status of %s after its post: %+v", p.key, st)
		}
	}
}

// TestCancelAroundTheGrant: the runner's SIGINT reaches main at moments
// around its grant, which comes as the holder before it lets go (its post
// step started that long before). Whatever the moment, either main saved the handle and
// its post step gives the permit back, or nothing is held and nobody
// waits: no permit is left with no one to give it back.
func TestCancelAroundTheGrant(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	inputs := map[string]string{"key": "grant", "redis-url": srv.URL()}
	outcomes := map[string]int{}
	for _, delay := range []time.Duration{150, 300, 350, 400, 450, 600} {
		delay *= time.Millisecond
		holder := newJob(t, srv.URL(), true)
		held := holder.hold(inputs, nil)
		j := newJob(t, srv.URL(), true)
		waiting := j.startAction("main.js", inputs, nil, nil, true)
		j.waitsInLine("grant")
		// The holder lets go meanwhile.
		var post stepResult
		released := make(chan struct{})
		go func() {
			defer close(released) // even when the step fails the test
			post = holder.action("post.js", inputs, nil, held.state)
		}()
		time.Sleep(delay)
		waiting.cmd.Process.Signal(syscall.SIGINT)
		<-released
		if post.code != 0 {
			t.Errorf("post of the holder: %v", post)
		}
		res := waiting.wait()
		if h := res.state["handle"]; h != "" {
			outcomes["saved"]++
			if post := j.action("post.js", inputs, nil, res.state); post.code != 0 || !strings.Contains(post.stdout, "gave the permit") {
				t.Errorf("SIGINT %v after the grant: main saved the handle, but post: %v", delay, post)
			}
		} else {
			outcomes["none"]++
			if res.code == 0 {
				t.Errorf("SIGINT %v after the grant: main exited 0 and saved nothing:\n%s", delay, res.merged)
			}
		}
		j.waitFor("nothing held, nobody waits", func() bool {
			st := j.status("grant")
			return st.Held == 0 && len(st.Waiters) == 0
		})
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestKilledMainLeavesNoHold: on Linux and macOS the runner ends a step
// that outlived SIGINT and SIGTERM with SIGKILL to node alone, not its
// children. The semrun acquire main started then waits on, orphaned; once
// granted, it has nobody to print the handle to, and must leave nothing
// held.
func TestKilledMainLeavesNoHold(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	holder := newJob(t, srv.URL(), true)
	inputs := map[string]string{"key": "orphan", "redis-url": srv.URL()}
	held := holder.hold(inputs, nil)
	j := newJob(t, srv.URL(), true)
	// Not its own group: the orphan must stay out of reach of the test's
	// cleanup until the test has seen what it does.
	waiting := j.startAction("main.js", inputs, nil, nil, false)
	j.waitsInLine("orphan")
	orphan := j.status("orphan").Waiters[0].PID
	t.Cleanup(func() { syscall.Kill(orphan, syscall.SIGKILL) })
	waiting.cmd.Process.Kill()
	res := waiting.wait()
	if len(res.state) != 0 {
		t.Fatalf("main killed while waiting saved state %v", res.state)
	}
	if post := holder.action("post.js", inputs, nil, held.state); post.code != 0 {
		t.Fatalf("post of the holder: %v", post)
	}
	j.waitFor("the orphan ends, holding nothing", func() bool {
		st := j.status("orphan")
		return st.Held == 0 && len(st.Waiters) == 0 && syscall.Kill(orphan, 0) != nil
	})
	t.Logf("after the holder let go: %+v", j.status("orphan"))
}

// TestAHoldPrintedBadlyIsStillGivenBack: a semrun acquire that holds the
// permit but prints a hold the action cannot use (another version's
// output, say) fails the step; when the handle could be read, it is saved,
// masked, and the post step gives the permit back.
func TestAHoldPrintedBadlyIsStillGivenBack(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	j.stopKeepers("garbled")
	wrapper := filepath.Join(j.dir, "wrapper")
	if err := os.Mkdir(wrapper, 0o700); err != nil {
		t.Fatal(err)
	}
	// A semrun whose acquire prints its hold without the fencing token.
	script := "#!/bin/sh\nif [ \"$1\" = acquire ]; then\n  " + j.bin + " \"$@\" | sed 's/\"token\"/\"t\"/'\n  exit 0\nfi\nexec " + j.bin + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(wrapper, "semrun"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	j.env["PATH"] = wrapper + ":" + j.env["PATH"]
	inputs := map[string]string{"key": "garbled", "redis-url": srv.URL()}
	main := j.action("main.js", inputs, nil, nil)
	errs := main.annotations("error")
	if main.code == 0 || len(errs) != 1 || !strings.Contains(errs[0], "the post step gives it back") {
		t.Fatalf("main with a hold printed without its token: want a failure saying the post step gives it back, got %q\n%v", errs, main)
	}
	handle := main.state["handle"]
	if handle == "" || !slices.Contains(main.masks(), handle) {
		t.Fatalf("main: want the handle saved and masked: state %v, masks %q", main.state, main.masks())
	}
	if st := j.status("garbled"); len(st.Holders) != 1 {
		t.Fatalf("status after main: want the hold: %+v", st)
	}
	post := j.action("post.js", inputs, nil, main.state)
	if post.code != 0 || !strings.Contains(post.stdout, "gave the permit of key (unknown) back") {
		t.Errorf("post: %v", post)
	}
	if st := j.status("garbled"); st.Held != 0 {
		t.Errorf("status after post: want nothing held: %+v", st)
	}
}
