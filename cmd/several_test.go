//go:build unix

package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// The tests of several keys at once (-k a -k b) run semrun in this
// process against each store: a real redis-server, and a lock directory.
// Their children wait for a file the test makes (release) for at most
// childPatience, and every wait of the test's own is bounded by
// severalPatience: a hang fails in seconds, and neither bound is an
// assertion about speed.
const (
	severalPatience = 30 * time.Second
	childPatience   = "600" // 50ms turns: 30s
)

// severalStore is one store a test runs against: the environment that
// points semrun at it.
type severalStore struct {
	name string
	env  []string
	// redis is the server's address, for a test that reaches into it;
	// empty for the lock directory.
	redis string
}

// severalStores are a real redis-server of the test's own and a lock
// directory of its own.
func severalStores(t *testing.T) []severalStore {
	r := redistest.New(t)
	return []severalStore{
		{name: "redis", env: []string{"SEMRUN_REDIS_URL=" + r.URL(), "SEMRUN_RESTART_FENCE=0"}, redis: r.Addr},
		{name: "local", env: []string{"SEMRUN_LOCAL=true", "SEMRUN_LOCK_DIR=" + t.TempDir()}},
	}
}

// forEachStore runs test once against each store, in parallel.
func forEachStore(t *testing.T, test func(t *testing.T, s severalStore)) {
	t.Parallel()
	for _, s := range severalStores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			test(t, s)
		})
	}
}

// caller is a semrun run in the background.
type caller struct {
	args   []string
	errOut syncBuffer
	done   chan struct{}
	code   int
}

// startCaller runs semrun with args in the background against s, with
// env besides; its end is waited for (bounded) as the test ends.
func startCaller(t *testing.T, s severalStore, env []string, args ...string) *caller {
	t.Helper()
	f := testFactory(t, append(slices.Clone(s.env), env...)...)
	c := &caller{args: args, done: make(chan struct{})}
	f.Streams.In, f.Streams.Out, f.Streams.ErrOut = strings.NewReader(""), &syncBuffer{}, &c.errOut
	ctx, cancel := context.WithTimeout(context.Background(), 2*severalPatience)
	go func() {
		defer close(c.done)
		defer cancel()
		c.code = Run(ctx, args, f)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		case <-time.After(2 * severalPatience):
			t.Errorf("semrun %q: still running as the test ended", args)
		}
	})
	return c
}

// wait waits (bounded) for c to end, and returns its status.
func (c *caller) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
		return c.code
	case <-time.After(severalPatience):
		t.Fatalf("semrun %q: still running after %v; its stderr: %q", c.args, severalPatience, c.errOut.String())
		return 0
	}
}

// ended tells whether c has ended.
func (c *caller) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// until polls ok until it says so, and fails the test with what it saw
// once severalPatience has passed: a bound on a hang only.
func until(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	for deadline := time.Now().Add(severalPatience); ; time.Sleep(20 * time.Millisecond) {
		done, saw := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so within %v: %s", what, severalPatience, saw)
		}
	}
}

// runIn runs semrun with args against s, env besides, and returns its
// status and stderr (the child writes no stdout the tests read).
func runIn(t *testing.T, s severalStore, env []string, args ...string) (int, string) {
	t.Helper()
	code, _, errOut := run(t, testFactory(t, append(slices.Clone(s.env), env...)...), args...)
	return code, errOut
}

// statusOf is what semrun status --json says of key.
func statusOf(t *testing.T, s severalStore, key string) semaphore.KeyStatus {
	t.Helper()
	code, out, errOut := run(t, testFactory(t, s.env...), "status", "--json", key)
	var st []semaphore.KeyStatus
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 1 {
		t.Fatalf("status --json %q: status %d, %q, stderr %q (%v)", key, code, out, errOut, err)
	}
	return st[0]
}

