package semaphoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

func ruleCapacityDisagreement(t *testing.T, b *Backend, _ semaphore.Store) {
	w := &Warnings{}
	st := b.Open(w.Warnf)
	key := UniqueKey(t)
	req := func(n int) semaphore.Request {
		return semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second, NoWait: true}
	}
	warning := func(asked, previous int) string {
		return fmt.Sprintf("key %q: this call asks for %s, the previous caller asked for %d", key, semaphore.Count(asked, "permit"), previous)
	}
	expect := func(when string, want ...string) {
		t.Helper()
		if got := w.Take(); !slices.Equal(got, want) {
			t.Errorf("warnings %s: got %q, want %q", when, got, want)
		}
	}

	Hold(t, st, req(2))
	Hold(t, st, req(2))
	expect("when all callers ask n=2")

	Hold(t, st, req(3)) // 2 held, 3 allowed: granted
	expect("after a caller asks n=3 where n=2 was asked", warning(3, 2))

	// A waiting caller that disagrees looks many times but warns once.
	wait := req(1)
	wait.NoWait = false
	if _, err := AcquireWithin(t, st, 400*time.Millisecond, wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Acquire n=1 with 3 held: got %v, want context.DeadlineExceeded", err)
	}
	expect("from one waiting Acquire that disagrees", warning(1, 3))
	if s := StatusOf(t, st, key); s.Capacity != 1 {
		t.Errorf("Status capacity after a caller asked n=1 and was refused: got %d, want 1 (the latest asked, granted or not)", s.Capacity)
	}

	// The store never admits more than the largest N asked for.
	if _, err := AcquireWithin(t, st, 5*time.Second, req(3)); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire n=3 with 3 held: got %v, want ErrBusy", err)
	}
	if s := StatusOf(t, st, key); s.Held != 3 || s.Capacity != 3 {
		t.Errorf("Status: got held %d capacity %d, want held 3 (the largest n asked), capacity 3", s.Held, s.Capacity)
	}
	expect("after n=3 where n=1 was asked last", warning(3, 1))

	// A waiter behind another waiter: both disagree with the last
	// caller (n=3), and each warns once.
	first := req(1)
	first.NoWait = false
	onWait, waiting := Signal()
	first.OnWait = func(semaphore.WaitState) { onWait() }
	firstDone, _ := StartAcquire(t, st, first, 30*time.Second)
	MustWait(t, firstDone, waiting, "waiting Acquire n=1 with 3 held")
	second := req(2)
	second.NoWait = false
	if _, err := AcquireWithin(t, st, 300*time.Millisecond, second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Acquire n=2 behind a waiter, 3 held: got %v, want context.DeadlineExceeded", err)
	}
	got := w.Take()
	if len(got) == 0 || got[0] != warning(1, 3) {
		t.Fatalf("warnings from a waiter asking n=1 after n=3: got %q, want %q first", got, warning(1, 3))
	}
	if !slices.Equal(got[1:], []string{warning(2, 1)}) {
		t.Errorf("warnings after the first waiter: got %q, want [%q]", got[1:], warning(2, 1))
	}
}

