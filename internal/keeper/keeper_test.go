//go:build unix

package keeper

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// adoptVar makes this test binary play a keeper (adopted), which reports
// on its ready pipe what it kept of its parent's.
const adoptVar = "KEEPER_TEST_ADOPTED"

// strayFD is a descriptor the test hands its keeper without meaning to,
// as a shell's 7>&1 does: open, and not close-on-exec.
const strayFD = 77

func TestMain(m *testing.M) {
	if os.Getenv(adoptVar) != "" {
		os.Exit(adopted())
	}
	os.Exit(m.Run())
}

// adopted is the keeper's side: Adopt, Settle, and say what is left of its
// parent's: "ok" when nothing.
func adopted() int {
	own, err := os.Open(os.DevNull) // Go's own, as the runtime's are: close-on-exec
	if err != nil {
		return 1
	}
	p, err := Adopt()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var left []string
	if _, err := unix.FcntlInt(strayFD, unix.F_GETFD, 0); err == nil {
		left = append(left, fmt.Sprintf("descriptor %d still open", strayFD))
	}
	if _, err := unix.FcntlInt(own.Fd(), unix.F_GETFD, 0); err != nil {
		left = append(left, "its own file closed")
	}
	null, _ := os.Stat(os.DevNull)
	for _, f := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		if fi, err := f.Stat(); err != nil || !os.SameFile(fi, null) {
			left = append(left, f.Name()+" not the null device")
		}
	}
	if err := Settle(); err != nil {
		left = append(left, err.Error())
	}
	if dir, _ := os.Getwd(); dir != "/" {
		left = append(left, "directory "+dir)
	}
	if len(left) == 0 {
		p.Kept()
	} else {
		p.Say(strings.Join(left, "; "))
	}
	p.Printed() // until the test lets it go
	return 0
}

// TestAdoptKeepsNothingOfTheCallers: a keeper that read its message has
// closed what it inherited but its pipes (a pipe its caller's reader
// waits on ends), and no descriptor of its own; its stdio is the null
// device, and Settle moves it to /.
func TestAdoptKeepsNothingOfTheCallers(t *testing.T) {
	if _, err := unix.FcntlInt(strayFD, unix.F_GETFD, 0); err == nil {
		t.Skipf("descriptor %d is in use in the test process", strayFD)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Open across exec, as a shell's redirection is.
	if err := unix.Dup2(int(w.Fd()), strayFD); err != nil {
		t.Fatal(err)
	}
	w.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	k, err := Start(self, "keeper-test", append(os.Environ(), adoptVar+"=1"), nil)
	unix.Close(strayFD) // the keeper has its copy, if it kept one
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.Tell(Message{Args: []string{"-k", "k"}}); err != nil {
		t.Fatal(err)
	}
	if err := k.Await(10 * time.Second); err != nil {
		t.Fatalf("the keeper: %v; want nothing of its parent's kept", err)
	}
	// The keeper still runs (it waits for Printed): the pipe ends all the same.
	eof := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(r)
		eof <- err
	}()
	select {
	case err := <-eof:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe handed to the keeper still open 10s after it adopted; want it closed")
	}
	if err := k.Printed(); err != nil {
		t.Fatal(err)
	}
}
