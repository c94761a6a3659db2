package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/semrun/semrun/cmd"
)

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir); err != nil {
		t.Fatalf("generate: %v", err)
	}

	page := gunzip(t, filepath.Join(dir, "man", "semrun.1.gz"))
	// roff writes a dash as \-.
	if text := strings.ReplaceAll(page, `\-`, "-"); !strings.Contains(text, "--permits") {
		t.Errorf("semrun.1: got %d bytes without --permits, want the flag described", len(page))
	}
	for _, sub := range []string{"semrun-status.1.gz", "semrun-version.1.gz", "semrun-completion.1.gz"} {
		if gunzip(t, filepath.Join(dir, "man", sub)) == "" {
			t.Errorf("%s: got an empty page", sub)
		}
	}

	// cobra's scripts ask semrun itself for the words (semrun __complete),
	// so they name no flag: the answer they get is what must offer --permits.
	for _, name := range []string{"semrun.bash", "semrun.zsh", "semrun.fish"} {
		b, err := os.ReadFile(filepath.Join(dir, "completions", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("__complete")) {
			t.Errorf("%s: got %d bytes that never call semrun __complete, want a completion script", name, len(b))
		}
	}
	if got := complete(t, "--per"); !strings.Contains(got, "--permits") {
		t.Errorf("semrun __complete --per: got %q, want --permits offered", got)
	}
}

// TestManPageHasStatusesAndVariables: semrun(1) carries every exit status
// and variable cmd lists (which cmd's tests hold to the code), in sections
// of their own, where man puts them: before EXAMPLE.
func TestManPageHasStatusesAndVariables(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir); err != nil {
		t.Fatalf("generate: %v", err)
	}
	page := gunzip(t, filepath.Join(dir, "man", "semrun.1.gz"))
	status, env, example := strings.Index(page, "\n.SH \"EXIT STATUS\"\n"), strings.Index(page, "\n.SH \"ENVIRONMENT\"\n"), strings.Index(page, "\n.SH EXAMPLE\n")
	if status < 0 || env < status || example < env {
		t.Fatalf("semrun.1: got EXIT STATUS at %d, ENVIRONMENT at %d, EXAMPLE at %d; want them in that order", status, env, example)
	}
	terms := []string{"75", "112", "125", "126", "127", "128+N", "SEMRUN_KEY", "SEMRUN_REDIS_PASSWORD", "SEMRUN_HELD_KEY", "SEMRUN_FENCING_TOKEN"}
	for _, sec := range cmd.ManSections(cmd.NewCmdRoot(cmd.System())) {
		for _, e := range sec.Entries {
			terms = append(terms, e.Term)
		}
	}
	for _, term := range terms {
		if !strings.Contains(page[status:example], ".TP\n\\fB"+term+"\\fP\n") {
			t.Errorf("semrun.1: %s is missing from EXIT STATUS and ENVIRONMENT", term)
		}
	}
}

// TestGenerateReplaces checks that a page of a command that is gone does not
// survive a new run.
func TestGenerateReplaces(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "man", "semrun-gone.1.gz")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := generate(dir); err != nil {
		t.Fatalf("generate: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale page %s: got err %v, want it removed", stale, err)
	}
}

// TestVersionLdflags builds semrun with the version, commit and date set as
// .goreleaser.yaml sets them, and checks that `semrun version` prints them.
func TestVersionLdflags(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go tool to build with: %v", err)
	}
	if testing.Short() {
		t.Skip("builds semrun")
	}
	bin := filepath.Join(t.TempDir(), "semrun")
	const pkg = "github.com/semrun/semrun/cmd."
	ldflags := "-X " + pkg + "version=v9.9.9 -X " + pkg + "commit=0123abc -X " + pkg + "date=2001-02-03T04:05:06Z"
	// Not -trimpath nor CGO_ENABLED=0, as releases are built, and with
	// -race when the tests are: any other flags change every package's
	// build, and this build then compiles them all again (20s and more of
	// CPU, 2.5 minutes of the test suite with -trimpath); what -X sets is
	// the same.
	build := exec.Command(goTool, append(append([]string{"build"}, raceFlags...), "-ldflags", ldflags, "-o", bin, "github.com/semrun/semrun")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	version := exec.Command(bin, "version")
	// A program built with -race sleeps 1s before it exits.
	version.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	out, err := version.CombinedOutput()
	if err != nil {
		t.Fatalf("semrun version: %v\n%s", err, out)
	}
	const want = "semrun v9.9.9 commit 0123abc built 2001-02-03T04:05:06Z\n"
	if string(out) != want {
		t.Errorf("semrun version: got %q, want %q", out, want)
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}

// complete is what semrun offers a completion script for the word prefix.
func complete(t *testing.T, prefix string) string {
	t.Helper()
	root := cmd.NewCmdRoot(cmd.System())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"__complete", prefix})
	if err := root.Execute(); err != nil {
		t.Fatalf("semrun __complete %s: %v", prefix, err)
	}
	return out.String()
}
