//go:build unix

package cmd

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

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
	if metricstest.Value(fams, "semrun_held", "busy") != 1 || metricstest.Value(fams, "semrun_capacity", "busy") != 2 || metricstest.Value(fams, "semrun_held", "idle") != 0 {
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

func TestMetricsListen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held(t, dir, "busy")
	f := testFactory(t)
	var stderr syncBuffer
	f.Streams.In, f.Streams.Out, f.Streams.ErrOut = strings.NewReader(""), io.Discard, &stderr
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"metrics", "--local", "--lock-dir", dir, "--listen", "127.0.0.1:0", "busy"}, f)
	}()
	line := regexp.MustCompile(`^semrun: serving metrics on (http://127\.0\.0\.1:[0-9]+/metrics)\n$`)
	var url string
	for deadline := time.Now().Add(patience); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := line.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("metrics --listen ended with status %d before it listened: %q", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics --listen: no line saying where it listens within %v: %q", patience, stderr.String())
		}
	}
	client := &http.Client{Timeout: patience}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: got %d, %q, %v; want 200 and the text format", url, resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	fams := metricstest.Parse(t, string(body))
	if metricstest.Value(fams, "semrun_up", "") != 1 || metricstest.Value(fams, "semrun_held", "busy") != 1 || metricstest.Value(fams, "semrun_capacity", "busy") != 2 {
		t.Errorf("GET %s: want semrun_up 1, busy 1 held of 2:\n%s", url, body)
	}
	for name := range fams {
		if _, ok := metricstest.Families[name]; !ok {
			t.Errorf("GET %s: %s, a family no one asked for", url, name)
		}
	}
	if resp, err := client.Get(strings.TrimSuffix(url, "metrics") + "debug/vars"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /debug/vars: got %v (%v), want 404: nothing but /metrics is served", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("metrics --listen, stopped: got status %d, stderr %q; want 0", code, stderr.String())
		}
	case <-time.After(patience):
		t.Fatalf("metrics --listen still serves %v after it was told to stop", patience)
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
