package redisstore

import (
	"errors"
	"os"
	"path/filepath"
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

// documentedACL is every ACL SETUSER line of docs/configuration.md, by
// user, as its words.
func documentedACL(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("read docs/configuration.md: %v", err)
	}
	return aclLines(t, "docs/configuration.md", doc, `(?m)^ACL SETUSER .*$`)
}

// aclLines reads the ACL SETUSER lines pattern finds in text, by user.
func aclLines(t *testing.T, where string, text []byte, pattern string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, line := range regexp.MustCompile(pattern).FindAll(text, -1) {
		f := strings.Fields(string(line))
		i := slices.Index(f, "SETUSER")
		if i < 0 || i+1 >= len(f) {
			t.Fatalf("%s: %q: no user after ACL SETUSER", where, line)
		}
		if _, twice := out[f[i+1]]; twice {
			t.Fatalf("%s: user %s set twice", where, f[i+1])
		}
		out[f[i+1]] = f[i:]
	}
	return out
}

// keySelectors are the key patterns of an ACL SETUSER line's words.
func keySelectors(words []string) []string {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, "~") || strings.HasPrefix(w, "%") {
			out = append(out, w)
		}
	}
	return out
}

// TestDocumentedACLUsers: the two Redis users docs/configuration.md gives,
// applied as written to a Redis, run everything semrun does; the run's
// user changes no key's settings, whatever characters a key's name holds
// (a name with ":hold:" or ":wake:" in it once matched the run's patterns
// of hold records and wake lists, policy included). acl.txtar runs the
// same lines with the commands themselves.
func TestDocumentedACLUsers(t *testing.T) {
	t.Parallel()
	lines := documentedACL(t)
	operator, runner := lines["semrun"], lines["runner"]
	if operator == nil || runner == nil {
		t.Fatalf("docs/configuration.md: got users %v, want semrun (an operator's) and runner (a run's)", slices.Sorted(func(yield func(string) bool) {
			for u := range lines {
				if !yield(u) {
					return
				}
			}
		}))
	}
	// The patterns are the store's own, which doctor prints.
	if got, want := keySelectors(operator), protocol.OperatorKeys("semrun:"); !slices.Equal(got, want) {
		t.Errorf("the operator's key patterns: got %q, want %q", got, want)
	}
	if got, want := keySelectors(runner), protocol.RunKeys("semrun:"); !slices.Equal(got, want) {
		t.Errorf("the run's key patterns: got %q, want %q", got, want)
	}
	// acl.txtar gives Redis the same lines, passwords aside.
	script, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "script", "acl.txtar"))
	if err != nil {
		t.Fatalf("read testdata/script/acl.txtar: %v", err)
	}
	ran := aclLines(t, "acl.txtar", script, `(?m)^redis ACL SETUSER \S+ on .*$`)
	for user, words := range lines {
		got := ran[user]
		if len(got) != len(words) || !slices.Equal(slices.DeleteFunc(slices.Clone(got), isPassword), slices.DeleteFunc(slices.Clone(words), isPassword)) {
			t.Errorf("acl.txtar's user %s: got %q, want the documented %q", user, got, words)
		}
	}

	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	for user, words := range lines {
		args := make([]any, 0, len(words)+1)
		args = append(args, "ACL")
		for _, w := range words {
			if w == ">PASSWORD" {
				w = ">" + user + "-pw"
			}
			args = append(args, w)
		}
		if err := raw.Do(ctxTimeout(t, 5*time.Second), args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	open := func(user string) *Store {
		return newStore(t, "redis://"+user+":"+user+"-pw@"+srv.Addr+"/0", Options{Prefix: "semrun:"})
	}
	op, run := open("semrun"), open("runner")
	runnerRaw := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "runner", Password: "runner-pw", Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = runnerRaw.Close() })
	for _, key := range []string{"deploy:hold:prod", "a:wake:b", "x:policy", "a{b}:hold:c", "n:keys"} {
		t.Run(key, func(t *testing.T) {
			for _, u := range []struct {
				name     string
				st       *Store
				operates bool
			}{{"semrun", op, true}, {"runner", run, false}} {
				runsEverything(t, u.name, u.st, key)
				operatesKey(t, u.name, u.st, op, raw, key, u.operates)
			}
			// Nor may the run's user write the policy itself.
			policy := protocol.NewKeys("semrun:", key).Policy
			if err := runnerRaw.HSet(ctxTimeout(t, 5*time.Second), policy, "paused", 1).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("HSET %s as runner: got %v, want NOPERM", policy, err)
			}
		})
	}
	for _, u := range []struct {
		name, detail string
		st           *Store
	}{
		{"semrun", "it may change a key's settings", op},
		{"runner", "it may read a key's settings but not change them, as a run's user needs (semrun key needs an operator's, which may write semrun:{*}:policy)", run},
	} {
		checks := u.st.Doctor(ctxTimeout(t, 30*time.Second))
		i := slices.IndexFunc(checks, func(c semaphore.Check) bool { return c.Name == "acl" })
		if i < 0 {
			t.Fatalf("doctor as %s: got checks %+v, want one named acl", u.name, checks)
		}
		if c := checks[i]; c.Status != semaphore.CheckOK || !strings.Contains(c.Detail, u.detail) {
			t.Errorf("doctor as %s: acl: got %s %q (fix %q), want OK, %q", u.name, c.Status, c.Detail, c.Fix, u.detail)
		}
	}
}

