//go:build unix

package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// patience bounds one semrun a test runs: one that waits for a permit
// never given back fails the test in seconds, not at go test's timeout.
const patience = 10 * time.Second

// testFactory is a process for semrun of the test's own: buffers for
// streams, env (NAME=VALUE) and PATH for its whole environment, a config
// directory of its own and no system config file, and no Redis at the
// default address.
func testFactory(t *testing.T, env ...string) *Factory {
	return &Factory{
		Streams:         &IOStreams{},
		Environ:         append([]string{"PATH=" + os.Getenv("PATH"), "XDG_CONFIG_HOME=" + t.TempDir()}, env...),
		DefaultRedisURL: "redis://127.0.0.1:1/0",
	}
}

// run runs semrun with args in f (nil: testFactory(t)), and returns its
// status, stdout and stderr.
func run(t *testing.T, f *Factory, args ...string) (int, string, string) {
	t.Helper()
	if f == nil {
		f = testFactory(t)
	}
	var out, errOut bytes.Buffer
	f.Streams.In, f.Streams.Out, f.Streams.ErrOut = strings.NewReader(""), &out, &errOut
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	code := Run(ctx, args, f)
	if ctx.Err() != nil {
		t.Errorf("semrun %q: still running after %v", args, patience)
	}
	return code, out.String(), errOut.String()
}

func TestRunRefusesBadInputInTheUsersWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"-k", "k", "--permits", "0", "--", "true"}, "semrun: --permits 0: must be from 1 to 1000000\n"},
		{[]string{"SEMRUN_PERMITS=0"}, []string{"-k", "k", "--", "true"}, "semrun: SEMRUN_PERMITS=0: must be from 1 to 1000000\n"},
		{nil, []string{"-k", "k", "--ttl", "500ms", "--", "true"}, "semrun: --ttl 500ms: must be from 1s to 24h0m0s\n"},
		{nil, []string{"-k", "k", "-n", "2", "--weight", "3", "--", "true"}, "semrun: --weight 3: must be from 1 to 2 permits\n"},
		{nil, []string{"-k", "k", "-n", "2", "--weight", "0", "--", "true"}, "semrun: --weight 0: must be from 1 to 2 permits\n"},
		{nil, []string{"--", "true"}, "semrun: --key is required\n"},
		{nil, []string{"-k", "k", "--label", "a\x1bb", "--", "true"}, "semrun: --label \"a\\x1bb\": contains the control character U+001B\n"},
		{[]string{"SEMRUN_LABEL=" + strings.Repeat("é", 101)}, []string{"-k", "k", "--", "true"},
			"semrun: SEMRUN_LABEL=\"" + strings.Repeat("é", 40) + "\"...: is 202 bytes long, at most 200 allowed\n"},
		// A store's refusal, naming settings as the user set them.
		{nil, []string{"-k", "k", "--redis", "redis://127.0.0.1:1/0", "--tls-ca", "ca.pem", "--", "true"},
			"semrun: --tls-ca: needs a rediss:// URL, not redis://127.0.0.1:1/0 (--redis)\n"},
		{[]string{"SEMRUN_TLS_CA=ca.pem", "SEMRUN_REDIS_URL=redis://127.0.0.1:1/0"}, []string{"-k", "k", "--", "true"},
			"semrun: SEMRUN_TLS_CA: needs a rediss:// URL, not redis://127.0.0.1:1/0 (SEMRUN_REDIS_URL)\n"},
		{nil, []string{"-k", "k", "--redis", "rediss://127.0.0.1:1/0", "--tls-cert", "c.pem", "--", "true"},
			"semrun: --tls-cert c.pem: needs --tls-key\n"},
		{nil, []string{"-k", "k", "--cluster", "--sentinel-master", "m", "--", "true"}, "semrun: --cluster and --sentinel-master: choose one\n"},
		{[]string{"SEMRUN_REDIS_URL=redis://127.0.0.1:1/0?addr=127.0.0.1:2"}, []string{"-k", "k", "--", "true"},
			"semrun: SEMRUN_REDIS_URL: redis://127.0.0.1:1/0: ?addr= names more nodes of a cluster or more sentinels: add --cluster or --sentinel-master\n"},
		{nil, []string{"-k", "k", "--local", "--lock-dir", "", "--", "true"}, "semrun: --lock-dir: must not be empty\n"},
		{nil, []string{"-k", "k", "--min-hold", "1h", "--min-hold-after", "failure", "--", "true"}, "semrun: --min-hold-after \"failure\": must be success or any\n"},
		{nil, []string{"-k", "k", "--min-hold-after", "", "--", "true"}, "semrun: --min-hold-after \"\": must be success or any\n"},
		{[]string{"SEMRUN_MIN_HOLD_AFTER=Success"}, []string{"-k", "k", "--", "true"}, "semrun: SEMRUN_MIN_HOLD_AFTER=\"Success\": must be success or any\n"},
	} {
		code, out, errOut := run(t, testFactory(t, tc.env...), tc.args...)
		if code != exitFailure || out != "" || errOut != tc.want {
			t.Errorf("semrun %q with %v: got status %d, stdout %q, stderr %q; want 125, nothing, %q", tc.args, tc.env, code, out, errOut, tc.want)
		}
	}
}

