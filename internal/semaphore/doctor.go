//go:build unix

// The checks of semrun doctor. Built for unix only, since the local store's
// checks are methods of Local, which is.

package semaphore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// CheckStatus is how one of doctor's checks came out.
type CheckStatus string

// A check that fails means semrun would break (a run fails, or more than N
// could hold a key); a warning means it works, with a cost worth knowing; a
// skipped check could not run because another one failed.
const (
	CheckOK   CheckStatus = "ok"
	CheckWarn CheckStatus = "warn"
	CheckFail CheckStatus = "fail"
	CheckSkip CheckStatus = "skip"
)

// Check is the outcome of one check of a store.
type Check struct {
	// Name is what was checked: "latency", "maxmemory-policy", ...
	Name   string      `json:"check"`
	Status CheckStatus `json:"status"`
	// Detail says what was found, and why it matters.
	Detail string `json:"detail"`
	// Fix says how to mend a problem; empty when there is none.
	Fix string `json:"fix"`
}

// The oldest Redis semrun supports, and why: waiters block with BLPOP
// timeouts in fractions of a second, which Redis reads as such since 6.0
// (before, they are refused and waiters poll instead). ACL users came with
// 6.0 too. Below 4.0 the scripts fail: they set several fields of a hash
// in one HSET.
const (
	minRedisMajor, minRedisMinor = 6, 0
	minRedisWhy                  = "waiters block with BLPOP timeouts in fractions of a second"
)

// doctorTimeout is the lease of the throw-away permits doctor takes, and
// bounds the lock it takes with --local. Short: what a doctor killed midway
// leaves in Redis lapses soon (its other keys expire within a minute).
const doctorTimeout = 5 * time.Second

// doctorKey is the name of a throw-away semaphore that no one else uses.
func doctorKey() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "semrun-doctor-" + hex.EncodeToString(b)
}

// doer sends any command: every go-redis client does.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// node is one Redis server doctor looks at: the one behind the client, or
// a master of a cluster.
type node struct {
	c    doer
	name string // shown before each detail in a cluster; empty otherwise
	info map[string]map[string]string
	// blocked names the check that makes the scripts pointless to run
	// there (unreachable, a replica, a sentinel).
	blocked string
}

// Doctor checks that Redis can keep semrun's promises: it is reachable and
// new enough, semrun's scripts run there as this user, and nothing in its
// settings can drop a permit (eviction) or serve a stale one (a replica).
// It writes only to a throw-away semaphore under the prefix, which it
// removes.
func (r *Redis) Doctor(ctx context.Context) []Check {
	nodes, err := r.doctorNodes(ctx)
	if err != nil {
		return []Check{r.unreachable(r.addr, err)}
	}
	var first, last []Check
	blocked := ""
	for _, n := range nodes {
		c := r.latency(ctx, n)
		first = append(first, c)
		if c.Status == CheckFail {
			n.blocked = "latency"
		} else {
			r.readInfo(ctx, n)
			c := r.server(n)
			first = append(first, c)
			if c.Status == CheckFail {
				n.blocked = "server"
			} else {
				rep := r.replication(n)
				last = append(last, r.persistence(ctx, n), r.maxmemory(ctx, n), rep)
				if rep.Status == CheckFail {
					n.blocked = "replication"
				}
			}
		}
		if blocked == "" {
			blocked = n.blocked
		}
	}
	if blocked != "" {
		why := "not run: see " + blocked
		first = append(first, Check{Name: "acl", Status: CheckSkip, Detail: why}, Check{Name: "scripts", Status: CheckSkip, Detail: why})
	} else {
		acl, refused := r.acl(ctx)
		first = append(first, acl, r.scripts(ctx, refused))
	}
	return append(first, last...)
}

// doctorNodes are the servers to look at: every master of a cluster, or
// the one server.
func (r *Redis) doctorNodes(ctx context.Context) ([]*node, error) {
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		call, cancel := context.WithTimeout(ctx, r.connectTimeout)
		defer cancel()
		var mu sync.Mutex
		var nodes []*node
		err := cc.ForEachMaster(call, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, &node{c: c, name: c.Options().Addr})
			return nil
		})
		slices.SortFunc(nodes, func(a, b *node) int { return strings.Compare(a.name, b.name) })
		return nodes, err
	}
	c, ok := r.client.(doer)
	if !ok {
		return nil, errors.New("this client cannot send commands")
	}
	return []*node{{c: c}}, nil
}

func isCluster(c redis.Scripter) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// username is the ACL user semrun logs in as, for fixes.
func (r *Redis) username() string {
	var u string
	switch c := r.client.(type) {
	case *redis.Client:
		u = c.Options().Username
	case *redis.ClusterClient:
		u = c.Options().Username
	}
	if u == "" {
		return "default"
	}
	return u
}

// do sends one command, bounded by the connect timeout.
func (r *Redis) do(ctx context.Context, c doer, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	return c.Do(ctx, args...)
}

