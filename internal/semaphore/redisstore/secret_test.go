package redisstore

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// readAll reads every key of c's server the way a user allowed to read
// them all would (a monitoring user, another runner): names, fields,
// members and values, each a string.
func readAll(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	var out []string
	iter := c.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		out = append(out, key)
		kind, err := c.Type(ctx, key).Result()
		if err != nil {
			t.Fatalf("TYPE %s as a reader: %v", key, err)
		}
		switch kind {
		case "string":
			out = append(out, c.Get(ctx, key).Val())
		case "hash":
			for f, v := range c.HGetAll(ctx, key).Val() {
				out = append(out, f, v)
			}
		case "zset":
			for _, z := range c.ZRangeWithScores(ctx, key, 0, -1).Val() {
				out = append(out, fmt.Sprint(z.Member), fmt.Sprint(z.Score))
			}
		case "list":
			out = append(out, c.LRange(ctx, key, 0, -1).Val()...)
		case "set":
			out = append(out, c.SMembers(ctx, key).Val()...)
		case "stream":
			for _, m := range c.XRange(ctx, key, "-", "+").Val() {
				out = append(out, m.ID)
				for f, v := range m.Values {
					out = append(out, f, fmt.Sprint(v))
				}
			}
		default:
			t.Fatalf("key %s: type %s, which the test does not read", key, kind)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN as a reader: %v", err)
	}
	return out
}

// candidates are what a reader could try as a secret: every string it
// read, and every word of each (runs of letters and digits).
func candidates(read []string) []string {
	word := regexp.MustCompile(`[A-Za-z0-9]+`)
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && len(s) <= 512 && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range read {
		add(s)
		for _, w := range word.FindAllString(s, -1) {
			add(w)
		}
	}
	return out
}