// holder is key's one holder, once it has exactly one.
func holder(t *testing.T, s severalStore, key string) (semaphore.Holder, bool, string) {
	st := statusOf(t, s, key)
	if len(st.Holders) != 1 {
		return semaphore.Holder{}, false, fmt.Sprintf("key %q: holders %+v", key, st.Holders)
	}
	return st.Holders[0], true, ""
}

// waitHeld waits until key has one holder, which with names the other
// keys of (nil: any), and returns it.
func waitHeld(t *testing.T, s severalStore, key string, with []string) semaphore.Holder {
	t.Helper()
	var h semaphore.Holder
	until(t, fmt.Sprintf("key %q held with %q", key, with), func() (bool, string) {
		got, ok, saw := holder(t, s, key)
		if ok && with != nil && !slices.Equal(got.With, with) {
			ok, saw = false, fmt.Sprintf("its holder is with %q", got.With)
		}
		h = got
		return ok, saw
	})
	return h
}

// untilFile is a child's shell loop that waits (bounded) for file.
func untilFile(file string) string {
	return fmt.Sprintf(`i=0; until [ -f %q ] || [ $i -ge %s ]; do sleep 0.05; i=$((i+1)); done`, file, childPatience)
}

// touch makes file, which lets the children that wait for it end.
func touch(t *testing.T, file string) {
	t.Helper()
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// holdUntil starts a one-key caller of key that holds it until file
// exists, and waits until it holds it.
func holdUntil(t *testing.T, s severalStore, key, file string) *caller {
	t.Helper()
	c := startCaller(t, s, nil, "-k", key, "--", "sh", "-c", untilFile(file))
	waitHeld(t, s, key, nil)
	return c
}

// tokensOf reads SEMRUN_FENCING_TOKENS as written to file: KEY=TOKEN a
// line, the token after the last '=' (keys may have one).
func tokensOf(t *testing.T, file string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		i := strings.LastIndexByte(line, '=')
		token, err := strconv.ParseInt(line[i+1:], 10, 64)
		if i < 0 || err != nil {
			t.Fatalf("SEMRUN_FENCING_TOKENS line %q: want KEY=TOKEN", line)
		}
		tokens[line[:i]] = token
	}
	return tokens
}

// A caller of several keys waits holding nothing, in every key's line
// (one Redis and the lock directory grant every key in one step): none of
// its keys is held while it waits, so none can be lost meanwhile; it runs
// once every key is free.
func TestSeveralWaitsHoldingNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		release := filepath.Join(t.TempDir(), "release")
		busy := holdUntil(t, s, "a", release)
		c := startCaller(t, s, nil, "-k", "z", "-k", "a", "--ttl", "3s", "--", "true")
		until(t, "the caller waiting for z too, z held by nobody", func() (bool, string) {
			_, out, _ := run(t, testFactory(t, s.env...), "status", "--json", "z")
			return strings.Contains(out, `"held": 0`) && strings.Contains(out, `"with"`), out
		})
		touch(t, release)
		if code := busy.wait(t); code != 0 {
			t.Errorf("the holder of a: status %d, stderr %q", code, busy.errOut.String())
		}
		if code := c.wait(t); code != 0 {
			t.Errorf("the caller of both: status %d, stderr %q", code, c.errOut.String())
		}
	})
}