func ruleStatus(t *testing.T, b *Backend, st semaphore.Store) {
	ctx := Context(t, 10*time.Second)
	key, idle := UniqueKey(t), UniqueKey(t)

	infoA := semaphore.HolderInfo{Host: "host-a", PID: 101, Command: "backup --full /srv", Label: `https://ci.example/jobs/7 "ü" <&>`}
	infoB := semaphore.HolderInfo{Host: "host-b", PID: 202, Command: `say "hi there" {x} %d ü`}
	a := Hold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: infoA})
	c := Hold(t, b.Open(nil), semaphore.Request{Key: key, Permits: 2, TTL: 20 * time.Second, Holder: infoB})

	status, err := st.Status(ctx, []string{key, idle})
	if err != nil {
		t.Fatalf("Status: got error %v, want nil", err)
	}
	if len(status) != 2 {
		t.Fatalf("Status of 2 keys: got %d entries, want 2", len(status))
	}
	s := status[0]
	if s.Key != key || s.Capacity != 2 || s.Held != 2 || len(s.Holders) != 2 || len(s.Waiters) != 0 {
		t.Fatalf("Status: got key %q capacity %d held %d holders %d waiters %d, want %q, 2, 2, 2, 0",
			s.Key, s.Capacity, s.Held, len(s.Holders), len(s.Waiters), key)
	}
	want := map[int64]struct {
		info semaphore.HolderInfo
		ttl  time.Duration
	}{a.Token(): {infoA, 10 * time.Second}, c.Token(): {infoB, 20 * time.Second}}
	for _, h := range s.Holders {
		w, ok := want[h.Token]
		if !ok {
			t.Errorf("holder token: got %d, want one of %d, %d", h.Token, a.Token(), c.Token())
			continue
		}
		delete(want, h.Token)
		if !reflect.DeepEqual(h.HolderInfo, w.info) {
			t.Errorf("holder %d: got %+v, want %+v", h.Token, h.HolderInfo, w.info)
		}
		if h.Permits != 2 {
			t.Errorf("holder %d permits: got %d, want 2", h.Token, h.Permits)
		}
		if b.Kind.Leases && (h.ExpiresIn <= 0 || h.ExpiresIn > w.ttl) {
			t.Errorf("holder %d ExpiresIn: got %v, want in (0, %v]", h.Token, h.ExpiresIn, w.ttl)
		}
		if !b.Kind.Leases && h.ExpiresIn != 0 {
			t.Errorf("holder %d ExpiresIn: got %v, want 0 (a permit that does not expire while its holder lives)", h.Token, h.ExpiresIn)
		}
		if h.Age < 0 || h.Age > 5*time.Second {
			t.Errorf("holder %d Age: got %v, want in [0, 5s]", h.Token, h.Age)
		}
	}
	if i := status[1]; i.Key != idle || i.Capacity != 0 || i.Held != 0 || i.Holders == nil || len(i.Holders) != 0 || i.Waiters == nil || len(i.Waiters) != 0 {
		t.Errorf("Status of an unused key: got %+v, want key %q, capacity 0, held 0, empty non-nil holders and waiters", i, idle)
	}
	out, err := json.Marshal(status[1])
	if err != nil {
		t.Fatalf("json.Marshal(status): %v", err)
	}
	if !strings.Contains(string(out), `"holders":[]`) || !strings.Contains(string(out), `"waiters":[]`) {
		t.Errorf("JSON of an unused key: got %s, want \"holders\":[] and \"waiters\":[]", out)
	}

	// Released permits leave the status at once.
	Release(t, a)
	if s := StatusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != c.Token() || !reflect.DeepEqual(s.Holders[0].HolderInfo, infoB) {
		t.Errorf("Status after a holder released: got %+v, want only the holder with token %d", s, c.Token())
	}

	// Capacity is what the latest caller asked for, granted or not.
	Hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second})
	if s := StatusOf(t, st, key); s.Capacity != 3 || s.Held != 2 {
		t.Errorf("Status after a caller asked 3: got capacity %d held %d, want 3, 2", s.Capacity, s.Held)
	}
	Hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second})
	if _, err := acquireCtx(t, st, ctx, 10*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire asking n=1 with 3 held: got %v, want ErrBusy", err)
	}
	if s := StatusOf(t, st, key); s.Capacity != 1 || s.Held != 3 {
		t.Errorf("Status after callers asked 3 then 1: got capacity %d held %d, want 1, 3", s.Capacity, s.Held)
	}
}

func ruleRefusesInvalidRequests(t *testing.T, b *Backend, st semaphore.Store) {
	ctx := Context(t, 10*time.Second)
	var problems []string
	for _, req := range []semaphore.Request{
		{Key: "", Permits: 1, TTL: 5 * time.Second},
		{Key: "ctl\nkey", Permits: 1, TTL: 5 * time.Second},
		{Key: "bad\xffutf8", Permits: 1, TTL: 5 * time.Second},
		{Key: strings.Repeat("k", semaphore.MaxKeyLen+1), Permits: 1, TTL: 5 * time.Second},
		{Key: "zero-permits", Permits: 0, TTL: 5 * time.Second},
		{Key: "negative-permits", Permits: -1, TTL: 5 * time.Second},
		{Key: "zero-ttl", Permits: 1, TTL: 0},
		{Key: "sub-second-ttl", Permits: 1, TTL: 500 * time.Millisecond},
		{Key: "fractional-ms-ttl", Permits: 1, TTL: time.Second + 500*time.Microsecond},
		{Key: "day-long-ttl", Permits: 1, TTL: semaphore.MaxTTL + time.Millisecond},
		{Key: "too-many-permits", Permits: semaphore.MaxPermits + 1, TTL: 5 * time.Second},
		{Key: "weight-above-permits", Permits: 2, Weight: 3, TTL: 5 * time.Second},
		{Key: "negative-weight", Permits: 2, Weight: -1, TTL: 5 * time.Second},
		{Key: "negative-fence", Permits: 1, TTL: 5 * time.Second, RestartFence: -time.Second},
		{Key: "negative-replicas", Permits: 1, TTL: 5 * time.Second, MinReplicas: -1},
		{Key: "ctl-label", Permits: 1, TTL: 5 * time.Second, Holder: semaphore.HolderInfo{Label: "job\x1b[2J"}},
		{Key: "long-label", Permits: 1, TTL: 5 * time.Second, Holder: semaphore.HolderInfo{Label: strings.Repeat("l", semaphore.MaxLabel+1)}},
	} {
		for _, noWait := range []bool{true, false} {
			req.NoWait = noWait
			l, err := acquireCtx(t, st, ctx, 10*time.Second, req)
			var refused *semaphore.SettingError
			if !errors.As(err, &refused) || l != nil {
				problems = append(problems, fmt.Sprintf("Acquire(key %.20q, n=%d, weight=%d, ttl=%v, nowait=%v): got (lease %v, %v), want a *semaphore.SettingError",
					req.Key, req.Permits, req.Weight, req.TTL, noWait, l != nil, err))
			}
		}
	}
	if written := b.Written(); len(written) > 0 {
		problems = append(problems, fmt.Sprintf("written: got %q, want nothing", written))
	}
	if len(problems) > 0 {
		t.Fatalf("Acquire must refuse invalid requests and write nothing:\n%s", strings.Join(problems, "\n"))
	}
}
