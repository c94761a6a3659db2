//go:build unix

package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// The checks of a Redis doctor, in the order it reports them.
var doctorChecks = []string{"latency", "server", "acl", "scripts", "persistence", "maxmemory-policy", "replication"}

// statuses maps each check's name to its status, failing t when a check
// shows up twice (one server) or a detail or fix is empty where it must
// not be.
func statuses(t *testing.T, checks []semaphore.Check) map[string]semaphore.CheckStatus {
	t.Helper()
	out := map[string]semaphore.CheckStatus{}
	for _, c := range checks {
		if _, dup := out[c.Name]; dup {
			t.Errorf("check %s reported twice: %+v", c.Name, checks)
		}
		out[c.Name] = c.Status
		if c.Detail == "" {
			t.Errorf("check %s: empty detail", c.Name)
		}
		if (c.Status == semaphore.CheckFail || c.Status == semaphore.CheckWarn) && c.Fix == "" {
			t.Errorf("check %s is %s without a fix: %s", c.Name, c.Status, c.Detail)
		}
	}
	return out
}

func findCheck(t *testing.T, checks []semaphore.Check, name string) semaphore.Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, checks)
	return semaphore.Check{}
}

func doctor(t *testing.T, s *Store) []semaphore.Check {
	t.Helper()
	checks := s.Doctor(ctxTimeout(t, 60*time.Second))
	for _, c := range checks {
		t.Logf("%-4s %s: %s (fix: %s)", c.Status, c.Name, c.Detail, c.Fix)
	}
	return checks
}

// wantStatuses fails t unless each named check has its status, and every
// other check is ok.
func wantStatuses(t *testing.T, checks []semaphore.Check, want map[string]semaphore.CheckStatus) {
	t.Helper()
	got := statuses(t, checks)
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, doctorChecks) {
		t.Errorf("checks: got %v, want %v", names, doctorChecks)
	}
	for _, name := range doctorChecks {
		w, ok := want[name]
		if !ok {
			w = semaphore.CheckOK
		}
		if got[name] != w {
			t.Errorf("check %s: got %s, want %s", name, got[name], w)
		}
	}
}

// wantEmpty fails t unless the server holds no key: doctor leaves nothing
// behind. Without DEL, its keys are made to expire in 1ms: a moment is
// allowed.
func wantEmpty(t *testing.T, raw *redis.Client) {
	t.Helper()
	waitFor(t, time.Second, "no key left behind", func() bool {
		keys, err := raw.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatalf("KEYS *: %v", err)
		}
		return len(keys) == 0
	})
}

func TestDoctorHealthyServer(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	checks := doctor(t, st)
	// The test's server keeps nothing on disk: a warning, not a failure.
	wantStatuses(t, checks, map[string]semaphore.CheckStatus{"persistence": semaphore.CheckWarn})
	if c := findCheck(t, checks, "latency"); !regexp.MustCompile(`p50 [0-9.]+ms, max [0-9.]+ms \(10 PINGs\)`).MatchString(c.Detail) {
		t.Errorf("latency: got %q, want p50 and max of 10 PINGs", c.Detail)
	}
	if c := findCheck(t, checks, "server"); !strings.Contains(c.Detail, "needs 6.0 or later") {
		t.Errorf("server: got %q, want the version semrun needs", c.Detail)
	}
	if c := findCheck(t, checks, "scripts"); !strings.Contains(c.Detail, "loaded with EVAL") {
		t.Errorf("scripts on a fresh server: got %q, want them loaded with EVAL", c.Detail)
	}
	wantEmpty(t, raw)

	// Run again, the scripts are cached; the server keeps its own state.
	if c := findCheck(t, doctor(t, st), "scripts"); c.Status != semaphore.CheckOK || !strings.Contains(c.Detail, "already loaded") {
		t.Errorf("scripts the second time: got %s %q, want ok, already loaded", c.Status, c.Detail)
	}
	wantEmpty(t, raw)
}