// -n and --weight given once per -k reach each key's request, in order;
// given once, every key's. Status shows each key's OF N and HOLDS.
func TestSeveralPairsPermitsAndWeightWithTheKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		for _, tc := range []struct {
			args            []string
			keys            [2]string
			permits, weight [2]int
		}{
			{[]string{"-k", "pa", "-n", "3", "-k", "pb", "-n", "5", "--weight", "1", "--weight", "2"}, [2]string{"pa", "pb"}, [2]int{3, 5}, [2]int{1, 2}},
			{[]string{"-n", "4", "--weight", "2", "-k", "qa", "-k", "qb"}, [2]string{"qa", "qb"}, [2]int{4, 4}, [2]int{2, 2}},
			// The first key's numbers are not the fleet's: the last key
			// taken first (reverse order) gets its own.
			{[]string{"-k", "ra", "--weight", "3", "-n", "7", "-k", "rb", "--weight", "1", "-n", "2"}, [2]string{"ra", "rb"}, [2]int{7, 2}, [2]int{3, 1}},
		} {
			release := filepath.Join(t.TempDir(), "release")
			keys := tc.keys
			c := startCaller(t, s, nil, append(tc.args, "--", "sh", "-c", untilFile(release))...)
			for i, key := range keys {
				h := waitHeld(t, s, key, []string{keys[1-i]})
				if st := statusOf(t, s, key); h.Permits != tc.permits[i] || h.Weight != tc.weight[i] || st.Held != tc.weight[i] {
					t.Errorf("%q: key %q holder of %d of %d permits (%d held); want %d of %d", tc.args, key, h.Weight, h.Permits, st.Held, tc.weight[i], tc.permits[i])
				}
			}
			touch(t, release)
			if code := c.wait(t); code != 0 {
				t.Errorf("%q: status %d, stderr %q", tc.args, code, c.errOut.String())
			}
		}
	})
}

// --min-hold cools every key: each stays taken after the command, and a
// caller of any one of them is busy.
func TestSeveralMinHoldCoolsEveryKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		if code, errOut := runIn(t, s, nil, "-k", "ma", "-k", "mb", "-k", "mc", "--min-hold", "1h", "--", "true"); code != 0 {
			t.Fatalf("a run with --min-hold: status %d, stderr %q", code, errOut)
		}
		for _, key := range []string{"ma", "mb", "mc"} {
			if st := statusOf(t, s, key); len(st.Cooling) != 1 || len(st.Holders) != 0 {
				t.Errorf("key %q after the run: %d cooling, %d holders; want 1 cooling, none held", key, len(st.Cooling), len(st.Holders))
			}
			if code, errOut := runIn(t, s, nil, "-k", key, "--no-wait", "--", "true"); code != defaultBusyExitCode {
				t.Errorf("key %q after the run: a --no-wait run got status %d, stderr %q; want %d", key, code, errOut, defaultBusyExitCode)
			}
		}
	})
}

// --max-runtime is every key's: each holder shows it.
func TestSeveralMaxRuntimeIsEveryKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		release := filepath.Join(t.TempDir(), "release")
		c := startCaller(t, s, nil, "-k", "xa", "-k", "xb", "--max-runtime", "1h", "--", "sh", "-c", untilFile(release))
		for _, key := range []string{"xa", "xb"} {
			if h := waitHeld(t, s, key, nil); h.MaxRuntime != time.Hour {
				t.Errorf("key %q: its holder's max runtime is %v; want 1h", key, h.MaxRuntime)
			}
		}
		touch(t, release)
		if code := c.wait(t); code != 0 {
			t.Errorf("status %d, stderr %q", code, c.errOut.String())
		}
	})
}

// --max-runtime bounds the command, counted from its start, whichever key
// it holds: a wait for the last key does not eat into it. Here the first
// key is held 4s before the last is granted, and a command of 3s under a
// --max-runtime of 6s must run to its end. (On Redis it fails today: the
// first key's lease is bounded from its own grant, and the runner stops
// the command at the earliest bound, saying it ran for 6s.)
func TestSeveralMaxRuntimeCountsFromTheCommandsStart(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		dir := t.TempDir()
		release, finished := filepath.Join(dir, "release"), filepath.Join(dir, "finished")
		busy := holdUntil(t, s, "a", release)
		c := startCaller(t, s, nil, "-k", "z", "-k", "a", "--max-runtime", "6s", "--",
			"sh", "-c", fmt.Sprintf("sleep 3; touch %q", finished))
		// Held (taken one after another) or in line (one Redis): waiting.
		until(t, "the caller waits for a", func() (bool, string) {
			_, out, _ := run(t, testFactory(t, s.env...), "status", "--json", "z")
			return strings.Contains(out, `"with"`), out
		})
		time.Sleep(4 * time.Second) // at least: the wait for a
		touch(t, release)
		busy.wait(t)
		code := c.wait(t)
		if _, err := os.Stat(finished); code != 0 || err != nil {
			t.Errorf("a 3s command under --max-runtime 6s, after a 4s wait for its last key: status %d (%v), stderr %q; want 0, run to its end", code, err, c.errOut.String())
		}
	})
}