// isPassword tells an ACL SETUSER word that sets a password.
func isPassword(w string) bool { return strings.HasPrefix(w, ">") }

// runsEverything runs, as user, what a run, acquire, --handle, release,
// status and events do on key: each must work.
func runsEverything(t *testing.T, user string, st *Store, key string) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	fail := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s, as %s: got %v, want it to work", what, user, err)
		}
	}
	// semrun -k KEY -- COMMAND
	l, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second, NoWait: true})
	fail("a run's grant", err)
	fail("a run's renewal", l.Renew(ctx))
	fail("a run's release", l.Finish(ctx, 0))
	// semrun acquire, semrun --handle, semrun release
	l, err = st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 5 * time.Second, NoWait: true})
	fail("acquire's grant", err)
	h, err := st.Hold(ctx, l, semaphore.HolderInfo{Host: "h", PID: 1})
	fail("acquire's hold", err)
	k, _, err := st.Attach(ctx, h, true)
	fail("the keeper's attach", err)
	step, _, err := st.Attach(ctx, h, false)
	fail("a --handle run's attach", err)
	fail("a --handle run's renewal", step.Renew(ctx))
	fail("a --handle run's end", step.Finish(ctx, 0))
	_, _, err = st.EndHold(ctx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun release"})
	fail("semrun release", err)
	fail("the keeper's end", k.Release(ctx))
	// semrun status, semrun events
	s, err := st.Status(ctx, []string{key})
	fail("semrun status", err)
	if len(s) != 1 || s[0].Error != "" || s[0].Held != 0 {
		t.Fatalf("semrun status as %s: got %+v, want the key free, no error", user, s)
	}
	n := 0
	fail("semrun events", st.Events(ctx, semaphore.EventQuery{Keys: []string{key}}, func(semaphore.Event) error { n++; return nil }))
	if n == 0 {
		t.Errorf("semrun events as %s: got none, want the grants and releases", user)
	}
}

// operatesKey runs, as user, what semrun key set, unset, pause, resume,
// drain and revoke do on key: each works for an operator's user, and is
// refused to a run's, which leaves the key's policy as it was. op is an
// operator's store, which undoes what an operator's did.
func operatesKey(t *testing.T, user string, st, op *Store, raw *redis.Client, key string, operates bool) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	holder := hold(t, op, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second})
	s := statusOf(t, op, key)
	if len(s.Holders) != 1 {
		t.Fatalf("status of key %q: got %+v, want its holder", key, s)
	}
	id := s.Holders[0].ID
	ops := []struct {
		name string
		do   func() error
	}{
		{"key set --permits 500", func() error { return st.SetCapacity(ctx, key, 500) }},
		{"key unset", func() error { return st.SetCapacity(ctx, key, 0) }},
		{"key pause", func() error { return st.Pause(ctx, key, "upkeep", 0) }},
		{"key resume", func() error { return st.Resume(ctx, key) }},
		// key drain pauses, then looks at the holders.
		{"key drain", func() error {
			if err := st.Pause(ctx, key, "draining", 0); err != nil {
				return err
			}
			_, err := st.Status(ctx, []string{key})
			return err
		}},
		{"key revoke", func() error { return st.Revoke(ctx, key, id, "test", false) }},
	}
	policy := protocol.NewKeys("semrun:", key).Policy
	for _, o := range ops {
		err := o.do()
		switch {
		case operates && err != nil:
			t.Errorf("semrun %s %s as %s: got %v, want it done", o.name, key, user, err)
		case !operates && err == nil:
			t.Errorf("semrun %s %s as %s: got it done, want it refused", o.name, key, user)
		case !operates && !strings.Contains(err.Error(), "may not change key"):
			t.Errorf("semrun %s %s as %s: got %v, want it refused: this user may not change key %q's settings", o.name, key, user, err, key)
		}
		if !operates {
			if f, err := raw.HGetAll(ctx, policy).Result(); err != nil || len(f) != 0 {
				t.Errorf("the policy of key %q once %s refused %s: got (%v, %v), want none", key, user, o.name, f, err)
			}
		}
	}
	if operates {
		if err := op.Resume(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := holder.Release(ctx); err != nil && !errors.Is(err, semaphore.ErrLost) {
			t.Fatal(err)
		}
		if err := raw.Del(ctx, policy).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