func TestDoctorPersistence(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	for _, tt := range []struct {
		config []string
		want   semaphore.CheckStatus
		detail string
	}{
		{[]string{"save", "3600 1"}, semaphore.CheckOK, "RDB snapshots (save 3600 1)"},
		{[]string{"appendonly", "yes"}, semaphore.CheckOK, "AOF on (appendfsync everysec)"},
		{[]string{"appendonly", "no", "save", ""}, semaphore.CheckWarn, "a restart loses every permit"},
	} {
		args := []any{"CONFIG", "SET"}
		for _, a := range tt.config {
			args = append(args, a)
		}
		if err := raw.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("CONFIG SET %v: %v", tt.config, err)
		}
		c := findCheck(t, doctor(t, st), "persistence")
		if c.Status != tt.want || !strings.Contains(c.Detail, tt.detail) {
			t.Errorf("persistence with %v: got %s %q, want %s, %q", tt.config, c.Status, c.Detail, tt.want, tt.detail)
		}
	}
}

// TestDoctorEvictionPolicies: any policy but noeviction can evict semrun's
// keys, volatile-* ones too since they all carry a TTL: a failure when
// Redis has a memory limit, a warning when it has none.
func TestDoctorEvictionPolicies(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	ctx := context.Background()
	for _, tt := range []struct {
		policy, limit string
		want          semaphore.CheckStatus
	}{
		{"allkeys-lru", "100mb", semaphore.CheckFail},
		{"volatile-lru", "100mb", semaphore.CheckFail},
		{"volatile-ttl", "100mb", semaphore.CheckFail},
		{"allkeys-random", "0", semaphore.CheckWarn},
		{"noeviction", "100mb", semaphore.CheckOK},
		{"noeviction", "0", semaphore.CheckOK},
	} {
		if err := raw.ConfigSet(ctx, "maxmemory", tt.limit).Err(); err != nil {
			t.Fatalf("CONFIG SET maxmemory: %v", err)
		}
		if err := raw.ConfigSet(ctx, "maxmemory-policy", tt.policy).Err(); err != nil {
			t.Fatalf("CONFIG SET maxmemory-policy: %v", err)
		}
		c := findCheck(t, doctor(t, st), "maxmemory-policy")
		if c.Status != tt.want || !strings.HasPrefix(c.Detail, tt.policy) {
			t.Errorf("%s with maxmemory %s: got %s %q, want %s naming the policy", tt.policy, tt.limit, c.Status, c.Detail, tt.want)
		}
		if tt.want != semaphore.CheckOK && c.Fix != "CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in redis.conf); keep caches in another Redis" {
			t.Errorf("%s: got fix %q, want CONFIG SET maxmemory-policy noeviction", tt.policy, c.Fix)
		}
	}
	// A server almost full under noeviction refuses writes soon.
	if err := raw.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatalf("CONFIG SET maxmemory: %v", err)
	}
	checks := doctor(t, st)
	if c := findCheck(t, checks, "maxmemory-policy"); c.Status != semaphore.CheckFail || !strings.Contains(c.Detail, "full") {
		t.Errorf("noeviction, full: got %s %q, want a failure saying it is full", c.Status, c.Detail)
	}
	if c := findCheck(t, checks, "scripts"); c.Status != semaphore.CheckFail || !strings.Contains(c.Detail, "OOM") || !strings.Contains(c.Fix, "maxmemory") {
		t.Errorf("scripts on a full server: got %s %q (fix %q), want a failure on OOM pointing at maxmemory", c.Status, c.Detail, c.Fix)
	}
	if err := raw.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatalf("CONFIG SET maxmemory: %v", err)
	}
}