// SEMRUN_FENCING_TOKENS names every key with its own token, in the order
// given, a key with '=' in its name too (its token after the last '=');
// SEMRUN_FENCING_TOKEN and SEMRUN_HELD_KEY are the first key's.
func TestSeveralFencingTokensOfEveryKey(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		dir := t.TempDir()
		release, tokens, first := filepath.Join(dir, "release"), filepath.Join(dir, "tokens"), filepath.Join(dir, "first")
		keys := []string{"t=1", "t", "u==2="}
		c := startCaller(t, s, nil, "-k", keys[0], "-k", keys[1], "-k", keys[2], "--", "sh", "-c",
			fmt.Sprintf(`printf '%%s\n' "$SEMRUN_FENCING_TOKENS" > %q; printf '%%s|%%s|%%s' "$SEMRUN_HELD_KEY" "$SEMRUN_FENCING_TOKEN" "$SEMRUN_HELD_KEYS" > %[2]q.tmp; mv %[2]q.tmp %[2]q; `, tokens, first)+untilFile(release))
		store := map[string]int64{}
		for _, key := range keys {
			store[key] = waitHeld(t, s, key, nil).Token
		}
		until(t, "the child wrote its variables", func() (bool, string) {
			_, err := os.Stat(first)
			return err == nil, fmt.Sprint(err)
		})
		b, err := os.ReadFile(tokens)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			order = append(order, line[:strings.LastIndexByte(line, '=')])
		}
		if got := tokensOf(t, tokens); !slices.Equal(order, keys) || fmt.Sprint(got) != fmt.Sprint(store) {
			t.Errorf("SEMRUN_FENCING_TOKENS %q: want the keys %q in that order, with the store's tokens %v", b, keys, store)
		}
		if got, err := os.ReadFile(first); err != nil || string(got) != fmt.Sprintf("t=1|%d|t=1\nt\nu==2=", store["t=1"]) {
			t.Errorf("SEMRUN_HELD_KEY|SEMRUN_FENCING_TOKEN|SEMRUN_HELD_KEYS: %q (%v); want the first key's, and every key", got, err)
		}
		touch(t, release)
		if code := c.wait(t); code != 0 {
			t.Errorf("status %d, stderr %q", code, c.errOut.String())
		}
	})
}

