//go:build unix

// The GitHub Action (action.yml, action/*.js), run by node as the runner
// runs it: inputs as INPUT_ variables, a fresh file for each of
// GITHUB_ENV, GITHUB_OUTPUT, GITHUB_STATE and GITHUB_PATH a step, read
// back after it as the runner reads them, and the main step's state as
// STATE_ variables of the post step. Against a real redis-server and a
// semrun built from this tree.
package action_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
)

// version is what the semrun built for these tests says it is.
const version = "1.2.3"

// patience bounds every wait: it catches a hang, and says nothing about
// speed.
const patience = 60 * time.Second

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// semrunDir builds semrun once, stamped with version as releases are, into
// a directory of its own.
func semrunDir(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "semrun-action-")
		if buildErr != nil {
			return
		}
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		ldflags := "-X github.com/semrun/semrun/cmd.version=" + version
		// With -race when the tests are, so that the build finds every
		// package in the cache the tests' own build left.
		build := exec.Command(goTool, append(append([]string{"build"}, raceFlags...), "-ldflags", ldflags, "-o", binDir, "github.com/semrun/semrun")...)
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func need(t *testing.T, program string, available func() error) {
	t.Helper()
	if err := available(); err != nil {
		if redistest.Required() {
			t.Fatalf("%s is required with CI=true: %v", program, err)
		}
		t.Skipf("%s: %v", program, err)
	}
}

func needNode(t *testing.T) {
	need(t, "node", func() error { _, err := exec.LookPath("node"); return err })
}