// doctorReplica starts a master and a replica of it, online.
func doctorReplica(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master, replica = redistest.New(t), redistest.New(t)
	ctx := context.Background()
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := rawClient(t, replica.Addr).Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	waitFor(t, 10*time.Second, "replica online", func() bool {
		info, err := rawClient(t, master.Addr).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	return master, replica
}

func TestDoctorReplicaFails(t *testing.T) {
	t.Parallel()
	master, replica := doctorReplica(t)
	checks := doctor(t, newStore(t, replica.URL(), Options{}))
	wantStatuses(t, checks, map[string]semaphore.CheckStatus{
		"replication": semaphore.CheckFail, "persistence": semaphore.CheckWarn,
		// Writes would be refused: not tried.
		"acl": semaphore.CheckSkip, "scripts": semaphore.CheckSkip,
	})
	if c := findCheck(t, checks, "replication"); !strings.Contains(c.Detail, "a replica of "+master.Addr) || !strings.Contains(c.Fix, master.Addr) {
		t.Errorf("replication on a replica: got %q (fix %q), want it to name the master %s", c.Detail, c.Fix, master.Addr)
	}
	wantEmpty(t, rawClient(t, replica.Addr))

	checks = doctor(t, newStore(t, master.URL(), Options{}))
	wantStatuses(t, checks, map[string]semaphore.CheckStatus{"persistence": semaphore.CheckWarn})
	if c := findCheck(t, checks, "replication"); !strings.Contains(c.Detail, "1 replica") || !strings.Contains(c.Detail, "<min replicas> 1") {
		t.Errorf("replication on a master with a replica: got %q, want it to mention <min replicas> 1", c.Detail)
	}
}

// readmeACL is the documented ACL SETUSER line for semrun (in
// docs/configuration.md, Passwords), password and all.
func readmeACL(t *testing.T, password string) []any {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("read docs/configuration.md: %v", err)
	}
	line := regexp.MustCompile(`(?m)^ACL SETUSER semrun .*$`).Find(doc)
	if line == nil {
		t.Fatal("docs/configuration.md has no line ACL SETUSER semrun ...")
	}
	var args []any
	for _, f := range strings.Fields(string(line)) {
		if f == ">PASSWORD" {
			f = ">" + password
		}
		args = append(args, f)
	}
	return args
}

// aclUser creates the README's semrun user on srv, changed by edits
// (+cmd to add, -cmd to drop a grant of the README's, or a key pattern),
// and returns a store that logs in as it.
func aclUser(t *testing.T, srv *redistest.Server, edits ...string) *Store {
	t.Helper()
	args := readmeACL(t, "doctor-pw")
	for _, e := range edits {
		if drop, ok := strings.CutPrefix(e, "-"); ok {
			args = slices.DeleteFunc(args, func(a any) bool { return a == "+"+drop })
		} else {
			args = append(args, e)
		}
	}
	if err := rawClient(t, srv.Addr).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return newStore(t, "redis://semrun:doctor-pw@"+srv.Addr+"/0", Options{Prefix: "semrun:"})
}

// TestDoctorREADMEACLUserPasses: the user the README documents passes every
// check it can run: it may not read CONFIG (persistence says so), nor PING
// (latency times TIME instead).
func TestDoctorREADMEACLUserPasses(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	checks := doctor(t, aclUser(t, srv))
	wantStatuses(t, checks, map[string]semaphore.CheckStatus{"persistence": semaphore.CheckWarn})
	if c := findCheck(t, checks, "latency"); !strings.Contains(c.Detail, "10 TIMEs") {
		t.Errorf("latency without PING: got %q, want 10 TIMEs", c.Detail)
	}
	if c := findCheck(t, checks, "persistence"); !strings.Contains(c.Detail, "config|get") || !strings.Contains(c.Fix, "CONFIG GET save") {
		t.Errorf("persistence without CONFIG: got %q (fix %q), want it to say it could not read, and how to by hand", c.Detail, c.Fix)
	}
	for _, c := range checks {
		if strings.Contains(c.Detail+c.Fix, "doctor-pw") {
			t.Errorf("check %s shows the password: %q %q", c.Name, c.Detail, c.Fix)
		}
	}
	wantEmpty(t, rawClient(t, srv.Addr))
}

// TestDoctorMissingPermissions: each refusal is named, with its fix.
func TestDoctorMissingPermissions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		edits       []string
		want        map[string]semaphore.CheckStatus
		detail, fix string
	}{
		{[]string{"-blpop"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "scripts": semaphore.CheckSkip},
			"may not run BLPOP", "ACL SETUSER semrun +blpop"},
		{[]string{"-zrank", "-get"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "scripts": semaphore.CheckSkip},
			"may not run GET, ZRANK", "ACL SETUSER semrun +get +zrank"},
		{[]string{"-info"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "server": semaphore.CheckWarn, "replication": semaphore.CheckWarn, "maxmemory-policy": semaphore.CheckWarn},
			"may not run INFO", "ACL SETUSER semrun +info"},
		{[]string{"-wait"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckWarn},
			"not WAIT: <min replicas> would fail", "ACL SETUSER semrun +wait"},
		// The fix names a run's keys, anchored on the hash tag: every
		// key under the prefix would let it write the policy.
		{[]string{"resetkeys", "~other:*"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "scripts": semaphore.CheckSkip},
			"may not use keys under semrun:", "ACL SETUSER semrun ~semrun:{*}:holders ~semrun:{*}:info ~semrun:{*}:token ~semrun:{*}:queue " +
				"~semrun:{*}:waiters ~semrun:{*}:leases ~semrun:{*}:wake:* ~semrun:{*}:hold:* ~semrun:{*}:events ~semrun:{*}:stats ~semrun:keys " +
				"%R~semrun:{*}:policy"},
		// The run's user of the docs before events, given the commands
		// events need but not their keys: runs work (an event refused is
		// lost), and the fix names those keys only, as every key under
		// the prefix would let it write the policy.
		{[]string{"resetkeys", "~semrun:{*}:holders", "~semrun:{*}:info", "~semrun:{*}:token", "~semrun:{*}:queue", "~semrun:{*}:waiters",
			"~semrun:{*}:leases", "~semrun:{*}:wake:*", "~semrun:{*}:hold:*", "%R~semrun:{*}:policy"},
			map[string]semaphore.CheckStatus{"acl": semaphore.CheckWarn},
			"not keys semrun:{*}:events: no events would be logged", "ACL SETUSER semrun ~semrun:{*}:events ~semrun:{*}:stats ~semrun:keys"},
		// Without DEL, the keys are removed with PEXPIRE.
		{[]string{"-del"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "scripts": semaphore.CheckSkip},
			"may not run DEL", "ACL SETUSER semrun +del"},
		// Without PEXPIRE, nothing is written: a key could outlive doctor.
		{[]string{"-pexpire"}, map[string]semaphore.CheckStatus{"acl": semaphore.CheckFail, "scripts": semaphore.CheckSkip},
			"may not run PEXPIRE, which semrun sends; PEXPIRE was refused, so the commands that write were not tried", "ACL SETUSER semrun +pexpire"},
	} {
		t.Run(strings.Join(tt.edits, " "), func(t *testing.T) {
			t.Parallel()
			srv := redistest.New(t)
			checks := doctor(t, aclUser(t, srv, tt.edits...))
			want := map[string]semaphore.CheckStatus{"persistence": semaphore.CheckWarn}
			for k, v := range tt.want {
				want[k] = v
			}
			wantStatuses(t, checks, want)
			c := findCheck(t, checks, "acl")
			if !strings.Contains(c.Detail, tt.detail) || c.Fix != tt.fix {
				t.Errorf("acl: got %q (fix %q), want %q (fix %q)", c.Detail, c.Fix, tt.detail, tt.fix)
			}
			wantEmpty(t, rawClient(t, srv.Addr))
		})
	}
}

