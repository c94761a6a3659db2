package redisstore

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// TestHoldRecordBesideItsKey: a hold's record shares its key's hash slot,
// is named after no secret, and outlives the key's other records by a day.
func TestHoldRecordBesideItsKey(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	s := newStore(t, srv.URL(), Options{})
	key := "a{b}c"
	l := acquire(t, s, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second, NoWait: true})
	h, err := s.Hold(ctxTimeout(t, 5*time.Second), l, semaphore.HolderInfo{Host: "h", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	k := protocol.NewKeys(testPrefix, key)
	rec := k.HoldRecord(h.Secret)
	if hashSlot(rec) != hashSlot(k.Holders) {
		t.Errorf("hold record %q: slot %d, want its key's %d", rec, hashSlot(rec), hashSlot(k.Holders))
	}
	for _, name := range scanKeys(t, raw, "*") {
		if strings.Contains(name, h.Secret) {
			t.Errorf("key %q names the hold's secret", name)
		}
	}
	ttl, err := raw.PTTL(ctxTimeout(t, 5*time.Second), rec).Result()
	if err != nil || ttl < protocol.HoldLife-time.Minute || ttl > protocol.HoldLife {
		t.Errorf("hold record's PTTL: got (%v, %v), want about %v", ttl, err, protocol.HoldLife)
	}
	if _, _, err := s.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "test"}); err != nil {
		t.Fatal(err)
	}
	// The key's records expire with its last lease; the hold's stays.
	if ttl, err := raw.PTTL(ctxTimeout(t, 5*time.Second), rec).Result(); err != nil || ttl < protocol.HoldLife-time.Minute {
		t.Errorf("hold record's PTTL once ended: got (%v, %v), want about %v", ttl, err, protocol.HoldLife)
	}
}

// TestHoldKeeperOfTheLongestLabel: the largest keeper's record a caller
// makes (a long host, a label of MaxLabel bytes that JSON escapes) comes
// back whole to whoever attaches.
func TestHoldKeeperOfTheLongestLabel(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	keeper := semaphore.HolderInfo{Host: strings.Repeat("<", 255), PID: 1 << 30, MaxRuntime: semaphore.MaxMaxRuntime,
		Label: strings.Repeat("<", semaphore.MaxLabel)}
	l := acquire(t, s, semaphore.Request{Key: "k", Permits: 1, TTL: 5 * time.Second, NoWait: true})
	h, err := s.Hold(ctxTimeout(t, 5*time.Second), l, keeper)
	if err != nil {
		t.Fatal(err)
	}
	_, info, err := s.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatal(err)
	}
	keeper.Hold = true
	if !reflect.DeepEqual(info.Keeper, keeper) {
		t.Errorf("Attach's keeper: got %+v, want %+v", info.Keeper, keeper)
	}
}

// TestHoldSharesNeverShortenTheLease: each share renews with the hold's
// own lease, from when it renews: the permit lasts as long as the latest.
func TestHoldSharesNeverShortenTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	s := newStore(t, srv.URL(), Options{})
	key, h := newHold(t, s, 20*time.Second)
	k := protocol.NewKeys(testPrefix, key)
	score := func() float64 {
		v, err := raw.ZScore(ctxTimeout(t, 5*time.Second), k.Holders, protocol.Member(h.Secret)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	run, info, err := s.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil || info.TTL != 20*time.Second {
		t.Fatalf("Attach: got (%+v, %v), want the hold's lease of 20s", info, err)
	}
	before := score()
	// A lease pushed far out (a renewal with a longer lease, say) is not
	// pulled in by a share's renewal.
	if err := raw.ZAdd(ctxTimeout(t, 5*time.Second), k.Holders, redisZ(before+60_000, protocol.Member(h.Secret))).Err(); err != nil {
		t.Fatal(err)
	}
	if err := run.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := score(); got != before+60_000 {
		t.Errorf("lease after a share renewed: got %v, want %v, unshortened", got, before+60_000)
	}
}

// TestHoldSharesAreBounded: a hold takes at most MaxShares processes at
// once; one more is refused, not let in to grow its record without end.
func TestHoldSharesAreBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	_, h := newHold(t, s, 20*time.Second)
	for i := range protocol.MaxShares {
		if _, _, err := s.Attach(ctxTimeout(t, 5*time.Second), h, false); err != nil {
			t.Fatalf("Attach %d: %v", i+1, err)
		}
	}
	_, _, err := s.Attach(ctxTimeout(t, 5*time.Second), h, false)
	var ended *semaphore.HoldEndedError
	if err == nil || errors.As(err, &ended) || !strings.Contains(err.Error(), "attached to this hold already") {
		t.Fatalf("Attach %d: got %v, want refused: too many attached", protocol.MaxShares+1, err)
	}
}