// on names n in a detail, in a cluster.
func (n *node) on(detail string) string {
	if n.name == "" {
		return detail
	}
	return "node " + n.name + ": " + detail
}

// unreachable is the latency check of a server doctor could not talk to,
// with the fix its error points at.
func (r *Redis) unreachable(addr string, err error) Check {
	fix := "start Redis there, or point --redis (SEMRUN_REDIS_URL) at it"
	msg := err.Error()
	switch {
	case unauthenticated(err) || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid password"):
		fix = "give the right user and password (the URL, --redis-password-file, SEMRUN_REDIS_PASSWORD or REDISCLI_AUTH)"
	case untrusted(err):
		fix = "trust Redis's certificate (--tls-ca, --tls-server-name), or give the client certificate it asks for (--tls-cert, --tls-key)"
	case strings.Contains(msg, "'select'"):
		fix = "ACL SETUSER " + r.username() + " +select, or use database 0 (the URL's /0)"
	case strings.Contains(msg, "'cluster|slots'"):
		fix = "ACL SETUSER " + r.username() + " +cluster|slots (go-redis finds the cluster's nodes with it)"
	case strings.Contains(msg, "cluster support disabled"):
		fix = "drop --cluster: this Redis is not a cluster"
	}
	detail := fmt.Sprintf("cannot reach %s: %v", addr, err)
	var rerr redis.Error
	if errors.As(err, &rerr) {
		detail = fmt.Sprintf("%s refused semrun: %v", addr, err)
	}
	return Check{Name: "latency", Status: CheckFail, Detail: detail, Fix: fix}
}

// latency measures round trips to n with PING, or TIME for a user not
// allowed PING (semrun needs TIME, not PING); when both are refused, the
// refusals are round trips too.
func (r *Redis) latency(ctx context.Context, n *node) Check {
	const rounds = 10
	addr := r.addr
	if n.name != "" {
		addr = n.name
	}
	cmd, refused := "PING", false
	// The first round trip connects: it is not counted.
	if err := r.do(ctx, n.c, cmd).Err(); err != nil {
		if _, _, perm := refusal(err); !perm {
			return r.unreachable(addr, err)
		}
		cmd = "TIME"
		if err := r.do(ctx, n.c, cmd).Err(); err != nil {
			if _, _, perm := refusal(err); !perm {
				return r.unreachable(addr, err)
			}
			cmd, refused = "PING", true
		}
	}
	rtts := make([]time.Duration, 0, rounds)
	for range rounds {
		start := time.Now()
		err := r.do(ctx, n.c, cmd).Err()
		rtt := time.Since(start)
		if err != nil {
			if _, _, perm := refusal(err); !perm || !refused {
				return r.unreachable(addr, err)
			}
		}
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	what := cmd + "s"
	if refused {
		what = "refused PINGs"
	}
	detail := fmt.Sprintf("p50 %s, max %s (%d %s)", millis(rtts[(len(rtts)-1)/2]), millis(rtts[len(rtts)-1]), rounds, what)
	if n.name == "" {
		detail = r.addr + ": " + detail
	}
	return Check{Name: "latency", Status: CheckOK, Detail: n.on(detail)}
}

// millis shows a round trip in milliseconds, with two significant digits
// below 10ms.
func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 1:
		return strconv.FormatFloat(ms, 'f', 2, 64) + "ms"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + "ms"
}

// readInfo reads the INFO sections the checks need, one a call (Redis
// before 7 takes one section per call). A section refused or unknown is
// missing from n.info, and its error kept under "error".
func (r *Redis) readInfo(ctx context.Context, n *node) {
	n.info = map[string]map[string]string{"error": {}}
	for _, section := range []string{"server", "persistence", "memory", "replication"} {
		text, err := r.do(ctx, n.c, "INFO", section).Text()
		if err != nil {
			n.info["error"][section] = shortError(err)
			continue
		}
		fields := map[string]string{}
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
				fields[k] = v
			}
		}
		n.info[section] = fields
	}
}

// infoMissing says why an INFO section could not be read.
func (n *node) infoMissing(section string) string {
	if why := n.info["error"][section]; why != "" {
		return fmt.Sprintf("INFO %s refused (%s)", section, why)
	}
	return fmt.Sprintf("INFO %s says nothing of it", section)
}