// TestDoctorProbesEveryCommand: every command the scripts run, and those
// semrun sends itself, is one doctor tries as the user.
func TestDoctorProbesEveryCommand(t *testing.T) {
	probed := Commands()
	sent := map[string]bool{"evalsha": true, "eval": true, "blpop": true, "wait": true}
	call := regexp.MustCompile(`redis\.p?call\(?,?\s*'([A-Za-z]+)'`)
	for _, sc := range protocol.Scripts() {
		for _, m := range call.FindAllStringSubmatch(sc.Source(), -1) {
			sent[strings.ToLower(m[1])] = true
		}
	}
	for name := range sent {
		if !slices.Contains(probed, name) {
			t.Errorf("semrun sends %s, which doctor does not try", strings.ToUpper(name))
		}
	}
	// The README's user is allowed every one of them.
	grants := map[string]bool{}
	for _, a := range readmeACL(t, "x") {
		if s, ok := strings.CutPrefix(a.(string), "+"); ok {
			grants[s] = true
		}
	}
	for _, name := range probed {
		if !grants[name] {
			t.Errorf("the README's ACL SETUSER line does not grant +%s", name)
		}
	}
}

// cutAfter fails every command after the first n, as a connection cut or
// a doctor killed at that point would leave it.
type cutAfter struct{ n atomic.Int64 }

var errCut = errors.New("cut")