func startRedis(t *testing.T) *redistest.Server {
	t.Helper()
	need(t, "redis-server", redistest.Available)
	srv, err := redistest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// job is one job of a workflow: the environment its steps get, what
// GITHUB_ENV and GITHUB_PATH added to it, and each step's state.
type job struct {
	t     *testing.T
	dir   string
	bin   string // semrun, for the test's own looks at the store
	redis string
	env   map[string]string
	path  []string // GITHUB_PATH's, newest first
}

// newJob is a job whose PATH has semrun on it when withSemrun, else only
// what node and tar need.
func newJob(t *testing.T, redis string, withSemrun bool) *job {
	needNode(t)
	bin := filepath.Join(semrunDir(t), "semrun")
	dir := t.TempDir()
	var path []string
	if withSemrun {
		path = append(path, filepath.Dir(bin))
	}
	for _, p := range []string{"node", "tar", "gzip", "sh"} {
		found, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		path = append(path, filepath.Dir(found))
	}
	if !withSemrun {
		for _, d := range path {
			if _, err := os.Stat(filepath.Join(d, "semrun")); err == nil {
				t.Fatalf("%s has a semrun: this test needs a PATH without one", d)
			}
		}
	}
	for _, d := range []string{"home", "temp", "toolcache", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	j := &job{t: t, dir: dir, bin: bin, redis: redis, env: map[string]string{
		"PATH":              strings.Join(path, ":"),
		"HOME":              filepath.Join(dir, "home"),
		"RUNNER_TEMP":       filepath.Join(dir, "temp"),
		"RUNNER_TOOL_CACHE": filepath.Join(dir, "toolcache"),
		"GITHUB_ACTIONS":    "true",
		"GITHUB_SERVER_URL": "https://github.example",
		"GITHUB_REPOSITORY": "acme/app",
		"GITHUB_RUN_ID":     "4242",
		"GITHUB_WORKSPACE":  filepath.Join(dir, "work"),
		// A semrun built with -race sleeps a second as it exits.
		"GORACE": "atexit_sleep_ms=0",
		// Each test's Redis has just started: no fence to wait out.
		"SEMRUN_RESTART_FENCE": "0",
	}}
	return j
}

// stepResult is what a step left: its status, output, and what it wrote
// in the runner's files, read as the runner reads them.
type stepResult struct {
	code           int
	stdout, stderr string
	// merged is stdout and stderr as one stream, in the order they were
	// written: what the runner reads.
	merged       string
	env, outputs map[string]string
	state        map[string]string
	path         []string
}

// action runs the action's script (main.js or post.js) as a step with
// these inputs, step env and state, and applies what it exported to the
// job, as the runner does.
func (j *job) action(script string, inputs, stepEnv, state map[string]string) stepResult {
	j.t.Helper()
	return j.startAction(script, inputs, stepEnv, state, true).wait()
}

// startAction starts the action's script as a step, as action runs it,
// and lets the test act while it runs; ownGroup as for start.
func (j *job) startAction(script string, inputs, stepEnv, state map[string]string, ownGroup bool) *started {
	j.t.Helper()
	env := map[string]string{}
	for k, v := range stepEnv {
		env[k] = v
	}
	for k, v := range inputs {
		env["INPUT_"+strings.ToUpper(strings.ReplaceAll(k, " ", "_"))] = v
	}
	for k, v := range state {
		env["STATE_"+k] = v
	}
	path, err := filepath.Abs(script)
	if err != nil {
		j.t.Fatal(err)
	}
	return j.start(env, ownGroup, "node", path)
}

// run runs a shell step.
func (j *job) run(script string, stepEnv map[string]string) stepResult {
	j.t.Helper()
	return j.start(stepEnv, true, "sh", "-c", script).wait()
}

// started is a step under way.
type started struct {
	j              *job
	cmd            *exec.Cmd
	ctx            context.Context
	cancel         context.CancelFunc
	files          map[string]string
	stdout, stderr bytes.Buffer
	merged         lockedBuffer
}

// lockedBuffer is one buffer that a step's stdout and stderr, copied by
// goroutines of their own, both write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts a step: the job's environment, the step's, and fresh runner
// files. With ownGroup, the step has a process group of its own, which
// the test ends after it: a semrun the step left running would be a
// defect, not a process to leave behind (a keeper leaves the group as it
// starts).
func (j *job) start(stepEnv map[string]string, ownGroup bool, name string, args ...string) *started {
	j.t.Helper()
	env := map[string]string{}
	for k, v := range j.env {
		env[k] = v
	}
	if len(j.path) > 0 {
		env["PATH"] = strings.Join(j.path, ":") + ":" + env["PATH"]
	}
	for k, v := range stepEnv {
		env[k] = v
	}
	s := &started{j: j, files: map[string]string{}}
	for _, kind := range []string{"ENV", "OUTPUT", "STATE", "PATH"} {
		f, err := os.CreateTemp(j.dir, strings.ToLower(kind)+"-")
		if err != nil {
			j.t.Fatal(err)
		}
		f.Close()
		s.files[kind] = f.Name()
		env["GITHUB_"+kind] = f.Name()
	}
	s.ctx, s.cancel = context.WithTimeout(context.Background(), patience)
	j.t.Cleanup(s.cancel)
	cmd := exec.CommandContext(s.ctx, name, args...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = filepath.Join(j.dir, "work")
	cmd.Stdout = io.MultiWriter(&s.stdout, &s.merged)
	cmd.Stderr = io.MultiWriter(&s.stderr, &s.merged)
	if ownGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	if ownGroup {
		j.t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	}
	s.cmd = cmd
	return s
}

// wait waits for the step, at most patience, reads the runner's files
// after it and applies them to the job.
func (s *started) wait() stepResult {
	s.j.t.Helper()
	err := s.cmd.Wait()
	if s.ctx.Err() != nil {
		s.j.t.Fatalf("step %v still ran after %v\noutput:\n%s", s.cmd.Args, patience, s.merged.String())
	}
	s.cancel()
	res := stepResult{code: exitCode(s.j.t, err), stdout: s.stdout.String(), stderr: s.stderr.String(), merged: s.merged.String()}
	s.j.finish(&res, s.files)
	return res
}

// hold runs the main step, which must take the permit; the test ends any
// keeper it leaves.
func (j *job) hold(inputs, stepEnv map[string]string) stepResult {
	j.t.Helper()
	for _, key := range strings.Split(inputs["key"], "\n") {
		if key = strings.TrimSpace(key); key != "" {
			j.stopKeepers(key)
		}
	}
	main := j.action("main.js", inputs, stepEnv, nil)
	if main.code != 0 {
		j.t.Fatalf("main: %v", main)
	}
	return main
}

// waitsInLine waits until one caller waits for key.
func (j *job) waitsInLine(key string) {
	j.t.Helper()
	j.waitFor("main waits", func() bool { return len(j.status(key).Waiters) == 1 })
}

// finish reads the runner's files after a step and applies them to the job.
func (j *job) finish(res *stepResult, files map[string]string) {
	j.t.Helper()
	res.env = readFileCommands(j.t, files["ENV"])
	res.outputs = readFileCommands(j.t, files["OUTPUT"])
	res.state = readFileCommands(j.t, files["STATE"])
	b, err := os.ReadFile(files["PATH"])
	if err != nil {
		j.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			res.path = append(res.path, line)
		}
	}
	for k, v := range res.env {
		j.env[k] = v
	}
	for _, p := range res.path {
		j.path = append([]string{p}, j.path...)
	}
}

// readFileCommands reads NAME=VALUE and NAME<<DELIMITER lines, as the
// runner reads GITHUB_ENV, GITHUB_OUTPUT and GITHUB_STATE.
func readFileCommands(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "" {
			continue
		}
		if name, delim, ok := strings.Cut(line, "<<"); ok && !strings.Contains(name, "=") {
			var value []string
			for i++; ; i++ {
				if i >= len(lines) {
					t.Fatalf("%s: %s has no closing %q", file, name, delim)
				}
				if lines[i] == delim {
					break
				}
				value = append(value, lines[i])
			}
			got[name] = strings.Join(value, "\n")
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is neither NAME=VALUE nor NAME<<DELIMITER", file, line)
		}
		got[name] = value
	}
	return got
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

// masks are the values the step's ::add-mask:: commands hide, as the
// runner acts on them.
func (r stepResult) masks() []string {
	cmds, _ := runnerLog(r.merged)
	var got []string
	for _, c := range cmds {
		if c.name == "add-mask" {
			got = append(got, c.data)
		}
	}
	return got
}

// annotations are the step's KIND commands (warning, error, notice) that
// the runner acts on, as TITLE: MESSAGE.
func (r stepResult) annotations(kind string) []string {
	cmds, _ := runnerLog(r.merged)
	var got []string
	for _, c := range cmds {
		if c.name == kind {
			got = append(got, c.props["title"]+": "+c.data)
		}
	}
	return got
}

// unescape and unescapeData undo the escaping of a workflow command's
// properties and data, as the runner does.
func unescape(s string) string {
	return strings.NewReplacer("%25", "%", "%0D", "\r", "%0A", "\n", "%3A", ":", "%2C", ",").Replace(s)
}

func unescapeData(s string) string {
	return strings.NewReplacer("%0D", "\r", "%0A", "\n", "%25", "%").Replace(s)
}

func (r stepResult) String() string {
	return fmt.Sprintf("status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

type keyStatus struct {
	Key     string `json:"key"`
	Held    int    `json:"held"`
	Holders []struct {
		ID    string `json:"id"`
		PID   int    `json:"pid"`
		Hold  bool   `json:"hold"`
		Label string `json:"label"`
		Token int64  `json:"token"`
		Slots []int  `json:"slots"`
	} `json:"holders"`
	Waiters []struct {
		PID int `json:"pid"`
	} `json:"waiters"`
}

// semrun runs the test's own semrun against the job's Redis.
func (j *job) semrun(args ...string) (string, error) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, j.bin, args...)
	cmd.Env = []string{"HOME=" + j.env["HOME"], "GORACE=atexit_sleep_ms=0", "SEMRUN_REDIS_URL=" + j.redis}
	if j.redis == "" {
		cmd.Env = []string{"HOME=" + j.env["HOME"], "GORACE=atexit_sleep_ms=0", "SEMRUN_LOCAL=true", "SEMRUN_LOCK_DIR=" + j.env["SEMRUN_LOCK_DIR"]}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("semrun %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func (j *job) status(key string) keyStatus {
	j.t.Helper()
	out, err := j.semrun("status", "--json", key)
	if err != nil {
		j.t.Fatal(err)
	}
	var st []keyStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		j.t.Fatalf("status --json %s: %v: %s", key, err, out)
	}
	return st[0]
}

// waitFor polls ok until it holds, failing the test after patience.
func (j *job) waitFor(what string, ok func() bool) {
	j.t.Helper()
	for deadline := time.Now().Add(patience); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			j.t.Fatalf("%s: not so within %v", what, patience)
		}
	}
}

// stopKeepers ends, when the test does, any hold's keeper still holding
// key: a test that failed half-way leaves no process behind.
func (j *job) stopKeepers(key string) {
	j.t.Cleanup(func() {
		out, err := j.semrun("status", "--json", key)
		if err != nil {
			return
		}
		var st []keyStatus
		if json.Unmarshal([]byte(out), &st) != nil {
			return
		}
		for _, s := range st {
			for _, h := range s.Holders {
				if h.Hold && h.PID > 0 {
					syscall.Kill(h.PID, syscall.SIGTERM)
				}
			}
		}
	})
}

// TestHoldForTheJob: the main step takes the permit and hands its hold to
// later steps, masked; a step runs under it; the post step gives it back.
// A second job meanwhile finds the key busy and fails within its timeout,
// holding nothing, and its post step has nothing to give back.
func TestHoldForTheJob(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	inputs := map[string]string{"key": "staging", "permits": "1", "redis-url": srv.URL(), "max-runtime": "10m"}
	main := j.hold(inputs, nil)
	handle := main.state["handle"]
	if !strings.HasPrefix(handle, "semrun1.") {
		t.Fatalf("main saved no handle in its state: %q\n%v", main.state, main)
	}
	if masks := main.masks(); len(masks) == 0 || masks[len(masks)-1] != handle {
		t.Errorf("main masked %q, want the handle masked", masks)
	}
	if n := strings.Count(main.stdout, handle); n != 1 || strings.Contains(main.stderr, handle) {
		t.Errorf("the handle is in main's output other than in its mask:\n%v", main)
	}
	if i, k := strings.Index(main.stdout, "::add-mask::"+handle), strings.Index(main.stdout, "semrun: holding"); i < 0 || k < i {
		t.Errorf("main: the mask must come before anything else it says:\n%v", main)
	}
	st := j.status("staging")
	if len(st.Holders) != 1 || !st.Holders[0].Hold || st.Holders[0].Label != "https://github.example/acme/app/actions/runs/4242" {
		t.Fatalf("status after main: want one hold, labelled with the run's address: %+v", st)
	}
	token := fmt.Sprint(st.Holders[0].Token)
	wantEnv := map[string]string{
		"SEMRUN_HANDLE": handle, "SEMRUN_HELD_KEY": "staging", "SEMRUN_HELD_PERMITS": "1",
		"SEMRUN_FENCING_TOKEN": token, "SEMRUN_SLOT": "0", "SEMRUN_SLOTS": "0", "SEMRUN_REDIS_URL": srv.URL(),
	}
	for k, v := range wantEnv {
		if main.env[k] != v {
			t.Errorf("GITHUB_ENV %s=%q, want %q", k, main.env[k], v)
		}
	}
	if main.outputs["token"] != token || main.outputs["slot"] != "0" || main.outputs["slots"] != "0" {
		t.Errorf("outputs %v, want token %s and slot 0", main.outputs, token)
	}
	if _, ok := main.outputs["slot-name"]; ok {
		t.Errorf("outputs %v: a slot name on a key whose slots have none", main.outputs)
	}

	// A later step: its semrun reaches Redis through what main exported.
	step := j.run(`semrun --handle @SEMRUN_HANDLE -- sh -c 'echo "token=$SEMRUN_FENCING_TOKEN slot=$SEMRUN_SLOT"'`, nil)
	if step.code != 0 || strings.TrimSpace(step.stdout) != "token="+token+" slot=0" {
		t.Errorf("a step under the hold: %v", step)
	}

	// Another job, meanwhile: busy within its timeout.
	other := newJob(t, srv.URL(), true)
	busy := other.action("main.js", map[string]string{"key": "staging", "permits": "1", "redis-url": srv.URL(), "timeout": "1s"}, nil, nil)
	if busy.code == 0 || len(busy.state) != 0 || len(busy.env) != 0 {
		t.Errorf("main of a second job while the first holds: want a failure that saves and exports nothing: %v\nstate %v env %v", busy, busy.state, busy.env)
	}
	if errs := busy.annotations("error"); len(errs) != 1 || !strings.Contains(errs[0], "semrun acquire exited 75") || !strings.Contains(errs[0], `"staging"`) {
		t.Errorf("main of a busy job: want one error naming the busy status and the key, got %q\n%v", errs, busy)
	}
	none := other.action("post.js", map[string]string{"key": "staging", "redis-url": srv.URL()}, nil, busy.state)
	if none.code != 0 || !strings.Contains(none.stdout, "nothing to give back") || len(none.annotations("warning")) != 0 {
		t.Errorf("post after a busy main: %v", none)
	}
	if st := j.status("staging"); len(st.Holders) != 1 || fmt.Sprint(st.Holders[0].Token) != token || len(st.Waiters) != 0 {
		t.Errorf("status after the busy job: want the first job's hold alone: %+v", st)
	}

	post := j.action("post.js", inputs, nil, main.state)
	if post.code != 0 || !strings.Contains(post.stdout, `semrun: gave the permit of key "staging" back`) || len(post.annotations("warning")) != 0 {
		t.Errorf("post: %v", post)
	}
	if st := j.status("staging"); st.Held != 0 || len(st.Holders) != 0 {
		t.Errorf("status after post: want nothing held: %+v", st)
	}
}

// TestSeveralKeysAndNamedSlots: keys one a line, permits paired with
// them, held at once; the first key's named slot in the outputs and
// variables; the post step gives every key back.
func TestSeveralKeysAndNamedSlots(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	if _, err := j.semrun("key", "set", "gpu", "--slots", "gpu-a,gpu-b"); err != nil {
		t.Fatal(err)
	}
	inputs := map[string]string{"key": "gpu\n  host-7\n", "permits": "2\n1", "weight": "2, 1", "redis-url": srv.URL()}
	main := j.hold(inputs, nil)
	want := map[string]string{"slot": "0", "slots": "0,1", "slot-name": "gpu-a", "slot-names": "gpu-a,gpu-b"}
	for k, v := range want {
		if main.outputs[k] != v {
			t.Errorf("output %s=%q, want %q", k, main.outputs[k], v)
		}
	}
	if main.env["SEMRUN_SLOT_NAME"] != "gpu-a" || main.env["SEMRUN_SLOTS"] != "0,1" || main.env["SEMRUN_HELD_KEY"] != "gpu" {
		t.Errorf("GITHUB_ENV %v: want the first key's slots and names", main.env)
	}
	for _, key := range []string{"gpu", "host-7"} {
		if st := j.status(key); len(st.Holders) != 1 || !st.Holders[0].Hold {
			t.Errorf("status %s after main: want the hold: %+v", key, st)
		}
	}
	step := j.run(`semrun --handle @SEMRUN_HANDLE -- sh -c 'echo "$SEMRUN_KEY_SLOTS"'`, nil)
	if step.code != 0 || step.stdout != "gpu=0,1\nhost-7=0\n" {
		t.Errorf("a step under the hold of both keys: %v", step)
	}
	if post := j.action("post.js", inputs, nil, main.state); post.code != 0 || len(post.annotations("warning")) != 0 {
		t.Errorf("post: %v", post)
	}
	for _, key := range []string{"gpu", "host-7"} {
		if st := j.status(key); st.Held != 0 {
			t.Errorf("status %s after post: want nothing held: %+v", key, st)
		}
	}
}

// holdThenEnd takes a hold in a job with a lease of 2s, lets end end it,
// and runs the post step.
func holdThenEnd(t *testing.T, key string, inputs map[string]string, end func(j *job, st keyStatus)) stepResult {
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	inputs["key"], inputs["redis-url"] = key, srv.URL()
	ttl := map[string]string{"SEMRUN_TTL": "2s"}
	main := j.hold(inputs, ttl)
	st := j.status(key)
	// A hold with a max-runtime may have run out already, on a busy host.
	if (len(st.Holders) != 1 || !st.Holders[0].Hold) && inputs["max-runtime"] == "" {
		t.Fatalf("status after main: want one hold: %+v", st)
	}
	end(j, st)
	j.waitFor("the hold ended", func() bool { return len(j.status(key).Holders) == 0 })
	post := j.action("post.js", inputs, ttl, main.state)
	if post.code != 0 {
		t.Errorf("post must not fail the job: %v", post)
	}
	if strings.Contains(post.stdout, "gave the permit") {
		t.Errorf("post says it gave back a permit it no longer had: %v", post)
	}
	return post
}

// TestPostWarnsOfALostHold: the keeper was killed, and the lease lapsed
// before the post step: a warning that the steps may have run without
// the permit.
func TestPostWarnsOfALostHold(t *testing.T) {
	t.Parallel()
	post := holdThenEnd(t, "lost", map[string]string{}, func(j *job, st keyStatus) {
		if err := syscall.Kill(st.Holders[0].PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	w := post.annotations("warning")
	if len(w) != 1 || !strings.HasPrefix(w[0], `semrun: the job's steps may have run without the permit of key "lost": `) || !strings.Contains(w[0], "was lost") {
		t.Errorf("post of a lost hold: want one warning that the steps may have run without the permit, got %q\n%v", w, post)
	}
}

// TestPostWarnsOfARunOutHold: --max-runtime ended the hold before the
// post step.
func TestPostWarnsOfARunOutHold(t *testing.T) {
	t.Parallel()
	post := holdThenEnd(t, "bounded", map[string]string{"max-runtime": "1s"}, func(*job, keyStatus) {})
	w := post.annotations("warning")
	if len(w) != 1 || !strings.HasPrefix(w[0], `semrun: the job's steps may have run without the permit of key "bounded": `) || !strings.Contains(w[0], "max-runtime") {
		t.Errorf("post of a hold past its max-runtime: want one warning, got %q\n%v", w, post)
	}
}

// TestPostWarnsOfARevoke: an operator revoked the hold; the warning names
// the reason.
func TestPostWarnsOfARevoke(t *testing.T) {
	t.Parallel()
	post := holdThenEnd(t, "revoked", map[string]string{}, func(j *job, st keyStatus) {
		if _, err := j.semrun("key", "revoke", "revoked", "--holder", st.Holders[0].ID, "--reason", "database maintenance"); err != nil {
			t.Fatal(err)
		}
	})
	w := post.annotations("warning")
	if len(w) != 1 || !strings.HasPrefix(w[0], `semrun: an operator revoked the permit of key "revoked": `) || !strings.Contains(w[0], "database maintenance") {
		t.Errorf("post of a revoked hold: want one warning naming the reason, got %q\n%v", w, post)
	}
}

// TestBadInputsHoldNothing: a bad input fails the main step with one
// error naming it, before anything is held.
func TestBadInputsHoldNothing(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	for _, c := range []struct {
		inputs map[string]string
		want   string
	}{
		{map[string]string{"key": "bad", "permits": "0"}, "--permits"},
		{map[string]string{"key": "bad", "timeout": "soon"}, "--timeout"},
		{map[string]string{"key": "bad", "local": "maybe"}, `input local: "maybe" is not true or false`},
		{map[string]string{"key": "bad", "local": "true"}, "inputs redis-url and local"},
		{map[string]string{"key": "bad", "version": "one"}, `input version: "one"`},
		{map[string]string{"key": " \n "}, "input key: required"},
	} {
		j := newJob(t, srv.URL(), true)
		c.inputs["redis-url"] = srv.URL()
		res := j.action("main.js", c.inputs, nil, nil)
		errs := res.annotations("error")
		if res.code == 0 || len(errs) != 1 || !strings.Contains(errs[0], c.want) || len(res.state) != 0 {
			t.Errorf("main with %v: want a failure with one error naming %q, nothing saved; got %q\n%v", c.inputs, c.want, errs, res)
		}
	}
	j := newJob(t, srv.URL(), true)
	if st := j.status("bad"); st.Held != 0 || len(st.Waiters) != 0 {
		t.Errorf("status after bad inputs: want nothing held: %+v", st)
	}
}

// TestLocalHold: with local, the permit is a lock on the runner's host,
// and the later steps and the post step use the same store.
func TestLocalHold(t *testing.T) {
	t.Parallel()
	j := newJob(t, "", true)
	lockDir := filepath.Join(j.dir, "locks")
	j.env["SEMRUN_LOCK_DIR"] = lockDir
	inputs := map[string]string{"key": "gpu", "permits": "2", "local": "true"}
	main := j.hold(inputs, nil)
	if main.env["SEMRUN_LOCAL"] != "true" || main.env["SEMRUN_REDIS_URL"] != "" {
		t.Fatalf("main with local: want SEMRUN_LOCAL exported: %v\nenv %v", main, main.env)
	}
	step := j.run(`semrun --handle @SEMRUN_HANDLE -- sh -c 'echo "$SEMRUN_SLOT"' && semrun status --json gpu`, nil)
	if step.code != 0 || !strings.HasPrefix(step.stdout, "0\n") || !strings.Contains(step.stdout, `"hold": true`) {
		t.Errorf("a step under a local hold: %v", step)
	}
	if post := j.action("post.js", inputs, nil, main.state); post.code != 0 || !strings.Contains(post.stdout, "gave the permit") || len(post.annotations("warning")) != 0 {
		t.Errorf("post of a local hold: %v", post)
	}
	if st := j.status("gpu"); st.Held != 0 {
		t.Errorf("status after post: want nothing held: %+v", st)
	}
}

// TestRedisPasswordIsMasked: the password of redis-url is masked, as
// written and decoded, before anything could show it, and shown nowhere.
func TestRedisPasswordIsMasked(t *testing.T) {
	t.Parallel()
	j := newJob(t, "redis://127.0.0.1:1/0", true)
	url := "redis://ci:p%40ss-w0rd@127.0.0.1:1/0"
	res := j.action("main.js", map[string]string{"key": "secret", "redis-url": url}, map[string]string{"SEMRUN_CONNECT_TIMEOUT": "1s"}, nil)
	if res.code == 0 {
		t.Fatalf("main with an unreachable Redis: %v", res)
	}
	if masks := res.masks(); !slices.Contains(masks, "p%40ss-w0rd") || !slices.Contains(masks, "p@ss-w0rd") {
		t.Errorf("masks %q, want the password as written and decoded", masks)
	}
	unmasked := regexp.MustCompile(`(?m)^::add-mask::.*$`).ReplaceAllString(res.stdout, "")
	if strings.Contains(unmasked, "w0rd") || strings.Contains(res.stderr, "w0rd") {
		t.Errorf("the password is in main's output other than in its masks:\n%v", res)
	}
}

// TestCancelWhileWaiting: a job cancelled while its main step waits in
// line (the runner signals the step) leaves the line, and nothing is held
// once the holder before it lets go.
func TestCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	first := newJob(t, srv.URL(), true)
	inputs := map[string]string{"key": "line", "redis-url": srv.URL()}
	held := first.hold(inputs, nil)
	j := newJob(t, srv.URL(), true)
	waiting := j.startAction("main.js", inputs, nil, nil, true)
	j.waitsInLine("line")
	if err := waiting.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	res := waiting.wait()
	if res.code == 0 {
		t.Errorf("main cancelled while waiting exited 0:\n%s", res.merged)
	}
	if len(res.state) != 0 {
		t.Errorf("main cancelled while waiting saved state %v", res.state)
	}
	if st := j.status("line"); len(st.Waiters) != 0 {
		t.Errorf("status after the cancel: want nobody waiting: %+v", st)
	}
	if post := first.action("post.js", inputs, nil, held.state); post.code != 0 || len(post.annotations("warning")) != 0 {
		t.Errorf("post of the first job: %v", post)
	}
	if st := j.status("line"); st.Held != 0 {
		t.Errorf("status after the first job's post: want nothing held: %+v", st)
	}
}

// release is a fake release server: the archives and checksums file
// goreleaser publishes, of the semrun built here.
type release struct {
	*httptest.Server
	archives atomic.Int32 // archive downloads
	badSum   bool         // list a checksum that is not the archive's
}

func newRelease(t *testing.T, badSum bool) *release {
	t.Helper()
	bin, err := os.ReadFile(filepath.Join(semrunDir(t), "semrun"))
	if err != nil {
		t.Fatal(err)
	}
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		data []byte
	}{{"README.md", []byte("# semrun\n")}, {"semrun", bin}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	archive := fmt.Sprintf("semrun_%s_%s_%s.tar.gz", version, runtime.GOOS, runtime.GOARCH)
	sum := sha256.Sum256(tgz.Bytes())
	r := &release{badSum: badSum}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /releases/latest", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "/releases/tag/v"+version, http.StatusFound)
	})
	mux.HandleFunc("GET /releases/download/v"+version+"/semrun_"+version+"_checksums.txt", func(w http.ResponseWriter, _ *http.Request) {
		s := hex.EncodeToString(sum[:])
		if r.badSum {
			s = strings.Repeat("0", 64)
		}
		fmt.Fprintf(w, "%s  semrun_%s_windows_amd64.zip\n%s  %s\n", strings.Repeat("1", 64), version, s, archive)
	})
	mux.HandleFunc("GET /releases/download/v"+version+"/"+archive, func(w http.ResponseWriter, _ *http.Request) {
		r.archives.Add(1)
		w.Write(tgz.Bytes())
	})
	r.Server = httptest.NewServer(mux)
	t.Cleanup(r.Close)
	return r
}

// TestInstallFromARelease: without semrun on PATH, main installs the
// latest release in the tool cache, checked against its checksums file,
// and puts it on PATH for later steps; a later job on the runner uses it
// as it is.
func TestInstallFromARelease(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	rel := newRelease(t, false)
	j := newJob(t, srv.URL(), false)
	inputs := map[string]string{"key": "install", "redis-url": srv.URL(), "release-url": rel.URL + "/releases"}
	main := j.hold(inputs, nil)
	dir := filepath.Join(j.env["RUNNER_TOOL_CACHE"], "semrun", version, nodeArch())
	if len(main.path) != 1 || main.path[0] != dir || main.state["semrun"] != filepath.Join(dir, "semrun") {
		t.Errorf("main: GITHUB_PATH %q and state %q, want semrun installed in %s", main.path, main.state, dir)
	}
	step := j.run(`semrun --handle @SEMRUN_HANDLE -- sh -c 'echo "$SEMRUN_HELD_KEY"'`, nil)
	if step.code != 0 || strings.TrimSpace(step.stdout) != "install" {
		t.Errorf("a step under the hold with the installed semrun: %v", step)
	}
	if post := j.action("post.js", inputs, nil, main.state); post.code != 0 || !strings.Contains(post.stdout, "gave the permit") {
		t.Errorf("post: %v", post)
	}

	// The next job on this runner: the tool cache has it.
	next := newJob(t, srv.URL(), false)
	next.env["RUNNER_TOOL_CACHE"] = j.env["RUNNER_TOOL_CACHE"]
	inputs["version"] = "v" + version
	again := next.action("main.js", inputs, nil, nil)
	if again.code != 0 || rel.archives.Load() != 1 {
		t.Errorf("main of a later job: want it to use the tool cache (archive downloads %d, want 1): %v", rel.archives.Load(), again)
	}
	if post := next.action("post.js", inputs, nil, again.state); post.code != 0 {
		t.Errorf("post: %v", post)
	}
}

// TestInstallRefusesABadChecksum: an archive whose SHA-256 is not the one
// the release lists is not installed, and nothing is held.
func TestInstallRefusesABadChecksum(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	rel := newRelease(t, true)
	j := newJob(t, srv.URL(), false)
	main := j.action("main.js", map[string]string{"key": "sum", "redis-url": srv.URL(), "release-url": rel.URL + "/releases", "version": version}, nil, nil)
	errs := main.annotations("error")
	if main.code == 0 || len(errs) != 1 || !strings.Contains(errs[0], "SHA-256") || !strings.Contains(errs[0], "not installed") {
		t.Errorf("main with a bad checksum: want one error saying so, got %q\n%v", errs, main)
	}
	if _, err := os.Stat(filepath.Join(j.env["RUNNER_TOOL_CACHE"], "semrun", version, nodeArch(), "semrun")); err == nil || len(main.state) != 0 {
		t.Errorf("main with a bad checksum installed semrun, or saved state %v", main.state)
	}
	if st := j.status("sum"); st.Held != 0 || len(st.Waiters) != 0 {
		t.Errorf("status: want nothing held: %+v", st)
	}
}

// nodeArch is node's name for this machine's architecture, which the tool
// cache's directories use.
func nodeArch() string {
	if runtime.GOARCH == "amd64" {
		return "x64"
	}
	return runtime.GOARCH
}