// --min-hold-after success: a failed command gives its permit back at
// once, and says nothing of a cooling with -v; a successful one cools.
func TestRunMinHoldAfterSuccess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run1 := func(args ...string) (int, string) {
		code, _, errOut := run(t, nil, append([]string{"--local", "--lock-dir", dir, "-k", "k", "-v"}, args...)...)
		return code, errOut
	}
	const cools = "it stays taken until 1h0m0s after its grant (--min-hold)"
	code, errOut := run1("--min-hold", "1h", "--min-hold-after", "success", "--", "sh", "-c", "exit 1")
	if code != 1 || strings.Contains(errOut, cools) {
		t.Errorf("a failed command with --min-hold-after success: got status %d, stderr %q; want 1, no cooling said", code, errOut)
	}
	if code, errOut := run1("--no-wait", "--min-hold", "1h", "--min-hold-after", "success", "--", "true"); code != 0 || !strings.Contains(errOut, cools) {
		t.Errorf("a successful command with --min-hold-after success after a failed one: got status %d, stderr %q; want 0, the cooling said", code, errOut)
	}
	if code, _ := run1("--no-wait", "--", "true"); code != defaultBusyExitCode {
		t.Errorf("a run once a successful one cools: got status %d, want %d", code, defaultBusyExitCode)
	}
}

func TestRunPassesTheChildsStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := run(t, nil, "--local", "--lock-dir", dir, "-k", "k", "--", "sh", "-c", "exit 3")
	if code != 3 || out != "" || errOut != "" {
		t.Errorf("a child that exits 3: got status %d, stdout %q, stderr %q; want 3 and nothing printed", code, out, errOut)
	}
	code, _, errOut = run(t, nil, "--local", "--lock-dir", dir, "-k", "k", "-v", "--", "true")
	if code != 0 || !strings.Contains(errOut, `semrun: key "k": permit held after `) || !strings.HasSuffix(errOut, "semrun: key \"k\": permit released\n") {
		t.Errorf("-v: got status %d, stderr %q; want 0, the permit held and released said", code, errOut)
	}
}

func TestStatusAndDoctorWriteToTheirStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := localstore.New(localstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("localstore.New: %v", err)
	}
	defer store.Close()
	l, err := store.Acquire(context.Background(), semaphore.Request{Key: "busy", Permits: 2, TTL: time.Minute, NoWait: true,
		Holder: semaphore.HolderInfo{Host: "h", PID: 7, Command: "job"}})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer l.Release(context.Background())

	code, out, errOut := run(t, nil, "status", "--local", "--lock-dir", dir, "busy")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "key \"busy\": 1 held, capacity 2\n") || !regexp.MustCompile(`(?m)^  \S+ +h +7 +job +1 +2 `).MatchString(out) {
		t.Errorf("status: got status %d, stdout %q, stderr %q; want 0 and the holder", code, out, errOut)
	}
	code, out, _ = run(t, nil, "status", "--local", "--lock-dir", dir, "--json")
	var st []semaphore.KeyStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 1 || st[0].Key != "busy" || st[0].Held != 1 {
		t.Errorf("status --json: got status %d, %q (%v); want the key busy, 1 held", code, out, err)
	}
	code, out, errOut = run(t, nil, "doctor", "--local", "--lock-dir", dir)
	if code != 0 || errOut != "" || !strings.Contains(out, "ok    lock: took and freed a lock") {
		t.Errorf("doctor: got status %d, stdout %q, stderr %q; want 0 and the lock check", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "doctor", "--local", "--lock-dir", "")
	if code != exitFailure || out != "" || errOut != "semrun: --lock-dir: must not be empty\n" {
		t.Errorf("doctor with an empty lock directory: got status %d, stdout %q, stderr %q; want 125, bad input", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "doctor", "--local", "--lock-dir", filepath.Join(dir, "busy", "grant"))
	if code != exitDoctorFailed || !strings.HasPrefix(out, "FAIL  lock-dir: ") || errOut != "semrun: doctor: lock-dir failed\n" {
		t.Errorf("doctor of a file as the lock directory: got status %d, stdout %q, stderr %q; want 1, lock-dir failing", code, out, errOut)
	}
}

// fakeTerminal is a terminal of a given width, in the foreground.
type fakeTerminal int

func (t fakeTerminal) Width() int     { return int(t) }
func (fakeTerminal) Background() bool { return false }

func TestWaitLineOnATerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store, err := localstore.New(localstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("localstore.New: %v", err)
	}
	defer store.Close()
	l, err := store.Acquire(context.Background(), semaphore.Request{Key: "busy", Permits: 1, TTL: time.Minute, NoWait: true})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer l.Release(context.Background())

	onTerminal := testFactory(t)
	onTerminal.Streams.ErrTerminal = fakeTerminal(60)
	code, _, errOut := run(t, onTerminal, "--local", "--lock-dir", dir, "-k", "busy", "--timeout", "1500ms", "--", "true")
	line := "\r\x1b[Ksemrun: waiting for key \"busy\": 1/1 permits held, 1st in l"
	if code != 75 || !strings.HasPrefix(errOut, line) || !strings.HasSuffix(errOut, "\r\x1b[Ksemrun: key \"busy\": no permit within 1.5s (--timeout)\n") {
		t.Errorf("a wait on a terminal 60 wide: got status %d, stderr %q; want 75, the line cut to 59 columns (%q), cleared, then why", code, errOut, line)
	}
	code, _, errOut = run(t, nil, "--local", "--lock-dir", dir, "-k", "busy", "--timeout", "100ms", "--", "true")
	if code != 75 || errOut != "semrun: key \"busy\": no permit within 100ms (--timeout)\n" {
		t.Errorf("a wait elsewhere: got status %d, stderr %q; want 75 and only why", code, errOut)
	}
}

// TestStoreSettingsComeBeforeTheCommand: a store's setting refused wins
// over a command that cannot run, as any bad flag does.
func TestStoreSettingsComeBeforeTheCommand(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, nil, "-k", "k", "--redis", "bogus://x", "--", "no-such-command-here")
	if code != exitFailure || !strings.HasPrefix(errOut, "semrun: --redis: unknown scheme") {
		t.Errorf("a bad URL and no such command: got status %d, stderr %q; want 125 for the URL", code, errOut)
	}
}