func (h *cutAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.n.Add(-1) < 0 {
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

func (h *cutAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.n.Add(-1) < 0 {
			for _, cmd := range cmds {
				cmd.SetErr(errCut)
			}
			return errCut
		}
		return next(ctx, cmds)
	}
}

// TestDoctorCutAnywhereLeavesKeysThatExpire: wherever doctor stops, what
// it wrote expires within a minute.
func TestDoctorCutAnywhereLeavesKeysThatExpire(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	ctx := context.Background()
	for n := int64(0); ; n++ {
		cut := &cutAfter{}
		cut.n.Store(n)
		c := rawClient(t, srv.Addr)
		c.AddHook(cut)
		checks := wrapStore(t, c, Options{Prefix: "semrun:"}).Doctor(ctxTimeout(t, 30*time.Second))
		keys, err := raw.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatalf("KEYS *: %v", err)
		}
		for _, k := range keys {
			if ttl, err := raw.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
				t.Errorf("cut after %d commands: key %s has TTL %v (%v), want at most a minute", n, k, ttl, err)
			}
		}
		if err := raw.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		if cut.n.Load() >= 0 {
			// Doctor finished before the cut: every point was tried.
			if got := statuses(t, checks); got["scripts"] != semaphore.CheckOK {
				t.Errorf("uncut: got %v, want scripts ok", got)
			}
			return
		}
		if c := findCheck(t, checks, "latency"); n == 0 && c.Status != semaphore.CheckFail {
			t.Errorf("cut at once: got latency %s, want fail", c.Status)
		}
	}
}

// oldServer says it is another version of Redis.
type oldServer struct {
	Client
	version string
}

func (s oldServer) Masters(ctx context.Context) ([]Node, error) {
	nodes, err := s.Client.Masters(ctx)
	for i, n := range nodes {
		nodes[i] = oldNode{n, s.version}
	}
	return nodes, err
}

type oldNode struct {
	Node
	version string
}

func (n oldNode) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := n.Node.Do(ctx, args...)
	if len(args) == 2 && args[0] == "INFO" && args[1] == "server" {
		if text, err := cmd.Text(); err == nil {
			cmd.SetVal(regexp.MustCompile(`redis_version:[^\r\n]*`).ReplaceAllString(text, "redis_version:"+n.version))
		}
	}
	return cmd
}

// TestDoctorServerVersions: before 4.0 the scripts fail; before 6.0
// waiters poll instead of blocking.
func TestDoctorServerVersions(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	for _, tt := range []struct {
		version string
		want    map[string]semaphore.CheckStatus
	}{
		{"3.2.12", map[string]semaphore.CheckStatus{"server": semaphore.CheckFail, "acl": semaphore.CheckSkip, "scripts": semaphore.CheckSkip}},
		{"5.0.14", map[string]semaphore.CheckStatus{"server": semaphore.CheckWarn}},
		{"6.0.0", nil},
		{"10.1.0", nil},
	} {
		c := oldServer{ServerClient(rawClient(t, srv.Addr)), tt.version}
		checks := NewWithClient(c, srv.URL(), Options{Prefix: "semrun:", ConnectTimeout: 2 * time.Second}).Doctor(ctxTimeout(t, 30*time.Second))
		got := statuses(t, checks)
		for _, name := range []string{"server", "acl", "scripts"} {
			want := cmp.Or(tt.want[name], semaphore.CheckOK)
			if got[name] != want {
				t.Errorf("Redis %s: check %s got %s, want %s", tt.version, name, got[name], want)
			}
		}
		if c := findCheck(t, checks, "server"); !strings.HasPrefix(c.Detail, "Redis "+tt.version+" (standalone)") {
			t.Errorf("Redis %s: got server %q, want it to name the version", tt.version, c.Detail)
		}
	}
	wantEmpty(t, rawClient(t, srv.Addr))
}

func TestDoctorUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	checks := doctor(t, newStore(t, "redis://"+addr+"/0", Options{ConnectTimeout: time.Second}))
	got := statuses(t, checks)
	if got["latency"] != semaphore.CheckFail || len(got) != 3 || got["acl"] != semaphore.CheckSkip || got["scripts"] != semaphore.CheckSkip {
		t.Errorf("unreachable: got %v, want latency failed, acl and scripts skipped, nothing else", got)
	}
	if c := findCheck(t, checks, "latency"); !strings.Contains(c.Detail, "cannot reach redis://"+addr) {
		t.Errorf("latency: got %q, want it to name the address", c.Detail)
	}
}