// shortError is the first line of err, without a password in it (Redis's
// replies hold none).
func shortError(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// server checks the version and the mode: a sentinel or a cluster node
// reached as a plain server cannot serve semrun.
func (r *Redis) server(n *node) Check {
	c := Check{Name: "server"}
	srv, ok := n.info["server"]
	if !ok || srv["redis_version"] == "" {
		c.Status = CheckWarn
		c.Detail = n.on(fmt.Sprintf("could not read the version: %s; semrun needs Redis %d.%d or later (%s)", n.infoMissing("server"), minRedisMajor, minRedisMinor, minRedisWhy))
		c.Fix = "allow INFO (see acl), or check by hand: redis-cli INFO server | grep redis_version"
		return c
	}
	version := srv["redis_version"]
	name := "Redis " + version
	if v := srv["valkey_version"]; v != "" {
		name = "Valkey " + v
	}
	mode := srv["redis_mode"]
	switch {
	case mode == "sentinel":
		c.Status, c.Detail = CheckFail, n.on(name+" is a Sentinel: it names the master that holds the data, and holds none itself")
		c.Fix = "give --sentinel-master NAME (the master's name in the sentinels' configuration) with this address"
		return c
	case mode == "cluster" && !isCluster(r.client):
		c.Status, c.Detail = CheckFail, n.on(name+" is a node of a Redis Cluster: it refuses keys of the slots other nodes serve (MOVED)")
		c.Fix = "add --cluster (SEMRUN_CLUSTER=true)"
		return c
	}
	up := ""
	if s, err := strconv.ParseInt(srv["uptime_in_seconds"], 10, 64); err == nil {
		up = ", up " + (time.Duration(s) * time.Second).String()
		if s < 60 {
			up += " (until it has been up for the restart fence, the --ttl by default, it grants nothing)"
		}
	}
	if mode != "" {
		name += " (" + mode + ")"
	}
	major, minor := parseVersion(version)
	need := fmt.Sprintf("semrun needs %d.%d or later: %s", minRedisMajor, minRedisMinor, minRedisWhy)
	switch {
	case major < 4:
		c.Status = CheckFail
		c.Detail = n.on(fmt.Sprintf("%s%s: %s; before 4.0 its scripts fail", name, up, need))
	case major < minRedisMajor || major == minRedisMajor && minor < minRedisMinor:
		c.Status = CheckWarn
		c.Detail = n.on(fmt.Sprintf("%s%s: %s; here they are refused, and poll instead of being woken", name, up, need))
	default:
		c.Status = CheckOK
		c.Detail = n.on(fmt.Sprintf("%s%s; %s", name, up, need))
		return c
	}
	c.Fix = fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisMajor, minRedisMinor)
	return c
}