// TestPasswordOnTheCommandLineWarns: a password in a URL given as a flag
// can be seen with ps, a sentinel's too.
func TestPasswordOnTheCommandLineWarns(t *testing.T) {
	t.Parallel()
	const warning = "semrun: warning: --redis: a password on the command line can be seen by other users (ps); use --redis-password-file or SEMRUN_REDIS_PASSWORD\n"
	for _, args := range [][]string{
		{"--redis", "redis://:pw@127.0.0.1:1/0"},
		{"--redis", "redis://:pw@127.0.0.1:1/0", "--sentinel-master", "m"},
	} {
		args = append(args, "-k", "k", "--no-wait", "--connect-timeout", "100ms", "--", "true")
		code, _, errOut := run(t, nil, args...)
		if code != exitFailure || !strings.HasPrefix(errOut, warning) || strings.Contains(errOut, "pw@") {
			t.Errorf("semrun %q: got status %d, stderr %q; want 125 after the warning, and no password", args, code, errOut)
		}
	}
	if _, _, errOut := run(t, testFactory(t, "SEMRUN_REDIS_URL=redis://:pw@127.0.0.1:1/0"), "-k", "k", "--no-wait", "--connect-timeout", "100ms", "--", "true"); strings.Contains(errOut, "warning") {
		t.Errorf("a password in SEMRUN_REDIS_URL: got stderr %q, want no warning", errOut)
	}
}

// TestSettingsScanReadsArgsAsCobraDoes: --config and --log-format are
// looked for before cobra parses the command line, and must be read as it
// reads them: a flag's value that looks like one of them is a value.
func TestSettingsScanReadsArgsAsCobraDoes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errOut := run(t, nil, "--local", "--lock-dir", dir, "-k", "--config", "--", "true")
	if code != 0 || errOut != "" {
		t.Errorf("-k --config: got status %d, stderr %q; want 0 and nothing said (the key is --config)", code, errOut)
	}
	code, _, errOut = run(t, nil, "--local", "--lock-dir", dir, "-vk", "--log-format=json", "--", "true")
	if code != 0 || !strings.HasPrefix(errOut, "semrun: ") {
		t.Errorf("-vk --log-format=json: got status %d, stderr %q; want 0 and text lines (the key is --log-format=json)", code, errOut)
	}
	code, _, errOut = run(t, nil, "--local", "--lock-dir", dir, "--log-format", "json", "--permit", "2", "--", "true")
	if code != exitFailure || !strings.HasPrefix(errOut, `{"time":`) || !strings.Contains(errOut, `"status":125`) {
		t.Errorf("--log-format json and an unknown flag: got status %d, stderr %q; want 125 said in JSON", code, errOut)
	}
}

// TestConfigFileKeysOfCobrasOwn: the help flag and the completion command
// cobra adds as it runs are settings too, not unknown keys.
func TestConfigFileKeysOfCobrasOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("no-descriptions: true\nhelp: false\npermitz: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "--config", config, "--local", "--lock-dir", dir, "-k", "k", "--", "true")
	want := "semrun: warning: " + config + ": unknown setting \"permitz\", ignored (did you mean permits?)\n"
	if code != 0 || errOut != want {
		t.Errorf("a config file with help, no-descriptions and a typo: got status %d, stderr %q; want 0 and only %q", code, errOut, want)
	}
}

// TestJSONLinesEscapeWhatATerminalActsOn: --log-format json escapes the C1
// and bidirectional controls encoding/json leaves raw, here in a key.
func TestJSONLinesEscapeWhatATerminalActsOn(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, nil, "--log-format", "json", "--local", "--lock-dir", t.TempDir(), "-k", "rtl\u202ekey", "-n", "0", "--", "true")
	if code != exitFailure || !strings.Contains(errOut, `rtl\u202ekey`) || strings.ContainsRune(errOut, '\u202e') {
		t.Errorf("a JSON line about the key rtl\\u202ekey: got status %d, stderr %q; want 125 and the control escaped", code, errOut)
	}
}

// syncBuffer is a buffer one goroutine writes while another reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
