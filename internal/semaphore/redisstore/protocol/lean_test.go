package protocol

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
)

// A script leaves out of its reply what says nothing (0, an empty string,
// an empty list), and the store reads what is left out as that: each
// value costs Redis its making, at every call.
func TestRepliesLeaveOutWhatSaysNothing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			k := NewKeys(testPrefix, "lean-reply")
			res := runScript(t, b.c, k, AcquireArgs{ID: "A", Permits: 2, TTL: 10 * time.Second, Weight: 1, Meta: []byte("m")})
			flat, _ := res.([]any)
			var names []string
			for i := 0; i+1 < len(flat); i += 2 {
				name, _ := flat[i].(string)
				names = append(names, name)
				switch v := flat[i+1].(type) {
				case int64:
					if v == 0 {
						t.Errorf("acquire.lua answered %s 0", name)
					}
				case string:
					if v == "" {
						t.Errorf("acquire.lua answered %s ''", name)
					}
				case []any:
					if len(v) == 0 {
						t.Errorf("acquire.lua answered %s {}", name)
					}
				}
			}
			for _, none := range []string{"position", "moved", "full", "bad", "handed", "fenced", "over", "paused", "reason"} {
				if slices.Contains(names, none) {
					t.Errorf("acquire.lua answered %s for an uncontended grant: want it left out", none)
				}
			}
			r, err := DecodeAcquire(res)
			if err != nil || !r.Granted || r.Token <= 0 || r.Position != 0 || r.Bad != nil || r.Handed != nil || r.Left <= 0 {
				t.Errorf("DecodeAcquire: got %+v, %v; want a grant, and 0 or nothing for what was left out", r, err)
			}
			rel, err := DecodeRelease(runScript(t, b.c, k, ReleaseArgs{ID: "A"}))
			if err != nil || !rel.Released || rel.Cooling != 0 {
				t.Errorf("DecodeRelease: got %+v, %v; want released", rel, err)
			}
		})
	}
}

// What is left out of a reply is read as 0; anything else than the
// script's own fields, each once, is still refused.
func TestDecodeReplyRefusesWhatIsNotAReply(t *testing.T) {
	var token, left int64
	var bad []string
	fields := func() map[string]any { return map[string]any{"token": &token, "left": &left, "bad": &bad} }
	if err := decodeReply("x.lua", []any{"token", int64(7)}, fields()); err != nil || token != 7 || left != 0 || bad != nil {
		t.Errorf("a reply without left and bad: got %v (token %d, left %d, bad %q), want them 0", err, token, left, bad)
	}
	for _, res := range []any{
		[]any{"token", int64(1), "token", int64(2)},
		[]any{"token", int64(1), "other", int64(2)},
		[]any{"token"},
		[]any{"token", "1"},
		[]any{"token", int64(1), "left", int64(1), "bad", []any{}, "more", int64(1)},
		"token",
	} {
		if err := decodeReply("x.lua", res, fields()); err == nil {
			t.Errorf("decodeReply(%v): got nil, want an error", res)
		}
	}
}

// An argument whose value says nothing (0, false; an exit status of -1,
// unknown) is not sent: each one costs Redis its making, and the scripts
// read one left out as that.
func TestArgumentsLeaveOutWhatSaysNothing(t *testing.T) {
	k := NewKeys(testPrefix, "lean-args")
	sent := func(a Args) string {
		var names []string
		argv := a.argv(k)
		for i := 0; i < len(argv); i += 2 {
			names = append(names, argv[i].(string))
		}
		return strings.Join(names, " ")
	}
	for _, tc := range []struct {
		args Args
		want string
	}{
		{AcquireArgs{ID: "A", Permits: 1, TTL: time.Second, Weight: 1}, "id permits ttl meta weight wait wake fence line"},
		{AcquireArgs{ID: "A", Permits: 1, TTL: time.Second, Weight: 1, Bound: time.Second, Cool: time.Second, Waited: time.Second,
			FenceWait: time.Second, Quiet: true}, "id permits ttl meta weight wait wake fence line bound cool waited fencewait quiet"},
		{ReleaseArgs{ID: "A", Exit: -1}, "id wake"},
		{ReleaseArgs{ID: "A"}, "id wake exit"},
		{ReleaseArgs{ID: "A", Cool: time.Second, Exit: 3, Timeout: true, Quiet: true}, "id wake cool timeout quiet exit"},
		{RenewArgs{ID: "A", TTL: time.Second}, "id ttl"},
		{RenewArgs{ID: "A", TTL: time.Second, Fence: time.Second, Bound: time.Second, Cool: time.Second}, "id ttl fence bound cool"},
		{HoldArgs{Op: "renew", ID: "A", Share: "s"}, "op id hold wake share"},
		{HoldArgs{Op: "begin", ID: "A", TTL: time.Second}, "op id hold wake share ttl meta"},
	} {
		if got := sent(tc.args); got != tc.want {
			t.Errorf("%T%+v sends %q, want %q", tc.args, tc.args, got, tc.want)
		}
	}
}

// The commands an uncontended grant and release make Redis run: the
// line's length is read once, and the line's keys are left alone while
// nobody waits (keepalive looks at the holders, info, token and waiters
// only). A command a script calls costs Redis more than the command.
func TestUncontendedRunLeavesTheLineAlone(t *testing.T) {
	srv := redistest.New(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	k := NewKeys(testPrefix, "lean-run")
	// The scripts loaded, and the key's log made, as by any earlier run.
	runScript(t, c, k, AcquireArgs{ID: "W", Permits: 2, TTL: 10 * time.Second, Weight: 1, Wait: time.Second})
	runScript(t, c, k, ReleaseArgs{ID: "W"})
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := DecodeAcquire(runScript(t, c, k, AcquireArgs{ID: "A", Permits: 2, TTL: 10 * time.Second, Weight: 1, Wait: time.Second})); err != nil || !r.Granted {
		t.Fatalf("acquire: got %+v, %v; want a grant", r, err)
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for l := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(l), "cmdstat_"), ":calls=")
		if ok {
			calls[name], _ = strconv.Atoi(stats[:strings.IndexByte(stats, ',')])
		}
	}
	// ZCARD: the line, and the holders (used).
	if calls["pttl"] != 4 || calls["zcard"] > 3 {
		t.Errorf("an uncontended grant ran PTTL %d times and ZCARD %d times, want 4 (holders, info, token, waiters) and at most 3", calls["pttl"], calls["zcard"])
	}
}