// parseVersion reads the major and minor numbers of "7.0.15".
func parseVersion(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// configGet reads one setting with CONFIG GET, which an ACL user may be
// refused.
func (r *Redis) configGet(ctx context.Context, n *node, name string) (string, error) {
	res, err := r.do(ctx, n.c, "CONFIG", "GET", name).Result()
	if err != nil {
		return "", err
	}
	switch v := res.(type) {
	case []any: // RESP2: name, value
		if len(v) == 2 {
			return fmt.Sprint(v[1]), nil
		}
	case map[any]any: // RESP3
		if s, ok := v[name]; ok {
			return fmt.Sprint(s), nil
		}
	}
	return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
}

// persistence tells what a restart keeps. It is never a failure: the
// restart fence keeps at most N holders through a restart that lost
// permits. Losing them all stops every running command, though.
func (r *Redis) persistence(ctx context.Context, n *node) Check {
	c := Check{Name: "persistence"}
	p, ok := n.info["persistence"]
	if !ok || p["aof_enabled"] == "" {
		c.Status = CheckWarn
		c.Detail = n.on("could not check: " + n.infoMissing("persistence"))
		c.Fix = "allow INFO (see acl), or check by hand as an admin: redis-cli INFO persistence (aof_enabled) and CONFIG GET save"
		return c
	}
	if p["aof_enabled"] == "1" {
		how := ""
		if fsync, err := r.configGet(ctx, n, "appendfsync"); err == nil {
			how = " (appendfsync " + fsync + ")"
		}
		c.Status = CheckOK
		c.Detail = n.on("AOF on" + how + ": a restart keeps the permits, but for the latest writes the disk had not got; the restart fence covers those")
		return c
	}
	save, err := r.configGet(ctx, n, "save")
	switch {
	case err != nil:
		c.Status = CheckWarn
		c.Detail = n.on(fmt.Sprintf("AOF off, and could not read the RDB save points (%s): without either, a restart loses every permit", shortError(err)))
		c.Fix = "check by hand as an admin: redis-cli CONFIG GET save (empty: no snapshots); CONFIG SET appendonly yes keeps permits across a restart"
	case strings.TrimSpace(save) != "":
		c.Status = CheckOK
		c.Detail = n.on("RDB snapshots (save " + save + "), no AOF: a restart loses the grants made since the last snapshot; the restart fence keeps new holders from joining those that still run")
	default:
		c.Status = CheckWarn
		c.Detail = n.on("none (no AOF, no RDB snapshots): a restart loses every permit, so running commands are stopped (exit 112) and nothing is granted for the restart fence; the fence keeps at most N holders")
		c.Fix = "CONFIG SET appendonly yes (and appendonly yes in redis.conf), to keep permits across a restart; keep the restart fence on either way"
	}
	return c
}

// maxmemory checks that Redis never evicts semrun's keys: a holder's
// record evicted is a seat someone else is granted while it runs. Every
// key semrun writes carries a TTL (so that an abandoned semaphore
// vanishes), so volatile-* policies may evict them as much as allkeys-*:
// only noeviction is safe. A full Redis under noeviction refuses writes,
// which fails acquires and renewals, but never admits more than N.
func (r *Redis) maxmemory(ctx context.Context, n *node) Check {
	c := Check{Name: "maxmemory-policy"}
	mem := n.info["memory"]
	policy, limit := mem["maxmemory_policy"], mem["maxmemory"]
	shownLimit := mem["maxmemory_human"]
	if policy == "" || limit == "" {
		// Not every server says it in INFO; CONFIG GET may be refused.
		var err error
		if policy, err = r.configGet(ctx, n, "maxmemory-policy"); err == nil {
			limit, err = r.configGet(ctx, n, "maxmemory")
		}
		if err != nil {
			c.Status = CheckWarn
			c.Detail = n.on(fmt.Sprintf("could not check: %s, and %s; any policy but noeviction lets Redis evict semrun's keys", n.infoMissing("memory"), shortError(err)))
			c.Fix = "check by hand as an admin: redis-cli CONFIG GET maxmemory-policy (must be noeviction)"
			return c
		}
		shownLimit = ""
	}
	bytes, _ := strconv.ParseInt(limit, 10, 64)
	if shownLimit == "" {
		shownLimit = limit
	}
	fix := "CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in redis.conf); keep caches in another Redis"
	switch {
	case policy == "noeviction" && bytes > 0:
		used, _ := strconv.ParseInt(mem["used_memory"], 10, 64)
		if used >= bytes {
			c.Status = CheckFail
			c.Detail = n.on(fmt.Sprintf("noeviction, and full (maxmemory %s): Redis refuses semrun's writes, so acquires fail and holders lose their permits", shownLimit))
			c.Fix = "raise maxmemory, or free memory"
			return c
		}
		if used*10 >= bytes*9 {
			c.Status = CheckWarn
			c.Detail = n.on(fmt.Sprintf("noeviction, but %d%% of maxmemory %s used: when full, Redis refuses semrun's writes, so acquires fail and holders lose their permits", used*100/bytes, shownLimit))
			c.Fix = "raise maxmemory, or free memory"
			return c
		}
		c.Status = CheckOK
		c.Detail = n.on(fmt.Sprintf("noeviction (maxmemory %s): a full Redis refuses writes rather than drop semrun's keys", shownLimit))
	case policy == "noeviction":
		c.Status = CheckOK
		c.Detail = n.on("noeviction (maxmemory 0: no limit): Redis never drops semrun's keys")
	case bytes > 0:
		c.Status = CheckFail
		c.Detail = n.on(fmt.Sprintf("%s with maxmemory %s: a full Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), forgetting holders that still run: more than N could hold a key", policy, shownLimit))
		c.Fix = fix
	default:
		c.Status = CheckWarn
		c.Detail = n.on(policy + ", but maxmemory 0 (no limit): nothing is evicted now; once a limit is set, Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), and more than N could hold a key")
		c.Fix = fix
	}
	return c
}

// replication refuses a replica (it refuses semrun's writes, or keeps
// grants its master never sees) and points a master with replicas at
// --min-replicas.
func (r *Redis) replication(n *node) Check {
	c := Check{Name: "replication"}
	rep, ok := n.info["replication"]
	if !ok || rep["role"] == "" {
		c.Status = CheckWarn
		c.Detail = n.on("could not check: " + n.infoMissing("replication") + "; semrun needs a master, not a replica")
		c.Fix = "allow INFO (see acl), or check by hand: redis-cli INFO replication (role:master)"
		return c
	}
	if rep["role"] != "master" {
		master := hostPort(rep["master_host"], rep["master_port"])
		c.Status = CheckFail
		c.Detail = n.on(fmt.Sprintf("a replica of %s: it refuses semrun's writes (READONLY), or, writable, keeps grants its master never sees", master))
		c.Fix = fmt.Sprintf("point --redis at the master (%s), or use --sentinel-master to follow it through failovers", master)
		return c
	}
	replicas, _ := strconv.Atoi(rep["connected_slaves"])
	c.Status = CheckOK
	switch {
	case replicas == 0:
		c.Detail = n.on("master, no replicas")
	default:
		c.Detail = n.on(fmt.Sprintf("master with %s: a failover can lose the grants they had not received yet; --min-replicas %d makes each grant wait until they have it", plural(replicas, "replica"), replicas))
	}
	return c
}

// plural says "1 replica" or "2 replicas".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// hostPort joins a host and port as INFO gives them.
func hostPort(host, port string) string {
	if host == "" {
		return "its master"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + port
}

// An aclProbe is one command semrun sends, in a harmless form on the keys
// of a throw-away semaphore, so that Redis names a refused command itself
// (in a script, Redis 7 says only "can't run this command").
type aclProbe struct {
	name string // as ACL names it
	args []any
	// writes: it creates a key, which doctor removes afterwards.
	writes bool
	// optional says what fails, or costs more, without it; empty: semrun
	// needs it.
	optional string
}

// aclProbes are every command semrun sends, itself or from its scripts,
// on keys as it names them. Besides these, go-redis sends HELLO (which no
// ACL refuses), SELECT for a database other than 0 and, with --cluster,
// CLUSTER SLOTS: without those, doctor cannot connect (latency names
// them); and COMMAND in a cluster (acl tries it there).
func aclProbes(keys []string, wake, noHolder string) []aclProbe {
	holders, info, token := keys[0], keys[1], keys[2]
	// The renewal of a permit nobody holds reads the keys and writes nothing.
	renew := append([]any{len(keys)}, toAny(keys)...)
	renew = append(renew, noHolder, 1000)
	return []aclProbe{
		// Cleaning up comes first: without it, nothing is written.
		{name: "del", args: []any{"DEL", wake}},
		{name: "pexpire", args: []any{"PEXPIRE", token, 60000}},
		{name: "eval", args: append([]any{"EVAL", renewLuaSource}, renew...)},
		{name: "evalsha", args: append([]any{"EVALSHA", renewScript.Hash()}, renew...)},
		{name: "time", args: []any{"TIME"}},
		{name: "info", args: []any{"INFO", "server"}},
		{name: "wait", args: []any{"WAIT", 0, 0}, optional: "--min-replicas would fail"},
		{name: "hset", args: []any{"HSET", info, "#doctor", 1}, writes: true},
		{name: "hget", args: []any{"HGET", info, "#doctor"}},
		{name: "hmget", args: []any{"HMGET", info, "#doctor", "#cap"}},
		{name: "hincrby", args: []any{"HINCRBY", info, "#seq", 1}, writes: true},
		{name: "hdel", args: []any{"HDEL", info, "#doctor"}},
		{name: "zadd", args: []any{"ZADD", holders, 1, "doctor"}, writes: true},
		{name: "zscore", args: []any{"ZSCORE", holders, "doctor"}},
		{name: "zrank", args: []any{"ZRANK", holders, "doctor"}},
		{name: "zcard", args: []any{"ZCARD", holders}},
		{name: "zrange", args: []any{"ZRANGE", holders, 0, -1, "WITHSCORES"}},
		{name: "zrangebyscore", args: []any{"ZRANGEBYSCORE", holders, "(0", "+inf", "WITHSCORES"}},
		{name: "zremrangebyscore", args: []any{"ZREMRANGEBYSCORE", holders, "-inf", 0}},
		{name: "zrem", args: []any{"ZREM", holders, "doctor"}},
		{name: "incr", args: []any{"INCR", token}, writes: true},
		{name: "set", args: []any{"SET", token, 1}, writes: true},
		{name: "pttl", args: []any{"PTTL", token}},
		{name: "rpush", args: []any{"RPUSH", wake, "doctor"}, writes: true},
		// What semrun's waiters send: a timeout in fractions of a second.
		{name: "blpop", args: []any{"BLPOP", wake, "0.01"}},
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// RedisCommands are the commands semrun sends to Redis, itself or from its
// scripts, as ACL names them: what a Redis user for semrun must be allowed
// (WAIT for --min-replicas only).
func RedisCommands() []string {
	var names []string
	for _, p := range aclProbes(make([]string, 5), "", "") {
		names = append(names, p.name)
	}
	slices.Sort(names)
	return names
}

var refusedCommand = regexp.MustCompile(`'([a-z_|-]+)' command`)

// refusal tells an ACL refusal: perm is true for one, with key true when a
// key was refused, and command the command when Redis named it.
func refusal(err error) (command string, key, perm bool) {
	msg := err.Error()
	if !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") && !strings.Contains(msg, "no permissions") {
		return "", false, false
	}
	if m := refusedCommand.FindStringSubmatch(msg); m != nil {
		command = m[1]
	}
	return command, command == "" && strings.Contains(msg, "key"), true
}

// acl sends every command semrun sends, as semrun does, on a throw-away
// semaphore, and names those refused. It returns whether any was.
func (r *Redis) acl(ctx context.Context) (Check, bool) {
	c := Check{Name: "acl"}
	d, ok := r.client.(doer)
	if !ok {
		return Check{Name: "acl", Status: CheckSkip, Detail: "this client cannot send commands"}, false
	}
	user := r.username()
	key := doctorKey()
	keys := r.keys(key)
	wake := wakeKey(r.channel(key), key)
	var missing, optional, costs, keyRefused, oddMsgs []string
	odd := map[string][]string{} // commands by the error Redis answered them
	canClean, canExpire, cleaned := false, false, false
	probes := aclProbes(keys, wake, newPermitID())
	if isCluster(r.client) {
		// go-redis asks COMMAND where each command's key is, before it
		// routes one it does not know (BLPOP); refused, it asks again every
		// time, and sends the command to any node first.
		probes = append(probes, aclProbe{name: "command", args: []any{"COMMAND"},
			optional: "in a cluster, every BLPOP would cost a refused COMMAND and a redirection (MOVED)"})
	}
	for _, p := range probes {
		if p.writes && !canClean {
			continue // it would leave a key behind
		}
		err := r.do(ctx, d, p.args...).Err()
		// NOSCRIPT: EVALSHA was allowed (EVAL, refused, loaded nothing).
		if err == nil || errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			switch {
			case p.name == "del":
				canClean = true
			case p.name == "pexpire":
				canClean, canExpire = true, true
			case p.writes && canExpire:
				// Gone by itself even if doctor is killed before it cleans up.
				_ = r.do(ctx, d, "PEXPIRE", p.args[1], 60000).Err()
			}
			continue
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			// The network: the rest would fail alike.
			c.Status, c.Detail = CheckFail, fmt.Sprintf("could not finish: %s: %v", strings.ToUpper(p.name), err)
			r.cleanup(context.WithoutCancel(ctx), d, append(keys, wake))
			return c, false
		}
		command, key, perm := refusal(err)
		switch {
		case !perm:
			msg := shortError(err)
			if !slices.Contains(oddMsgs, msg) {
				oddMsgs = append(oddMsgs, msg)
			}
			odd[msg] = append(odd[msg], strings.ToUpper(p.name))
		case key:
			keyRefused = append(keyRefused, strings.ToUpper(p.name))
		case command == "" && !strings.HasPrefix(err.Error(), "NOPERM"):
			// A script refused one of its commands without naming it:
			// the probes of those commands name it.
		case command == "" || command == p.name:
			if p.optional != "" {
				optional = append(optional, p.name)
				costs = append(costs, fmt.Sprintf("not %s: %s", strings.ToUpper(p.name), p.optional))
			} else {
				missing = append(missing, p.name)
			}
		default:
			// A script named the command it was refused.
			missing = append(missing, command)
		}
	}
	cleaned = r.cleanup(ctx, d, append(keys, wake))
	slices.Sort(missing)
	missing = slices.Compact(missing)
	pattern := globEscape(keyEscaper.Replace(r.prefix)) + "*"
	var fixes []string
	if len(missing) > 0 || len(optional) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" +"+strings.Join(append(slices.Clone(missing), optional...), " +"))
	}
	if len(keyRefused) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" ~"+pattern)
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("user %s may not run %s, which semrun sends", user, upper(missing)))
		if slices.Contains(missing, "info") {
			problems = append(problems, "without INFO every acquire fails (the restart fence reads it) unless --restart-fence 0")
		}
	}
	if len(keyRefused) > 0 {
		refused := strings.Join(keyRefused, ", ")
		if len(keyRefused) > 3 {
			refused = fmt.Sprintf("%d commands", len(keyRefused))
		}
		problems = append(problems, fmt.Sprintf("user %s may not use keys under %s (refused to %s)", user, r.prefix, refused))
	}
	if !canClean && len(keyRefused) == 0 {
		problems = append(problems, "DEL and PEXPIRE were refused, so the commands that write were not tried")
	}
	switch {
	case len(problems) > 0:
		c.Status = CheckFail
		c.Detail = strings.Join(problems, "; ")
		c.Fix = strings.Join(fixes, "; ")
		return c, true
	case len(optional) > 0:
		c.Status = CheckWarn
		c.Detail = fmt.Sprintf("user %s may run every command semrun needs on keys under %s, but %s", user, r.prefix, strings.Join(costs, "; "))
		c.Fix = strings.Join(fixes, "; ")
		return c, false
	case len(oddMsgs) > 0:
		var answers []string
		for _, msg := range oddMsgs {
			answers = append(answers, strings.Join(odd[msg], ", ")+": "+msg)
		}
		c.Status = CheckWarn
		c.Detail = fmt.Sprintf("user %s may run every command semrun sends, but Redis answered %s", user, strings.Join(answers, "; "))
		c.Fix = fixFor(answers[0])
		return c, false
	}
	c.Status = CheckOK
	c.Detail = fmt.Sprintf("user %s may run the %d commands semrun sends, on keys under %s", user, len(RedisCommands()), r.prefix)
	if !cleaned {
		c.Status = CheckWarn
		c.Detail += ", but doctor could not remove its throw-away keys (they expire within a minute)"
	}
	return c, false
}