// TestHoldRenewalsWaitForReplicas: a hold granted with min replicas renews
// as its grant did, for every process attached: a renewal no replica has
// does not count, so a failover cannot bring back an older lease.
func TestHoldRenewalsWaitForReplicas(t *testing.T) {
	t.Parallel()
	master, _, replica, _ := replicaPair(t, 0)
	patient := newStore(t, master.URL(), Options{ConnectTimeout: 20 * time.Second})
	key := uniqueKey(t)
	l, err := patient.Acquire(ctxTimeout(t, 30*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, MinReplicas: 1})
	if err != nil {
		t.Fatalf("Acquire with a replica online: %v", err)
	}
	h, err := patient.Hold(ctxTimeout(t, 20*time.Second), l, semaphore.HolderInfo{})
	if err != nil {
		t.Fatal(err)
	}
	run, _, err := patient.Attach(ctxTimeout(t, 30*time.Second), h, false)
	if err != nil {
		t.Fatalf("Attach with a replica online: %v", err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatalf("pause the replica: %v", err)
	}
	defer replica.Resume()
	before := run.Deadline()
	if err := run.Renew(ctxTimeout(t, 5*time.Second)); err == nil || errors.Is(err, semaphore.ErrLost) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Errorf("a share's Renew with the replica stopped: got %v, want a failure naming the replicas", err)
	}
	if run.Deadline() != before {
		t.Errorf("Deadline after a renewal no replica had: moved, want unchanged")
	}
	if _, _, err := patient.Attach(ctxTimeout(t, 5*time.Second), h, false); err == nil || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Errorf("Attach with the replica stopped: got %v, want a failure naming the replicas", err)
	}
}

// TestHoldSharesPushedBackWithTheLease: after a silence the key cannot
// tell from a clock step (Redis paused, the host's clock stepped), a run's
// share is pushed back as the holders' leases are: an end then still
// waits for the run, whose command may well be running.
func TestHoldSharesPushedBackWithTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	key, h := newHold(t, s, 2*time.Second)
	run, _, err := s.Attach(ctxTimeout(t, 5*time.Second), h, false)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the share's lease, and than half of it
	if _, _, err := s.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "test"}); err != nil {
		t.Fatal(err)
	}
	busy := semaphore.Request{Key: key, Permits: 1, TTL: 2 * time.Second, NoWait: true}
	if _, err := semaphoretest.AcquireWithin(t, s, 5*time.Second, busy); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire after an end that followed a silence, the run still attached: got %v, want ErrBusy", err)
	}
	var ended *semaphore.HoldEndedError
	if err := run.Renew(ctxTimeout(t, 5*time.Second)); !errors.As(err, &ended) {
		t.Fatalf("run's Renew: got %v, want the hold ended", err)
	}
	if err := run.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	hold(t, s, busy)
}

// newHold takes a permit of a new key with a lease of ttl and makes it a
// hold, as semrun acquire does; nobody is attached yet.
func newHold(t *testing.T, s *Store, ttl time.Duration) (string, semaphore.Handle) {
	t.Helper()
	key := uniqueKey(t)
	l := acquire(t, s, semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
	h, err := s.Hold(ctxTimeout(t, 5*time.Second), l, semaphore.HolderInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return key, h
}

// TestHoldMinHoldCools: a hold whose request had a min hold stays taken
// until it passed, as a run's permit does: when it ends (its exit status
// unknown: several steps ran), and when its keeper and acquire died and
// nobody called the key since (SIGKILL: no renewal, no release).
func TestHoldMinHoldCools(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	const ttl, minHold = time.Second, 6 * time.Second
	start := func(key string) (semaphore.Handle, semaphore.Lease) {
		l := acquire(t, s, semaphore.Request{Key: key, Permits: 1, TTL: ttl, MinHold: minHold})
		h, err := s.Hold(ctxTimeout(t, 5*time.Second), l, semaphore.HolderInfo{Host: "keeper", PID: 1})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		k, _, err := s.Attach(ctxTimeout(t, 5*time.Second), h, true)
		if err != nil {
			t.Fatalf("Attach the keeper: %v", err)
		}
		return h, k
	}
	busy := func(key, when string) {
		t.Helper()
		if _, err := s.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("%s: no-wait Acquire: got %v, want ErrBusy", when, err)
		}
		if st := statusOf(t, s, key); len(st.Cooling) != 1 || st.Cooling[0].ExitStatus != -1 || len(st.Holders) != 0 {
			t.Errorf("%s: status: got %+v, want one cooling, its exit status unknown", when, st)
		}
	}

	const ended = "ended"
	h, endedKeeper := start(ended)
	end, now, err := s.EndHold(ctxTimeout(t, 5*time.Second), h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || !now || end.State != semaphore.HoldReleased {
		t.Fatalf("EndHold within the min hold: got (%+v, %v, %v), want released now", end, now, err)
	}
	busy(ended, "a hold ended within its min hold")
	var e *semaphore.HoldEndedError
	if err := endedKeeper.Renew(ctxTimeout(t, 5*time.Second)); !errors.As(err, &e) || e.End.State != semaphore.HoldReleased {
		t.Errorf("its keeper's renewal: got %v, want the hold released", err)
	}
	if err := endedKeeper.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Errorf("its keeper letting go: %v", err)
	}
	busy(ended, "once its keeper let go")

	const crashed = "crashed"
	start(crashed) // acquire and the keeper die: nobody renews or releases
	time.Sleep(2*ttl + 500*time.Millisecond)
	busy(crashed, "a hold whose keeper died, after a silence")
}
