//go:build unix

package cmd

import (
	"strings"
	"testing"

	"github.com/semrun/semrun/internal/redistest"
)

// TestAcquireWhoseKeeperNeverStarted: a keeper that exits before it keeps
// the hold leaves nothing held: acquire says so and exits 125, and the
// permit is free at once.
func TestAcquireWhoseKeeperNeverStarted(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	f := testFactory(t, "SEMRUN_REDIS_URL="+r.URL(), "SEMRUN_RESTART_FENCE=0")
	f.Self = "/bin/false"
	code, out, errOut := run(t, f, "acquire", "-k", "k")
	if code != exitFailure || out != "" || !strings.Contains(errOut, `key "k": its keeper did not start: it exited; nothing held`) {
		t.Errorf("acquire with a keeper that exits: got status %d, stdout %q, stderr %q; want 125, nothing printed, one line", code, out, errOut)
	}
	f = testFactory(t, "SEMRUN_REDIS_URL="+r.URL(), "SEMRUN_RESTART_FENCE=0")
	if code, _, errOut := run(t, f, "-k", "k", "--no-wait", "--", "true"); code != 0 {
		t.Errorf("a run after it: got status %d, stderr %q; want 0, the permit free", code, errOut)
	}
}