func upper(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToUpper(n)
	}
	return strings.Join(out, ", ")
}

// globEscape escapes the characters an ACL key pattern reads as a glob.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// cleanup removes doctor's throw-away keys, or makes them expire at once
// for a user not allowed DEL. It tells whether that worked.
func (r *Redis) cleanup(ctx context.Context, d doer, keys []string) bool {
	// One call per key: in a cluster, the wake lists are in the slot of
	// their semaphore, but DEL of many keys needs them in one.
	ok := true
	for _, k := range keys {
		if r.do(ctx, d, "DEL", k).Err() != nil && r.do(ctx, d, "PEXPIRE", k, 1).Err() != nil {
			ok = false
		}
	}
	return ok
}

// scripts runs semrun's own scripts as a run does, on a throw-away
// semaphore: a grant, a waiter in line, a renewal, a release that hands
// the seat over to the waiter (read with BLPOP), status, and the last
// release. A missing permission the acl check found is not told again.
func (r *Redis) scripts(ctx context.Context, aclFailed bool) Check {
	c := Check{Name: "scripts"}
	d, ok := r.client.(doer)
	if !ok {
		return Check{Name: "scripts", Status: CheckSkip, Detail: "this client cannot send commands"}
	}
	key := doctorKey()
	keys, channel := r.keys(key), r.channel(key)
	holder, waiter := newPermitID(), newPermitID()
	defer r.cleanup(context.WithoutCancel(ctx), d, append(keys, wakeKey(channel, holder), wakeKey(channel, waiter)))
	loaded := false
	run := func(s *redis.Script, args ...any) (any, error) {
		call, cancel := context.WithTimeout(ctx, r.connectTimeout)
		defer cancel()
		res, err := s.EvalSha(call, r.client, keys, args...).Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") || errors.Is(err, redis.ErrNoScript) {
			loaded = true
			res, err = s.Eval(call, r.client, keys, args...).Result()
		}
		return res, err
	}
	ttl := doctorTimeout.Milliseconds()
	step, err := func() (string, error) {
		res, err := run(acquireScript, holder, 1, ttl, "", 1, 0, channel, 0)
		if err != nil {
			return "acquire", err
		}
		g, err := parseGrant(res)
		if err == nil && !g.granted {
			err = fmt.Errorf("no permit granted on a free key (%d held, fenced %dms)", g.held, g.fenced)
		}
		if err != nil {
			return "acquire", err
		}
		if res, err = run(acquireScript, waiter, 1, ttl, "", 1, ttl, channel, 0); err != nil {
			return "acquire (wait)", err
		}
		if w, err := parseGrant(res); err != nil || w.granted || w.position != 1 {
			return "acquire (wait)", fmt.Errorf("a second caller of a key of 1 permit: got %+v (%v), want first in line", w, err)
		}
		// As a renewal with --min-replicas sends it: the whole script.
		call, cancel := context.WithTimeout(ctx, r.connectTimeout)
		renewed, err := renewScript.Eval(call, r.client, keys, holder, ttl).Int64()
		cancel()
		if err == nil && renewed != 1 {
			err = errors.New("the holder's permit was not renewed")
		}
		if err != nil {
			return "renew (EVAL)", err
		}
		if res, err = run(releaseScript, holder, channel); err != nil {
			return "release", err
		}
		kv, err := r.do(ctx, d, "BLPOP", wakeKey(channel, waiter), "0.01").StringSlice()
		if err != nil {
			return "BLPOP of the waiter's wake list", err
		}
		if len(kv) != 2 || !parseTurn(kv[1]).handed {
			return "BLPOP of the waiter's wake list", fmt.Errorf("got %q, want the permit handed over", kv)
		}
		if res, err = run(statusScript); err != nil {
			return "status", err
		}
		if st, err := parseStatus(key, res); err != nil || st.Held != 1 || len(st.Waiters) != 0 {
			return "status", fmt.Errorf("got %+v (%v), want the waiter holding", st, err)
		}
		if res, err = run(releaseScript, waiter, channel); err != nil {
			return "release", err
		}
		if n, _ := res.(int64); n != 1 {
			return "release", errors.New("the waiter's permit was not held")
		}
		return "", nil
	}()
	if err == nil {
		how := "already loaded: EVALSHA"
		if loaded {
			how = "loaded with EVAL, then run with EVALSHA"
		}
		c.Status = CheckOK
		c.Detail = fmt.Sprintf("semrun's scripts (%s) granted, queued, renewed, handed a seat over (BLPOP) and released on a throw-away key", how)
		return c
	}
	if _, _, perm := refusal(err); perm {
		if aclFailed {
			return Check{Name: "scripts", Status: CheckSkip, Detail: fmt.Sprintf("stopped at %s by a missing permission (see acl)", step)}
		}
		c.Status = CheckFail
		c.Detail = fmt.Sprintf("%s: %s", step, shortError(err))
		c.Fix = "find the command refused as an admin: redis-cli ACL LOG 1 (its object), then ACL SETUSER " + r.username() + " +COMMAND"
		if cmd := r.aclLogCommand(ctx, d); cmd != "" {
			c.Detail += fmt.Sprintf(" (ACL LOG: %s)", strings.ToUpper(cmd))
			c.Fix = "ACL SETUSER " + r.username() + " +" + cmd
		}
		return c
	}
	c.Status = CheckFail
	c.Detail = fmt.Sprintf("%s: %s", step, shortError(err))
	c.Fix = fixFor(err.Error())
	return c
}

