//go:build unix

package cmd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOrderOfTheLineRefusedInTheUsersWords: a bad priority or age, and
// with --local any of the three, is 125 and one line naming the setting
// as the user set it; the command never runs.
func TestOrderOfTheLineRefusedInTheUsersWords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local := []string{"--local", "--lock-dir", filepath.Join(dir, "locks")}
	const noLine = ": the lock directory keeps no strict line to order (use Redis)\n"
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"-k", "k", "--priority", "101"}, "semrun: --priority 101: must be from -100 to 100\n"},
		{[]string{"SEMRUN_PRIORITY=-101"}, []string{"-k", "k"}, "semrun: SEMRUN_PRIORITY=-101: must be from -100 to 100\n"},
		{nil, []string{"-k", "k", "--priority-age", "1.5ms"}, "semrun: --priority-age 1.5ms: must be whole milliseconds from 0 (none) to 24h0m0s\n"},
		{[]string{"SEMRUN_PRIORITY_AGE=-1"}, []string{"-k", "k"}, "semrun: SEMRUN_PRIORITY_AGE=-1s: must be whole milliseconds from 0 (none) to 24h0m0s\n"},
		{nil, []string{"-k", "a", "-k", "b", "--supersede"}, "semrun: key \"a\": --supersede: takes one key, not 2\n"},
		{nil, append([]string{"-k", "k", "--priority", "5"}, local...), "semrun: --priority 5" + noLine},
		{nil, append([]string{"-k", "k", "--priority-age", "2s"}, local...), "semrun: --priority-age 2s" + noLine},
		{nil, append([]string{"-k", "k", "--supersede"}, local...), "semrun: --supersede" + noLine},
		{[]string{"SEMRUN_SUPERSEDE=true"}, append([]string{"-k", "k"}, local...), "semrun: SEMRUN_SUPERSEDE=true" + noLine},
		{nil, append([]string{"-k", "a", "-k", "b", "--priority", "-2"}, local...), "semrun: --priority -2" + noLine},
	} {
		ran := filepath.Join(dir, "ran")
		code, out, errOut := run(t, testFactory(t, tc.env...), append(tc.args, "--", "touch", ran)...)
		if code != exitFailure || out != "" || errOut != tc.want {
			t.Errorf("semrun %q with %v: got status %d, stdout %q, stderr %q; want 125, nothing, %q", tc.args, tc.env, code, out, errOut, tc.want)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatalf("semrun %q with %v: the command ran", tc.args, tc.env)
		}
	}
	// acquire too, and priority 0, everyone's, is no refusal.
	code, out, errOut := run(t, nil, append([]string{"acquire", "-k", "k", "--priority", "3"}, local...)...)
	if code != exitFailure || out != "" || errOut != "semrun: --priority 3"+noLine {
		t.Errorf("acquire --priority 3 --local: got status %d, stdout %q, stderr %q; want 125, nothing, one line", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, append(append([]string{"-k", "k", "--priority", "0"}, local...), "--", "true")...); code != 0 || errOut != "" {
		t.Errorf("--priority 0 --local: got status %d, stderr %q; want 0, nothing", code, errOut)
	}
}

// TestKeySetPriorityAge: key set takes --priority-age alone or with a
// capacity, from the command line only; a lock directory refuses it,
// and nothing is set then.
func TestKeySetPriorityAge(t *testing.T) {
	t.Parallel()
	local := []string{"--local", "--lock-dir", filepath.Join(t.TempDir(), "locks")}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"key", "set", "k"}, "semrun: --permits, --slots or --priority-age is required: the capacity to keep, from 1 to 1000000, the names of its slots, or the priority age\n"},
		// The variable is the runs'.
		{[]string{"SEMRUN_PRIORITY_AGE=1s"}, []string{"key", "set", "k"}, "semrun: --permits, --slots or --priority-age is required: the capacity to keep, from 1 to 1000000, the names of its slots, or the priority age\n"},
		{nil, []string{"key", "set", "k", "--priority-age", "25h"}, "semrun: --priority-age 25h0m0s: must be whole milliseconds from 0 (none) to 24h0m0s\n"},
		{nil, []string{"key", "set", "k", "--priority-age", "1s", "--permits", "0"}, "semrun: --permits 0: must be from 1 to 1000000\n"},
		{nil, append([]string{"key", "set", "k", "--priority-age", "1s"}, local...), "semrun: --priority-age 1s: the lock directory keeps no strict line to order (use Redis)\n"},
		{nil, append([]string{"key", "set", "k", "--priority-age", "0", "--permits", "3"}, local...), "semrun: --priority-age 0s: the lock directory keeps no strict line to order (use Redis)\n"},
	} {
		code, out, errOut := run(t, testFactory(t, tc.env...), tc.args...)
		if code != exitFailure || out != "" || errOut != tc.want {
			t.Errorf("semrun %q with %v: got status %d, stdout %q, stderr %q; want 125, nothing, %q", tc.args, tc.env, code, out, errOut, tc.want)
		}
	}
	// The capacity given with the age refused was not set.
	code, out, _ := run(t, nil, append([]string{"key", "show", "k"}, local...)...)
	if want := "key \"k\": no stored capacity; 0 held, 0 waiting\n"; code != 0 || out != want {
		t.Errorf("key show after a refused set: got status %d, %q; want 0, %q", code, out, want)
	}
}