// TestReadingTheKeysGrantsNothing: a user who may read every key under the
// prefix, and only read, learns no permit id or hold's secret, and nothing
// it read lets it, or a user who may run scripts too, renew or release a
// permit, take a waiter's turn, run under a hold or end it.
func TestReadingTheKeysGrantsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	st := newStore(t, srv.URL(), Options{})
	ctx := ctxTimeout(t, 60*time.Second)
	key := uniqueKey(t)
	k := protocol.NewKeys(testPrefix, key)
	const n = 4

	// What the key holds: a run, a permit cooling, a hold with its keeper
	// and a run under its handle, a permit handed to a waiter that has
	// yet to take it, and a waiter in line. Every permit is taken.
	run := hold(t, st, semaphore.Request{Key: key, Permits: n, TTL: 30 * time.Second, Holder: semaphore.HolderInfo{Host: "runner-host", PID: 11}})
	cooled := acquire(t, st, semaphore.Request{Key: key, Permits: n, TTL: 30 * time.Second, MinHold: time.Hour})
	if err := cooled.Finish(ctx, 0); err != nil {
		t.Fatal(err)
	}
	held := acquire(t, st, semaphore.Request{Key: key, Permits: n, TTL: 30 * time.Second})
	h, err := st.Hold(ctx, held, semaphore.HolderInfo{Host: "keeper-host", PID: 12})
	if err != nil {
		t.Fatal(err)
	}
	keeper, _, err := st.Attach(ctx, h, true)
	if err != nil {
		t.Fatal(err)
	}
	step, _, err := st.Attach(ctx, h, false)
	if err != nil {
		t.Fatal(err)
	}
	last := acquire(t, st, semaphore.Request{Key: key, Permits: n, TTL: 30 * time.Second})
	const handedID, waiterID = "HANDEDOVERWAITERNEVERLOOKS", "WAITERINLINEWHOSEIDISTHIS2"
	for _, id := range []string{handedID, waiterID} {
		if r := runAcquireArgs(t, raw, k, protocol.AcquireArgs{ID: id, Permits: n, TTL: 30 * time.Second, Wait: time.Minute}); r.Position == 0 {
			t.Fatalf("waiter %s: got %+v, want it in line", id, r)
		}
	}
	release(t, last) // the first waiter is handed it: its turn waits in its wake list
	handedAt := time.Now()
	// The ids that grant a permit, a turn or a hold (a share's name in a
	// hold's record grants nothing without the hold's secret).
	secrets := []string{run.(*lease).id, cooled.(*lease).id, h.Secret, handedID, waiterID}
	before := statusOf(t, st, key)
	if before.Held != n || len(before.Cooling) != 1 || len(before.Waiters) != 1 {
		t.Fatalf("status before the reader: got %+v, want %d held, one cooling, one waiter", before, n)
	}

	if err := raw.Do(ctx, "ACL", "SETUSER", "reader", "on", ">reader-pw", "resetkeys", "%R~*", "resetchannels", "-@all", "+@read").Err(); err != nil {
		t.Fatal(err)
	}
	reader := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "reader", Password: "reader-pw", Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = reader.Close() })
	if err := reader.Set(ctx, k.Token, 1, 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET as the reader: got %v, want NOPERM (a user who may only read)", err)
	}
	read := readAll(t, reader)
	for _, s := range read {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("the reader read %q, which holds the id %q", s, secret)
			}
		}
	}

	tokens := func(s semaphore.KeyStatus) []int64 {
		var out []int64
		for _, h := range s.Holders {
			out = append(out, h.Token)
		}
		slices.Sort(out)
		return out
	}

	// Everything read, tried as a secret by a user who may also run the
	// scripts (the store's own): none works.
	tries := candidates(read)
	if len(tries) < 20 {
		t.Fatalf("the reader read %d strings, %d to try: want the keys' names, members and records", len(read), len(tries))
	}
	for _, c := range tries {
		l := &lease{s: st, key: key, keys: k, id: c, ttl: 30 * time.Second}
		if err := l.Renew(ctx); !errors.Is(err, semaphore.ErrLost) {
			t.Errorf("renewal of %q, read from the keys: got %v, want ErrLost", c, err)
		}
		if err := l.Finish(ctx, 0); err != nil {
			t.Errorf("release of %q: got %v, want nil (nothing to give back)", c, err)
		}
		r := runAcquireArgs(t, raw, k, protocol.AcquireArgs{ID: c, Permits: n, TTL: 30 * time.Second})
		// Past the claim, a loaded machine's, the permit handed over has
		// lapsed unclaimed and may be free: a grant of a new permit is
		// then no one's; a grant of a permit someone had never is.
		taken := r.Granted && (time.Since(handedAt) <= protocol.Claim || slices.Contains(tokens(before), r.Token))
		if r.Granted {
			runScript(t, raw, k, protocol.ReleaseArgs{ID: c})
		}
		if taken {
			t.Errorf("acquire.lua with the id %q, read from the keys, on a key whose permits are all taken: got %+v, want no grant (no turn taken)", c, r)
		}
		forged := semaphore.Handle{Store: semaphore.RedisStore, Key: key, Secret: c}
		if _, _, err := st.Attach(ctx, forged, false); !isLost(err) {
			t.Errorf("a run under a handle whose secret is %q, read from the keys: got %v, want the hold lost", c, err)
		}
		if end, now, err := st.EndHold(ctx, forged, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "reader"}); err != nil || now || !isLost(&semaphore.HoldEndedError{End: end}) {
			t.Errorf("the end of a hold whose secret is %q, read from the keys: got (%+v, %v, %v), want lost or unknown, not now", c, end, now, err)
		}
	}

	// As it was: every permit, the cooling, the hold and the line.
	after := statusOf(t, st, key)
	same := after.Held == n && len(after.Cooling) == 1 && len(after.Waiters) == 1 && slices.Equal(tokens(before), tokens(after))
	if !same && time.Since(handedAt) > protocol.Claim {
		// A loaded machine took longer than the claim: the handed-over
		// permit lapsed unclaimed, as it must, and the line moved on (the
		// waiter, handed it in turn, never claims it either). The run's,
		// the hold's and the cooling permits stay as they were, and no
		// more are taken.
		got := tokens(after)
		same = (after.Held == n || after.Held == n-1) && len(after.Cooling) == 1 && len(after.Waiters) <= 1 &&
			slices.Contains(got, run.Token()) && slices.Contains(got, held.Token())
	}
	if !same {
		t.Errorf("status after the reader's tries: got %+v, want it as before: %+v", after, before)
	}
	for what, l := range map[string]semaphore.Lease{"the run": run, "the hold's keeper": keeper, "the run under the handle": step} {
		if err := l.Renew(ctx); err != nil {
			t.Errorf("%s's renewal after the reader's tries: got %v, want nil", what, err)
		}
	}
	end, now, err := st.EndHold(ctx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	if err != nil || !now || end.State != semaphore.HoldReleased {
		t.Errorf("semrun release with the true handle: got (%+v, %v, %v), want released now", end, now, err)
	}
}

// isLost tells a *semaphore.HoldEndedError of a hold lost, or unknown to
// the store: what a made-up handle finds.
func isLost(err error) bool {
	var ended *semaphore.HoldEndedError
	return errors.As(err, &ended) && (ended.End.State == semaphore.HoldLost || ended.End.State == semaphore.HoldUnknown)
}