// fixFor is the fix of an error a command got that is no refusal.
func fixFor(msg string) string {
	switch {
	case strings.Contains(msg, "OOM "):
		return "free memory, or raise maxmemory (see maxmemory-policy)"
	case strings.Contains(msg, "READONLY"):
		return "point --redis at the master (see replication)"
	case strings.Contains(msg, "MOVED") || strings.Contains(msg, "CROSSSLOT"):
		return "add --cluster (SEMRUN_CLUSTER=true) for a Redis Cluster"
	}
	return fmt.Sprintf("use Redis %d.%d or later, or a server that runs Lua scripts as Redis does", minRedisMajor, minRedisMinor)
}

// aclLogCommand is the command Redis last refused this user, when the user
// may read ACL LOG; empty otherwise.
func (r *Redis) aclLogCommand(ctx context.Context, d doer) string {
	entries, err := r.do(ctx, d, "ACL", "LOG", 10).Slice()
	if err != nil {
		return ""
	}
	user := r.username()
	for _, e := range entries {
		fields := map[string]string{}
		switch e := e.(type) {
		case []any: // RESP2: name, value, ...
			for i := 0; i+1 < len(e); i += 2 {
				fields[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
			}
		case map[any]any:
			for k, v := range e {
				fields[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		}
		if fields["username"] == user && fields["reason"] == "command" {
			return fields["object"]
		}
	}
	return ""
}

// Doctor checks the lock directory: that it can be used (it exists or was
// created, it is safe and writable: NewLocal checked that), who shares it,
// and that a lock can be taken and freed in it. It leaves nothing behind.
func (s *Local) Doctor(ctx context.Context) []Check {
	return []Check{s.describeDir(), s.tryLock(ctx)}
}

// describeDir says who may use the lock directory.
func (s *Local) describeDir() Check {
	c := Check{Name: "lock-dir"}
	var st unix.Stat_t
	if err := unix.Fstat(int(s.dir.Fd()), &st); err != nil {
		c.Status, c.Detail = CheckFail, fmt.Sprintf("%s: %v", s.path, err)
		return c
	}
	who := "this user's"
	switch {
	case st.Mode&unix.S_ISGID != 0 && st.Mode&0o020 != 0:
		group := "gid " + strconv.Itoa(int(st.Gid))
		if g, err := user.LookupGroupId(strconv.Itoa(int(st.Gid))); err == nil {
			group = "group " + g.Name
		}
		who = "shared by " + group + " (setgid, group-writable)"
	case st.Uid != uint32(os.Geteuid()):
		who = userName(st.Uid) + "'s"
	}
	c.Status = CheckOK
	c.Detail = fmt.Sprintf("%s: %s (mode %04o), writable", s.path, who, st.Mode&0o7777)
	return c
}

// tryLock takes a permit of a throw-away key and frees it, then removes
// the key's directory.
func (s *Local) tryLock(ctx context.Context) Check {
	c := Check{Name: "lock"}
	key := doctorKey()
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	l, err := s.Acquire(ctx, Request{Key: key, Permits: 1, TTL: doctorTimeout, NoWait: true, Holder: HolderInfo{Command: "doctor"}})
	if err == nil {
		err = l.Release(ctx)
	}
	if rmErr := s.removeKey(key); err == nil && rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = fmt.Errorf("remove the throw-away key's directory: %w", rmErr)
	}
	if err != nil {
		c.Status, c.Detail = CheckFail, err.Error()
		c.Fix = "choose a lock directory on a local file system that supports flock(2) (--lock-dir)"
		return c
	}
	c.Status = CheckOK
	c.Detail = "took and freed a lock (flock) on a throw-away key"
	return c
}

// removeKey removes a key's directory and its files, never through a
// symbolic link. Only doctor's own keys are removed: a key in use must
// keep its files.
func (s *Local) removeKey(key string) error {
	name := keyDirName(key)
	dir, err := openDir(int(s.dir.Fd()), name, filepath.Join(s.path, name))
	if err != nil {
		return err
	}
	entries, err := dir.ReadDir(-1)
	if err == nil {
		for _, e := range entries {
			if uerr := unix.Unlinkat(int(dir.Fd()), e.Name(), 0); uerr != nil && err == nil {
				err = uerr
			}
		}
	}
	dir.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(int(s.dir.Fd()), name, unix.AT_REMOVEDIR)
}
