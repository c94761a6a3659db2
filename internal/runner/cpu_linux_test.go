package runner

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/semrun/semrun/internal/clock"
)

// neverLapses is a lease that needs no renewal.
type neverLapses struct{}

func (neverLapses) Deadline() clock.Instant         { return clock.Instant{} }
func (neverLapses) Renew(ctx context.Context) error { return nil }
func (neverLapses) Bound() clock.Instant            { return clock.Instant{} }

var cpusLine = regexp.MustCompile(`Cpus_allowed_list:\s*(\S+)`)

// cpusOf is a /proc/PID/status file's Cpus_allowed_list.
func cpusOf(t *testing.T, status string) string {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	m := cpusLine.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no Cpus_allowed_list in %q", status, b)
	}
	return string(m[1])
}

// onOneCPU narrows every thread for f only; and a command started by a
// thread left narrow (one the widening missed) still gets every CPU semrun
// started with.
func TestCommandStartsOnTheCPUsSemrunStartedWith(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	want := cpusOf(t, "/proc/self/status")
	inside := 0
	onOneCPU(func() {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			t.Error(err)
		}
		inside = set.Count()
	})
	if inside != 1 {
		t.Errorf("inside onOneCPU: the thread may run on %d CPUs, want 1", inside)
	}
	if got := cpusOf(t, "/proc/self/status"); got != want {
		t.Errorf("after onOneCPU: the main thread may run on %s, want %s again", got, want)
	}

	one := before
	for cpu := range 1024 {
		if one.IsSet(cpu) {
			one.Zero()
			one.Set(cpu)
			break
		}
	}
	setThreadsCPUs(&one)
	defer setThreadsCPUs(&before)
	out := filepath.Join(t.TempDir(), "status")
	res, err := Run(context.Background(), Spec{
		Args: []string{"sh", "-c", "cat /proc/self/status > " + out}, Warnf: t.Logf,
	}, neverLapses{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: got %+v, %v; want exit 0", res, err)
	}
	if got := cpusOf(t, out); got != want {
		t.Errorf("the command may run on CPUs %s, want %s, semrun's at its start", got, want)
	}
}

// BenchmarkCatchSignals is why onOneCPU exists. Asking for a signal is a
// round trip between the caller's thread and the runtime's signal thread:
// on one CPU a switch of threads, across two the wake-up of an idle CPU.
// Compare the two with
//
//	go test -run '^$' -bench CatchSignals -count 10 ./internal/runner
func BenchmarkCatchSignals(b *testing.B) {
	sigs := caught()
	for _, bc := range []struct {
		name   string
		around func(func())
	}{
		{"across-cpus", func(f func()) { f() }},
		{"one-cpu", onOneCPU},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := make(chan os.Signal, 1)
			for b.Loop() {
				bc.around(func() { signal.Notify(c, sigs...) })
				b.StopTimer()
				signal.Reset(sigs...)
				b.StartTimer()
			}
		})
	}
}
