//go:build unix && !semrun_nometrics

package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/metrics/metricstest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// held takes a permit of key in the lock directory dir, until the test ends.
func held(t *testing.T, dir, key string) {
	t.Helper()
	store, err := localstore.New(localstore.Options{Dir: dir})
	if err != nil {
		t.Fatalf("localstore.New: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	l, err := store.Acquire(context.Background(), semaphore.Request{Key: key, Permits: 2, TTL: time.Minute, NoWait: true,
		Holder: semaphore.HolderInfo{Host: "h", PID: 7, Command: "job"}})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
}

func TestMetricsTextfile(t *testing.T) {
	t.Parallel()
	dir, out := t.TempDir(), t.TempDir()
	held(t, dir, "busy")
	file := filepath.Join(out, "semrun.prom")
	code, stdout, stderr := run(t, nil, "metrics", "--local", "--lock-dir", dir, "--textfile", file, "busy", "idle")
	if code != 0 || stdout != "" || stderr != "" {
		t.Fatalf("metrics --textfile: got status %d, stdout %q, stderr %q; want 0 and nothing said", code, stdout, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Parse(t, string(b))
	if metricstest.Value(fams, "semrun_held_permits", "busy") != 1 || metricstest.Value(fams, "semrun_capacity_permits", "busy") != 2 || metricstest.Value(fams, "semrun_held_permits", "idle") != 0 {
		t.Errorf("want busy 1 held of 2, idle 0 held:\n%s", b)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the file's mode: got %v (%v), want 0644: node_exporter runs as another user", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the file alone (no temporary file left)", len(entries))
	}
	// Written again, it replaces the file.
	code, _, stderr = run(t, nil, "metrics", "--local", "--lock-dir", dir, "--textfile", file, "idle")
	if b, _ := os.ReadFile(file); code != 0 || stderr != "" || strings.Contains(string(b), `key="busy"`) {
		t.Errorf("written again for idle alone: got status %d, stderr %q, file\n%s", code, stderr, b)
	}
	// A file node_exporter would not read is written, with a warning.
	code, _, stderr = run(t, nil, "metrics", "--local", "--lock-dir", dir, "--textfile", filepath.Join(out, "semrun.txt"), "idle")
	if code != 0 || stderr != "semrun: warning: --textfile "+filepath.Join(out, "semrun.txt")+": node_exporter's textfile collector reads only files named *.prom\n" {
		t.Errorf("--textfile semrun.txt: got status %d, stderr %q; want 0 and a warning", code, stderr)
	}
}

// listening is a semrun metrics --listen started by startListen.
type listening struct {
	url    string
	stderr *syncBuffer
	stop   func() int // stops it, and is its status
}

// startListen starts semrun metrics --listen on a free port of 127.0.0.1
// with args, and waits (at most patience) until it says where it listens.
func startListen(t *testing.T, args ...string) *listening {
	t.Helper()
	f := testFactory(t)
	l := &listening{stderr: &syncBuffer{}}
	f.Streams.In, f.Streams.Out, f.Streams.ErrOut = strings.NewReader(""), io.Discard, l.stderr
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"metrics", "--listen", "127.0.0.1:0"}, args...), f)
	}()
	stopped, code := false, 0
	l.stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(patience):
				t.Fatalf("metrics --listen still serves %v after it was told to stop", patience)
			}
		}
		return code
	}
	t.Cleanup(func() { l.stop() })
	line := regexp.MustCompile(`^semrun: serving metrics on (http://127\.0\.0\.1:[0-9]+/metrics)\n$`)
	for deadline := time.Now().Add(patience); l.url == ""; time.Sleep(10 * time.Millisecond) {
		if m := line.FindStringSubmatch(l.stderr.String()); m != nil {
			l.url = m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("metrics --listen ended with status %d before it listened: %q", code, l.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics --listen: no line saying where it listens within %v: %q", patience, l.stderr.String())
		}
	}
	return l
}

// scrape GETs url as Prometheus does (gzip taken), within wait, checks
// the answer is 200 and the text format, and returns it; nil when not.
func scrape(t *testing.T, url string, wait time.Duration) []byte {
	t.Helper()
	client := &http.Client{Timeout: wait}
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("GET %s: got %d, %q, %v; want 200 and the text format", url, resp.StatusCode, resp.Header.Get("Content-Type"), err)
		return nil
	}
	return body
}

func TestMetricsListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held(t, dir, "busy")
	l := startListen(t, "--local", "--lock-dir", dir, "busy")
	fams := metricstest.Parse(t, string(scrape(t, l.url, patience)))
	if metricstest.Value(fams, "semrun_up", "") != 1 || metricstest.Value(fams, "semrun_held_permits", "busy") != 1 || metricstest.Value(fams, "semrun_capacity_permits", "busy") != 2 {
		t.Errorf("GET %s: want semrun_up 1, busy 1 held of 2: %v", l.url, fams)
	}
	for name := range fams {
		if _, ok := metricstest.Families[name]; !ok {
			t.Errorf("GET %s: %s, a family no one asked for", l.url, name)
		}
	}
	client := &http.Client{Timeout: patience}
	if resp, err := client.Get(strings.TrimSuffix(l.url, "metrics") + "debug/vars"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /debug/vars: got %v (%v), want 404: nothing but /metrics is served", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := client.Post(l.url, "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: got %v (%v), want 405", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if code := l.stop(); code != 0 {
		t.Errorf("metrics --listen, stopped: got status %d, stderr %q; want 0", code, l.stderr.String())
	}
}

// neverReads sends a scrape to url that asks for the text (no gzip), on
// a connection with a small receive buffer, and reads the first byte of
// the answer: its writing has begun. It then reads nothing more.
func neverReads(t *testing.T, url string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: patience, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) }); cerr != nil {
			return cerr
		}
		return err
	}}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	conn, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatalf("dial %s: %v", host, err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		t.Fatalf("a scrape that never reads: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(patience))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("a scrape that never reads: no answer begun within %v: %v", patience, err)
	}
	return conn
}

// Clients that never read, and crowds of scrapes at once, hold up no
// scrape: with eight clients whose answers stall (more than the scrapes
// served at once before), twenty scrapes at once are all answered in
// full, none refused; and the clients that fail are said once, not once
// a write. The answer is larger than a socket's buffers hold (600 keys
// of long names, about 9MB), so that a client that does not read stalls
// the writing of its answer.
func TestMetricsListenHoldsUpUnderHostileClients(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"--local", "--lock-dir", dir}
	for i := range 600 {
		args = append(args, fmt.Sprintf("%03d-", i)+strings.Repeat("k", semaphore.MaxKeyLen-4))
	}
	l := startListen(t, args...)
	var stalled []net.Conn
	for range 8 {
		stalled = append(stalled, neverReads(t, l.url))
	}
	// Four answers of 9MB to unpack, on a machine that may be busy: the
	// wait bounds a hang, not the speed.
	const wait = 2 * time.Minute
	var wg sync.WaitGroup
	bodies := make([][]byte, 4)
	for i := range bodies {
		wg.Go(func() { bodies[i] = scrape(t, l.url, wait) })
	}
	wg.Wait()
	last := fmt.Sprintf(`semrun_waiting{key="%s"} 0`+"\n", args[len(args)-1])
	for i, b := range bodies {
		if b != nil && !bytes.HasSuffix(b, []byte(last)) {
			t.Errorf("scrape %d beside clients that never read: %d bytes, not ending with the last key's last series", i, len(b))
		}
	}
	if fams := metricstest.Parse(t, string(bodies[0])); len(fams["semrun_key_readable"].GetMetric()) != 600 {
		t.Errorf("a scrape beside clients that never read: got %d keys, want 600", len(fams["semrun_key_readable"].GetMetric()))
	}
	// The clients that never read go, abruptly: their answers fail.
	for _, c := range stalled {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: the writer learns at once
		}
		c.Close()
	}
	if code := l.stop(); code != 0 { // once every answer ended
		t.Errorf("metrics --listen, stopped: got status %d; want 0", code)
	}
	var warnings []string
	for _, line := range strings.Split(l.stderr.String(), "\n") {
		if strings.Contains(line, "warning") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "could not be written") {
		t.Errorf("8 answers that failed: got warnings %q, want one line", warnings)
	}
}

func TestMetricsRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "semrun.prom")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"metrics"}, "semrun: give --listen ADDR to serve the metrics, or --textfile FILE to write them once\n"},
		{[]string{"metrics", "--listen", "127.0.0.1:0", "--textfile", "x.prom"}, "semrun: --listen and --textfile: choose one\n"},
		{[]string{"metrics", "--listen", "nonsense"}, "semrun: --listen nonsense: missing port in address\n"},
		{[]string{"metrics", "--listen", "127.0.0.1:99999"}, "semrun: --listen 127.0.0.1:99999: invalid port\n"},
		{[]string{"metrics", "--listen", "127.0.0.1:0", "a\x1bb"}, "semrun: key \"a\\x1bb\": contains the control character U+001B\n"},
		{[]string{"metrics", "--textfile", missing}, "semrun: --textfile " + missing + ": no such file or directory\n"},
	} {
		args := append(tc.args, "--local", "--lock-dir", dir)
		code, out, errOut := run(t, nil, args...)
		if code != exitFailure || out != "" || errOut != tc.want {
			t.Errorf("semrun %q: got status %d, stdout %q, stderr %q; want 125, nothing, %q", args, code, out, errOut, tc.want)
		}
	}
}