// The keys come from the -k flags, which win over SEMRUN_KEY and a config
// file's key; -n and --weight from the environment or a config file apply
// to every key, and a flag still wins.
func TestSeveralKeysWithSettings(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		config := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(config, []byte("key: fromfile\npermits: 4\nweight: 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			env             []string
			args            []string
			keys            []string
			permits, weight [2]int
		}{
			{[]string{"SEMRUN_KEY=fromenv"}, []string{"-k", "ea", "-k", "eb"}, []string{"ea", "eb"}, [2]int{1, 1}, [2]int{1, 1}},
			{[]string{"SEMRUN_PERMITS=3", "SEMRUN_WEIGHT=2"}, []string{"-k", "fa", "-k", "fb"}, []string{"fa", "fb"}, [2]int{3, 3}, [2]int{2, 2}},
			{[]string{"SEMRUN_CONFIG=" + config}, []string{"-k", "ga", "-k", "gb"}, []string{"ga", "gb"}, [2]int{4, 4}, [2]int{2, 2}},
			{[]string{"SEMRUN_CONFIG=" + config, "SEMRUN_PERMITS=5"}, []string{"-k", "ha", "-n", "6", "-k", "hb", "-n", "3"}, []string{"ha", "hb"}, [2]int{6, 3}, [2]int{2, 2}},
			// SEMRUN_KEY alone: one key, as ever.
			{[]string{"SEMRUN_KEY=ia", "SEMRUN_PERMITS=2"}, nil, []string{"ia"}, [2]int{2}, [2]int{1}},
		} {
			dir := t.TempDir()
			release, held := filepath.Join(dir, "release"), filepath.Join(dir, "held")
			c := startCaller(t, s, tc.env, append(tc.args, "--", "sh", "-c",
				fmt.Sprintf(`printf '%%s' "$SEMRUN_HELD_KEYS" > %[1]q.tmp; mv %[1]q.tmp %[1]q; `, held)+untilFile(release))...)
			for i, key := range tc.keys {
				h := waitHeld(t, s, key, nil)
				if h.Permits != tc.permits[i] || h.Weight != tc.weight[i] {
					t.Errorf("%v %q: key %q held as %d of %d; want %d of %d", tc.env, tc.args, key, h.Weight, h.Permits, tc.weight[i], tc.permits[i])
				}
			}
			until(t, "the child wrote SEMRUN_HELD_KEYS", func() (bool, string) {
				_, err := os.Stat(held)
				return err == nil, fmt.Sprint(err)
			})
			if got, _ := os.ReadFile(held); string(got) != strings.Join(tc.keys, "\n") {
				t.Errorf("%v %q: the child holds %q; want %q", tc.env, tc.args, got, tc.keys)
			}
			for _, other := range []string{"fromenv", "fromfile"} {
				if st := statusOf(t, s, other); len(st.Holders) != 0 {
					t.Errorf("%v %q: key %q held too: %+v", tc.env, tc.args, other, st.Holders)
				}
			}
			touch(t, release)
			if code := c.wait(t); code != 0 {
				t.Errorf("%v %q: status %d, stderr %q", tc.env, tc.args, code, c.errOut.String())
			}
		}
	})
}

// A weight of 0 is refused for any key, as it is for one: 125, one line
// naming the key, nothing held.
func TestSeveralRefusesAZeroWeightOfAnyKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", "a", "-k", "b", "--weight", "1", "--weight", "0"}, "semrun: key \"b\": --weight 0: must be from 1 to 1 permit\n"},
		{[]string{"-k", "a", "-n", "2", "-k", "b", "-n", "3", "-k", "c", "-n", "1", "--weight", "2", "--weight", "0", "--weight", "1"}, "semrun: key \"b\": --weight 0: must be from 1 to 3 permits\n"},
		{[]string{"-k", "a", "-k", "b", "--weight", "0"}, "semrun: --weight 0: must be from 1 to 1 permit\n"},
	} {
		ran := filepath.Join(t.TempDir(), "ran")
		code, out, errOut := run(t, testFactory(t, "SEMRUN_LOCAL=true", "SEMRUN_LOCK_DIR="+dir), append(tc.args, "--", "touch", ran)...)
		if _, err := os.Stat(ran); code != exitFailure || out != "" || errOut != tc.want || err == nil {
			t.Errorf("semrun %q: status %d, stdout %q, stderr %q, ran: %v; want 125, %q, nothing run", tc.args, code, out, errOut, err == nil, tc.want)
		}
	}
}

