package cmd

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
)

// manTerms are the terms of the man page's section title.
func manTerms(t *testing.T, title string) map[string]bool {
	t.Helper()
	terms := map[string]bool{}
	for _, sec := range ManSections(NewCmdRoot(System())) {
		if sec.Title == title {
			for _, e := range sec.Entries {
				if e.Text == "" {
					t.Errorf("%s: %s has no text", title, e.Term)
				}
				terms[e.Term] = true
			}
			return terms
		}
	}
	t.Fatalf("the man page has no section %q", title)
	return nil
}

// Every status exitStatus gives has its entry in the man page's EXIT STATUS.
func TestManListsEveryExitStatus(t *testing.T) {
	t.Parallel()
	terms := manTerms(t, "EXIT STATUS")
	for _, err := range []error{
		&childExit{code: 3},
		&childExit{sig: syscall.SIGTERM},
		&busyError{code: defaultBusyExitCode},
		&lostError{key: "k", code: defaultLostExitCode, cause: semaphore.ErrLost},
		usageErrorf("bad flag"),
		&redisstore.NoServerError{Addr: "127.0.0.1:6379"},
		&runner.StartError{Command: "dir"},
		&runner.StartError{Command: "gone", NotFound: true},
		&interruptedError{key: "k", sig: syscall.SIGINT},
		&doctorError{failed: []string{"acl"}},
		&unreadableError{failed: 1, total: 2},
	} {
		code, sig, _ := exitStatus(err)
		term := strconv.Itoa(code)
		switch e := err.(type) {
		case *childExit:
			term = "S"
			if sig != 0 {
				term = "signal N"
			}
		case *interruptedError:
			if code != exitSignalBase+int(e.sig) {
				t.Errorf("%v: got status %d, want %d+%d", err, code, exitSignalBase, e.sig)
			}
			term = strconv.Itoa(exitSignalBase) + "+N"
		}
		if !terms[term] {
			t.Errorf("%T (%v): status %s is missing from the man page's EXIT STATUS, which has %v", err, err, term, terms)
		}
	}
}

// Every variable that sets a flag, the password variables, and every
// variable the command gets are in the man page's ENVIRONMENT.
func TestManListsEveryVariable(t *testing.T) {
	t.Parallel()
	terms := manTerms(t, "ENVIRONMENT")
	root := NewCmdRoot(System())
	for flag, name := range envNames {
		f := root.Flags().Lookup(flag)
		if f == nil {
			f = root.PersistentFlags().Lookup(flag)
		}
		if f != nil && !f.Hidden && !terms[name] {
			t.Errorf("%s (--%s) is missing from the man page's ENVIRONMENT", name, flag)
		}
	}
	for _, name := range secretVariables {
		if !terms[name] {
			t.Errorf("%s is missing from the man page's ENVIRONMENT", name)
		}
	}

	given := manTerms(t, "Variables the command gets")
	o := &runOptions{waitOptions: waitOptions{commonOptions: &commonOptions{f: &Factory{}}, key: "k", permits: 2}}
	env := o.childEnv(nil, []int64{7}, []semaphore.Slots{{Numbers: []int{0}, Names: []string{"a"}}})
	if len(env) == 0 {
		t.Fatal("childEnv gave the command no variable")
	}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !given[name] {
			t.Errorf("%s, which the command gets, is missing from the man page", name)
		}
	}
}