func TestDoctorWrongPassword(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	aclUser(t, srv)
	checks := doctor(t, newStore(t, "redis://semrun:not-it@"+srv.Addr+"/0", Options{}))
	c := findCheck(t, checks, "latency")
	if c.Status != semaphore.CheckFail || !strings.Contains(c.Fix, "password") {
		t.Errorf("wrong password: got %s %q (fix %q), want a failure whose fix is the password", c.Status, c.Detail, c.Fix)
	}
	if strings.Contains(fmt.Sprint(checks), "not-it") {
		t.Errorf("the checks show the password: %+v", checks)
	}
}

// TestDoctorSentinel: a sentinel reached as a server is refused; through
// it, the master is checked.
func TestDoctorSentinel(t *testing.T) {
	t.Parallel()
	master := redistest.New(t)
	sentinel := redistest.NewSentinel(t, "doctor", master.Addr, 1)
	checks := doctor(t, newStore(t, sentinel.URL(), Options{}))
	if c := findCheck(t, checks, "server"); c.Status != semaphore.CheckFail || !strings.Contains(c.Fix, "give <sentinel master> NAME") {
		t.Errorf("server on a sentinel: got %s %q (fix %q), want a failure pointing at <sentinel master>", c.Status, c.Detail, c.Fix)
	}
	checks = doctor(t, newStore(t, sentinel.URL(), Options{SentinelMaster: "doctor", ConnectTimeout: 10 * time.Second}))
	wantStatuses(t, checks, map[string]semaphore.CheckStatus{"persistence": semaphore.CheckWarn})
	wantEmpty(t, rawClient(t, master.Addr))
}

// TestDoctorCluster: every master is checked; a node reached without
// the cluster setting is refused.
func TestDoctorCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.NewCluster(t, 3, 0)
	checks := doctor(t, newStore(t, nodes[0].URL(), Options{Cluster: true}))
	count := map[string]int{}
	for _, c := range checks {
		count[c.Name]++
		want := semaphore.CheckOK
		if c.Name == "persistence" {
			want = semaphore.CheckWarn
		}
		if c.Status != want {
			t.Errorf("check %s: got %s %q, want %s", c.Name, c.Status, c.Detail, want)
		}
	}
	for _, name := range doctorChecks {
		want := 3 // once per master
		if name == "acl" || name == "scripts" {
			want = 1
		}
		if count[name] != want {
			t.Errorf("check %s: reported %d times, want %d", name, count[name], want)
		}
	}
	for _, n := range nodes {
		wantEmpty(t, rawClient(t, n.Addr))
	}

	checks = doctor(t, newStore(t, nodes[0].URL(), Options{}))
	if c := findCheck(t, checks, "server"); c.Status != semaphore.CheckFail || c.Fix != "add <cluster=true>" {
		t.Errorf("server on a cluster node without the cluster setting: got %s %q (fix %q), want a failure whose fix is add <cluster=true>", c.Status, c.Detail, c.Fix)
	}

	// In a cluster, go-redis also needs CLUSTER SLOTS, and COMMAND to route
	// BLPOP, which the README's user lacks.
	for _, tt := range []struct {
		grant, check string
		want         semaphore.CheckStatus
		fix          string
	}{
		{"", "latency", semaphore.CheckFail, "ACL SETUSER semrun +cluster|slots"},
		{"+cluster|slots", "acl", semaphore.CheckWarn, "ACL SETUSER semrun +command"},
		{"+command", "acl", semaphore.CheckOK, ""},
	} {
		args := readmeACL(t, "doctor-pw")
		if tt.grant != "" {
			args = []any{"ACL", "SETUSER", "semrun", tt.grant}
		}
		for _, n := range nodes {
			if err := rawClient(t, n.Addr).Do(context.Background(), args...).Err(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
		checks := doctor(t, newStore(t, "redis://semrun:doctor-pw@"+nodes[0].Addr+"/0", Options{Cluster: true, Prefix: "semrun:"}))
		if c := findCheck(t, checks, tt.check); c.Status != tt.want || !strings.HasPrefix(c.Fix, tt.fix) || tt.fix == "" && c.Fix != "" {
			t.Errorf("README's user, %q granted: %s got %s %q (fix %q), want %s (fix %q)", tt.grant, tt.check, c.Status, c.Detail, c.Fix, tt.want, tt.fix)
		}
	}
}