// --on-lost continue: one key lost, the command runs on without that
// permit, and keeps the others, renewed, as --local does: a caller of a
// key not lost is still busy while the command runs. (On Redis it fails
// today: the runner stops renewing the composite lease at the first loss,
// so every other key lapses within its TTL, without a word.)
func TestSeveralOnLostContinueKeepsTheOtherKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, s severalStore) {
		release := filepath.Join(t.TempDir(), "release")
		// A lease long enough that a loaded machine neither lets it lapse
		// nor finds the grant stale at the start (which would take the keys
		// anew, under another holder id than the one revoked).
		c := startCaller(t, s, nil, "-k", "oz", "-k", "oa", "--ttl", "8s", "--on-lost", "continue", "--", "sh", "-c", untilFile(release))
		kept := waitHeld(t, s, "oz", []string{"oa"})
		lost := waitHeld(t, s, "oa", []string{"oz"})
		if code, errOut := runIn(t, s, nil, "key", "revoke", "oa", "--holder", lost.ID); code != 0 {
			t.Fatalf("key revoke: status %d, stderr %q", code, errOut)
		}
		until(t, "the caller says it runs on without the permit", func() (bool, string) {
			return strings.Contains(c.errOut.String(), "the command runs on without it"), c.errOut.String()
		})
		time.Sleep(9 * time.Second) // at least: past the TTL of a lease no longer renewed
		if h, ok, saw := holder(t, s, "oz"); !ok || h.Token != kept.Token {
			t.Errorf("key oz, not lost, 9s after the loss of oa under --on-lost continue: %s; want it still held by the caller (token %d)", saw, kept.Token)
		}
		if code, errOut := runIn(t, s, nil, "-k", "oz", "--no-wait", "--", "true"); code != defaultBusyExitCode {
			t.Errorf("a caller of oz while the command runs on: status %d, stderr %q; want %d, busy", code, errOut, defaultBusyExitCode)
		}
		touch(t, release)
		if code := c.wait(t); code != 0 {
			t.Errorf("status %d, stderr %q", code, c.errOut.String())
		}
	})
}

// On a Redis Cluster, whose keys live on different masters, a caller takes
// its keys one after another, holding those it took: one of them revoked
// while it waits for the next is given up with the others, taken again
// (a new grant), and the command runs on the new one, the line naming the
// key lost.
func TestSeveralOnAClusterGivesUpAKeyLostWhileWaiting(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	s := severalStore{name: "cluster", env: []string{"SEMRUN_REDIS_URL=redis://" + nodes[0].Addr + "/0?addr=" + nodes[1].Addr,
		"SEMRUN_CLUSTER=true", "SEMRUN_RESTART_FENCE=0"}}
	dir := t.TempDir()
	release, tokens := filepath.Join(dir, "release"), filepath.Join(dir, "tokens")
	busy := holdUntil(t, s, "a", release)
	// z comes first in the order: held while a is waited for. A lease
	// long enough that a loaded machine does not let it lapse meanwhile.
	c := startCaller(t, s, nil, "-k", "z", "-k", "a", "--ttl", "6s", "-v", "--",
		"sh", "-c", fmt.Sprintf(`printf '%%s\n' "$SEMRUN_FENCING_TOKENS" > %q`, tokens))
	lost := waitHeld(t, s, "z", []string{"a"})
	if code, errOut := runIn(t, s, nil, "key", "revoke", "z", "--holder", lost.ID, "--reason", "maintenance"); code != 0 {
		t.Fatalf("key revoke: status %d, stderr %q", code, errOut)
	}
	until(t, "key \"z\" given up and taken again", func() (bool, string) {
		h, ok, saw := holder(t, s, "z")
		return ok && h.Token != lost.Token, saw + fmt.Sprintf("; stderr %q", c.errOut.String())
	})
	touch(t, release)
	if code := busy.wait(t); code != 0 {
		t.Errorf("the holder of a: status %d, stderr %q", code, busy.errOut.String())
	}
	code := c.wait(t)
	errOut := c.errOut.String()
	got := tokensOf(t, tokens)
	if code != 0 || got["z"] == lost.Token || got["z"] == 0 || got["a"] == 0 {
		t.Errorf("status %d, tokens %v; want 0, a grant of z other than the lost one (%d); stderr %q", code, got, lost.Token, errOut)
	}
	if want := `key "z": permit lost while waiting for the other keys (an operator revoked it: maintenance`; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q: want %q", errOut, want)
	}
}
