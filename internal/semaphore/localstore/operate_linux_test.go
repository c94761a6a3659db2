package localstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// A hold keeps the public id its permit had; revoking it ends the hold,
// revoked, with the reason, which every process attached learns at its
// next renewal, and which release then finds.
func TestLocalRevokeEndsAHold(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Second}
	l := acquire(t, st, req)
	id := statusOf(t, st, key).Holders[0].ID
	h, err := st.Hold(ctxTimeout(t, 5*time.Second), l, keeperInfo)
	if err != nil {
		t.Fatalf("Hold: got error %v", err)
	}
	if s := statusOf(t, st, key); len(s.Holders) != 1 || !s.Holders[0].Hold || s.Holders[0].ID != id {
		t.Fatalf("Status of the hold: got holders %+v, want its keeper, with its permit's id %s", s.Holders, id)
	}
	run, _, err := st.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { _ = run.Release(ctxTimeout(t, 5*time.Second)) })
	abandon(l) // as semrun acquire exits: the run holds it now

	if err := st.Revoke(ctxTimeout(t, 5*time.Second), key, id, "rotate keys", false); err != nil {
		t.Fatalf("Revoke of the hold: got %v, want nil", err)
	}
	var ended *semaphore.HoldEndedError
	if err := run.Renew(ctxTimeout(t, 5*time.Second)); !errors.As(err, &ended) || ended.End.State != semaphore.HoldRevoked || ended.End.Why != "rotate keys" {
		t.Fatalf("Renew of a run under the revoked hold: got %v, want the hold ended, revoked: rotate keys", err)
	}
	if _, err := acquireFor(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire before the run let go: got %v, want ErrBusy", err)
	}
	end, now, err := st.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || now || end.State != semaphore.HoldRevoked {
		t.Errorf("EndHold after the revoke: got %+v, %v, %v; want the revoke's end, not this one", end, now, err)
	}
	if err := st.Revoke(ctxTimeout(t, 5*time.Second), key, id, "", false); !errors.Is(err, semaphore.ErrNoHolder) {
		t.Errorf("Revoke of the hold once revoked: got %v, want ErrNoHolder", err)
	}
}
