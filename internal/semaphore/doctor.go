// The checks of semrun doctor on Redis; the local store's are in
// doctor_unix.go.

package semaphore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
func doctorKey() string { return "semrun-doctor-" + rand.Text() }

// doctorClient is what doctor needs of a client: every go-redis client,
// and each node of a cluster, has it.
type doctorClient interface {
	redis.Cmdable
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// node is one Redis server doctor looks at: the one behind the client, or
// a master of a cluster.
type node struct {
	c    doctorClient
	name string // shown before each detail in a cluster; empty otherwise
	// info holds the fields of the INFO sections read, infoErr why a
	// section could not be read.
	info, infoErr map[string]string
}

// check is a check of n, whose detail names n in a cluster.
func (n *node) check(name string, status CheckStatus, detail, fix string) Check {
	if n.name != "" {
		detail = "node " + n.name + ": " + detail
	}
	return Check{Name: name, Status: status, Detail: detail, Fix: fix}
}

// Doctor checks that Redis can keep semrun's promises: it is reachable and
// new enough, semrun's scripts run there as this user, and nothing in its
// settings can drop a permit (eviction) or serve a stale one (a replica).
// It writes only to throw-away semaphores under the prefix, which it
// removes.
func (r *Redis) Doctor(ctx context.Context) []Check {
	var first, last []Check
	blocked := "" // the first check that makes acl and scripts pointless
	nodes, err := r.doctorNodes(ctx)
	if err != nil {
		first, blocked = []Check{r.unreachable(r.addr, err)}, "latency"
	}
	for _, n := range nodes {
		lat := r.latency(ctx, n)
		first = append(first, lat)
		if lat.Status == CheckFail {
			blocked = cmp.Or(blocked, "latency")
			continue
		}
		r.readInfo(ctx, n)
		srv := r.server(n)
		first = append(first, srv)
		if srv.Status == CheckFail { // a sentinel, or a cluster node without --cluster
			blocked = cmp.Or(blocked, "server")
			continue
		}
		rep := r.replication(n)
		last = append(last, r.persistence(ctx, n), r.maxmemory(ctx, n), rep)
		if rep.Status == CheckFail { // a replica refuses the writes
			blocked = cmp.Or(blocked, "replication")
		}
	}
	if blocked != "" {
		why := "not run: see " + blocked
		first = append(first, Check{Name: "acl", Status: CheckSkip, Detail: why}, Check{Name: "scripts", Status: CheckSkip, Detail: why})
	} else {
		c := r.client.(doctorClient) // doctorNodes made sure
		acl, refused := r.acl(ctx, c)
		first = append(first, acl, r.scripts(ctx, c, refused))
	}
	return append(first, last...)
}

// doctorNodes are the servers to look at: every master of a cluster, or
// the one server.
func (r *Redis) doctorNodes(ctx context.Context) ([]*node, error) {
	c, ok := r.client.(doctorClient)
	if !ok {
		return nil, errors.New("this client cannot send commands")
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return []*node{{c: c}}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	var mu sync.Mutex
	var nodes []*node
	err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, &node{c: m, name: m.Options().Addr})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	return nodes, nil
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
	return cmp.Or(u, "default")
}

// do sends one command, bounded by the connect timeout: a server that
// stops answering fails a check instead of hanging doctor.
func (r *Redis) do(ctx context.Context, c doctorClient, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	return c.Do(ctx, args...)
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
	addr := cmp.Or(n.name, r.addr)
	// The first round trip connects: it is not counted.
	cmd := ""
	for _, try := range []string{"PING", "TIME"} {
		err := r.do(ctx, n.c, try).Err()
		if err == nil {
			cmd = try
			break
		}
		if _, _, perm := refusal(err); !perm {
			return r.unreachable(addr, err)
		}
	}
	what := cmd + "s"
	if cmd == "" {
		cmd, what = "PING", "refused PINGs"
	}
	rtts := make([]time.Duration, rounds)
	for i := range rtts {
		start := time.Now()
		err := r.do(ctx, n.c, cmd).Err()
		rtts[i] = time.Since(start)
		if err != nil {
			if _, _, perm := refusal(err); !perm || what != "refused PINGs" {
				return r.unreachable(addr, err)
			}
		}
	}
	slices.Sort(rtts)
	detail := fmt.Sprintf("p50 %s, max %s (%d %s)", millis(rtts[(rounds-1)/2]), millis(rtts[rounds-1]), rounds, what)
	if n.name == "" {
		detail = r.addr + ": " + detail
	}
	return n.check("latency", CheckOK, detail, "")
}

// millis shows a round trip in milliseconds, with two significant digits
// below 10ms.
func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	decimals := 0
	switch {
	case ms < 1:
		decimals = 2
	case ms < 10:
		decimals = 1
	}
	return strconv.FormatFloat(ms, 'f', decimals, 64) + "ms"
}

// readInfo reads the INFO sections the checks need, one a call (Redis
// before 7 takes one section per call).
func (r *Redis) readInfo(ctx context.Context, n *node) {
	n.info, n.infoErr = map[string]string{}, map[string]string{}
	for _, section := range []string{"server", "persistence", "memory", "replication"} {
		call, cancel := context.WithTimeout(ctx, r.connectTimeout)
		sections, err := n.c.InfoMap(call, section).Result()
		cancel()
		if err != nil {
			n.infoErr[section] = shortError(err)
		}
		for _, fields := range sections {
			maps.Copy(n.info, fields)
		}
	}
}

// infoMissing says why an INFO section could not be read.
func (n *node) infoMissing(section string) string {
	if why := n.infoErr[section]; why != "" {
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
	need := fmt.Sprintf("semrun needs %d.%d or later: %s", minRedisMajor, minRedisMinor, minRedisWhy)
	version := n.info["redis_version"]
	if version == "" {
		return n.check("server", CheckWarn, "could not read the version: "+n.infoMissing("server")+"; "+need,
			"allow INFO (see acl), or check by hand: redis-cli INFO server | grep redis_version")
	}
	name := "Redis " + version
	if v := n.info["valkey_version"]; v != "" {
		name = "Valkey " + v
	}
	switch mode := n.info["redis_mode"]; {
	case mode == "sentinel":
		return n.check("server", CheckFail, name+" is a Sentinel: it names the master that holds the data, and holds none itself",
			"give --sentinel-master NAME (the master's name in the sentinels' configuration) with this address")
	case mode == "cluster" && !isCluster(r.client):
		return n.check("server", CheckFail, name+" is a node of a Redis Cluster: it refuses keys of the slots other nodes serve (MOVED)",
			"add --cluster (SEMRUN_CLUSTER=true)")
	case mode != "":
		name += " (" + mode + ")"
	}
	if s, err := strconv.ParseInt(n.info["uptime_in_seconds"], 10, 64); err == nil {
		name += ", up " + (time.Duration(s) * time.Second).String()
		if s < 60 {
			name += " (until it has been up for the restart fence, the --ttl by default, it grants nothing)"
		}
	}
	var major, minor int
	_, _ = fmt.Sscanf(version, "%d.%d", &major, &minor)
	upgrade := fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisMajor, minRedisMinor)
	switch {
	case major < 4:
		return n.check("server", CheckFail, name+": "+need+"; before 4.0 its scripts fail", upgrade)
	case major < minRedisMajor || major == minRedisMajor && minor < minRedisMinor:
		return n.check("server", CheckWarn, name+": "+need+"; here they are refused, and poll instead of being woken", upgrade)
	}
	return n.check("server", CheckOK, name+"; "+need, "")
}

// configGet reads one setting with CONFIG GET, which an ACL user may be
// refused.
func (r *Redis) configGet(ctx context.Context, n *node, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	res, err := n.c.ConfigGet(ctx, name).Result()
	if v, ok := res[name]; ok || err != nil {
		return v, err
	}
	return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
}

// persistence tells what a restart keeps. It is never a failure: the
// restart fence keeps at most N holders through a restart that lost
// permits. Losing them all stops every running command, though.
func (r *Redis) persistence(ctx context.Context, n *node) Check {
	switch n.info["aof_enabled"] {
	case "":
		return n.check("persistence", CheckWarn, "could not check: "+n.infoMissing("persistence"),
			"allow INFO (see acl), or check by hand as an admin: redis-cli INFO persistence (aof_enabled) and CONFIG GET save")
	case "1":
		how := ""
		if fsync, err := r.configGet(ctx, n, "appendfsync"); err == nil {
			how = " (appendfsync " + fsync + ")"
		}
		return n.check("persistence", CheckOK, "AOF on"+how+": a restart keeps the permits, but for the latest writes the disk had not got; the restart fence covers those", "")
	}
	save, err := r.configGet(ctx, n, "save")
	switch {
	case err != nil:
		return n.check("persistence", CheckWarn, fmt.Sprintf("AOF off, and could not read the RDB save points (%s): without either, a restart loses every permit", shortError(err)),
			"check by hand as an admin: redis-cli CONFIG GET save (empty: no snapshots); CONFIG SET appendonly yes keeps permits across a restart")
	case strings.TrimSpace(save) != "":
		return n.check("persistence", CheckOK, "RDB snapshots (save "+save+"), no AOF: a restart loses the grants made since the last snapshot; the restart fence keeps new holders from joining those that still run", "")
	}
	return n.check("persistence", CheckWarn, "none (no AOF, no RDB snapshots): a restart loses every permit, so running commands are stopped (exit 112) and nothing is granted for the restart fence; the fence keeps at most N holders",
		"CONFIG SET appendonly yes (and appendonly yes in redis.conf), to keep permits across a restart; keep the restart fence on either way")
}

// maxmemory checks that Redis never evicts semrun's keys: a holder's
// record evicted is a seat someone else is granted while it runs. Every
// key semrun writes carries a TTL (so that an abandoned semaphore
// vanishes), so volatile-* policies may evict them as much as allkeys-*:
// only noeviction is safe. A full Redis under noeviction refuses writes,
// which fails acquires and renewals, but never admits more than N.
func (r *Redis) maxmemory(ctx context.Context, n *node) Check {
	policy, limit, shown := n.info["maxmemory_policy"], n.info["maxmemory"], n.info["maxmemory_human"]
	if policy == "" || limit == "" {
		// Not every server says it in INFO; CONFIG GET may be refused.
		var err error
		if policy, err = r.configGet(ctx, n, "maxmemory-policy"); err == nil {
			limit, err = r.configGet(ctx, n, "maxmemory")
		}
		if err != nil {
			return n.check("maxmemory-policy", CheckWarn, fmt.Sprintf("could not check: %s, and %s; any policy but noeviction lets Redis evict semrun's keys", n.infoMissing("memory"), shortError(err)),
				"check by hand as an admin: redis-cli CONFIG GET maxmemory-policy (must be noeviction)")
		}
		shown = ""
	}
	shown = cmp.Or(shown, limit)
	bytes, _ := strconv.ParseInt(limit, 10, 64)
	used, _ := strconv.ParseInt(n.info["used_memory"], 10, 64)
	const fix = "CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction in redis.conf); keep caches in another Redis"
	switch {
	case policy == "noeviction" && bytes > 0 && used >= bytes:
		return n.check("maxmemory-policy", CheckFail, fmt.Sprintf("noeviction, and full (maxmemory %s): Redis refuses semrun's writes, so acquires fail and holders lose their permits", shown),
			"raise maxmemory, or free memory")
	case policy == "noeviction" && bytes > 0 && used*10 >= bytes*9:
		return n.check("maxmemory-policy", CheckWarn, fmt.Sprintf("noeviction, but %d%% of maxmemory %s used: when full, Redis refuses semrun's writes, so acquires fail and holders lose their permits", used*100/bytes, shown),
			"raise maxmemory, or free memory")
	case policy == "noeviction" && bytes > 0:
		return n.check("maxmemory-policy", CheckOK, fmt.Sprintf("noeviction (maxmemory %s): a full Redis refuses writes rather than drop semrun's keys", shown), "")
	case policy == "noeviction":
		return n.check("maxmemory-policy", CheckOK, "noeviction (maxmemory 0: no limit): Redis never drops semrun's keys", "")
	case bytes > 0:
		return n.check("maxmemory-policy", CheckFail, fmt.Sprintf("%s with maxmemory %s: a full Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), forgetting holders that still run: more than N could hold a key", policy, shown), fix)
	}
	return n.check("maxmemory-policy", CheckWarn, policy+", but maxmemory 0 (no limit): nothing is evicted now; once a limit is set, Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), and more than N could hold a key", fix)
}

// replication refuses a replica (it refuses semrun's writes, or keeps
// grants its master never sees) and points a master with replicas at
// --min-replicas.
func (r *Redis) replication(n *node) Check {
	switch role := n.info["role"]; role {
	case "":
		return n.check("replication", CheckWarn, "could not check: "+n.infoMissing("replication")+"; semrun needs a master, not a replica",
			"allow INFO (see acl), or check by hand: redis-cli INFO replication (role:master)")
	case "master":
	default:
		master := "its master"
		if host := n.info["master_host"]; host != "" {
			master = net.JoinHostPort(host, n.info["master_port"])
		}
		return n.check("replication", CheckFail, fmt.Sprintf("a replica of %s: it refuses semrun's writes (READONLY), or, writable, keeps grants its master never sees", master),
			fmt.Sprintf("point --redis at the master (%s), or use --sentinel-master to follow it through failovers", master))
	}
	switch replicas, _ := strconv.Atoi(n.info["connected_slaves"]); replicas {
	case 0:
		return n.check("replication", CheckOK, "master, no replicas", "")
	case 1:
		return n.check("replication", CheckOK, "master with 1 replica: a failover can lose the grants it had not received yet; --min-replicas 1 makes each grant wait until it has it", "")
	default:
		return n.check("replication", CheckOK, fmt.Sprintf("master with %d replicas: a failover can lose the grants they had not received yet; --min-replicas %d makes each grant wait until they have it", replicas, replicas), "")
	}
}

// An aclProbe is one command semrun sends, in a harmless form on the keys
// of a throw-away semaphore, so that Redis names a refused command itself
// (in a script, Redis 7 says only "can't run this command").
type aclProbe struct {
	args []any // the command first
	// writes: it creates its key (args[1]), which is given a TTL in the
	// same round trip and removed afterwards.
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
		// Cleaning up comes first: without PEXPIRE, nothing is written.
		{args: []any{"DEL", wake}},
		{args: []any{"PEXPIRE", token, 60000}},
		{args: append([]any{"EVAL", renewLuaSource}, renew...)},
		{args: append([]any{"EVALSHA", renewScript.Hash()}, renew...)},
		{args: []any{"TIME"}},
		{args: []any{"INFO", "server"}},
		{args: []any{"WAIT", 0, 0}, optional: "--min-replicas would fail"},
		{args: []any{"HSET", info, "#doctor", 1}, writes: true},
		{args: []any{"HGET", info, "#doctor"}},
		{args: []any{"HMGET", info, "#doctor", "#cap"}},
		{args: []any{"HINCRBY", info, "#seq", 1}, writes: true},
		{args: []any{"HDEL", info, "#doctor"}},
		{args: []any{"ZADD", holders, 1, "doctor"}, writes: true},
		{args: []any{"ZSCORE", holders, "doctor"}},
		{args: []any{"ZRANK", holders, "doctor"}},
		{args: []any{"ZCARD", holders}},
		{args: []any{"ZRANGE", holders, 0, -1, "WITHSCORES"}},
		{args: []any{"ZRANGEBYSCORE", holders, "(0", "+inf", "WITHSCORES"}},
		{args: []any{"ZREMRANGEBYSCORE", holders, "-inf", 0}},
		{args: []any{"ZREM", holders, "doctor"}},
		{args: []any{"INCR", token}, writes: true},
		{args: []any{"SET", token, 1}, writes: true},
		{args: []any{"PTTL", token}},
		{args: []any{"RPUSH", wake, "doctor"}, writes: true},
		// What semrun's waiters send: a timeout in fractions of a second.
		{args: []any{"BLPOP", wake, "0.01"}},
		{args: []any{"SCAN", 0, "MATCH", globEscaper.Replace(holders), "COUNT", 10},
			optional: "semrun status without a KEY would fail"},
	}
}

// name is the command's name, as ACL names it.
func (p aclProbe) name() string { return strings.ToLower(p.args[0].(string)) }

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
		names = append(names, p.name())
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

// probe sends p. A command that writes goes in one round trip with a
// PEXPIRE of its key, so that a doctor killed at any point leaves only
// keys that expire.
func (r *Redis) probe(ctx context.Context, c doctorClient, p aclProbe) error {
	if !p.writes {
		return r.do(ctx, c, p.args...).Err()
	}
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	pipe := c.Pipeline()
	cmd := pipe.Do(ctx, p.args...)
	pipe.PExpire(ctx, p.args[1].(string), time.Minute)
	_, _ = pipe.Exec(ctx)
	return cmd.Err()
}

// acl sends every command semrun sends, as semrun does, on a throw-away
// semaphore, and names those refused. It returns whether any was.
func (r *Redis) acl(ctx context.Context, c doctorClient) (Check, bool) {
	user := r.username()
	key := doctorKey()
	keys := r.keys(key)
	wake := wakeKey(r.channel(key), key)
	var missing, optional, costs, keyRefused, oddMsgs []string
	odd := map[string][]string{} // commands by the error Redis answered them
	canWrite := false            // PEXPIRE was allowed
	probes := aclProbes(keys, wake, newPermitID())
	if isCluster(r.client) {
		// go-redis asks COMMAND where each command's key is, before it
		// routes one it does not know (BLPOP); refused, it asks again every
		// time, and sends the command to any node first.
		probes = append(probes, aclProbe{args: []any{"COMMAND"},
			optional: "in a cluster, every BLPOP would cost a refused COMMAND and a redirection (MOVED)"})
	}
	for _, p := range probes {
		if p.writes && !canWrite {
			continue // it would leave a key behind that does not expire
		}
		name := p.name()
		err := r.probe(ctx, c, p)
		// NOSCRIPT: EVALSHA was allowed (EVAL, refused, loaded nothing).
		if err == nil || errors.Is(err, redis.Nil) || redis.HasErrorPrefix(err, "NOSCRIPT") {
			canWrite = canWrite || name == "pexpire"
			continue
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			// The network: the rest would fail alike.
			r.cleanup(ctx, c, append(keys, wake))
			return Check{Name: "acl", Status: CheckFail, Detail: fmt.Sprintf("could not finish: %s: %v", strings.ToUpper(name), err),
				Fix: "run doctor again once Redis answers (see latency)"}, false
		}
		command, key, perm := refusal(err)
		switch {
		case !perm:
			msg := shortError(err)
			if !slices.Contains(oddMsgs, msg) {
				oddMsgs = append(oddMsgs, msg)
			}
			odd[msg] = append(odd[msg], strings.ToUpper(name))
		case key:
			keyRefused = append(keyRefused, strings.ToUpper(name))
		case command == "" && !strings.HasPrefix(err.Error(), "NOPERM"):
			// A script refused one of its commands without naming it:
			// the probes of those commands name it.
		case command == "" || command == name:
			if p.optional != "" {
				optional = append(optional, name)
				costs = append(costs, fmt.Sprintf("not %s: %s", strings.ToUpper(name), p.optional))
			} else {
				missing = append(missing, name)
			}
		default:
			// A script named the command it was refused.
			missing = append(missing, command)
		}
	}
	cleaned := r.cleanup(ctx, c, append(keys, wake))
	slices.Sort(missing)
	missing = slices.Compact(missing)
	var fixes, problems []string
	if len(missing) > 0 || len(optional) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" +"+strings.Join(append(slices.Clone(missing), optional...), " +"))
	}
	if len(keyRefused) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" ~"+globEscaper.Replace(keyEscaper.Replace(r.prefix))+"*")
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("user %s may not run %s, which semrun sends", user, strings.ToUpper(strings.Join(missing, ", "))))
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
	if !canWrite && len(keyRefused) == 0 {
		problems = append(problems, "PEXPIRE was refused, so the commands that write were not tried")
	}
	switch {
	case len(problems) > 0:
		return Check{Name: "acl", Status: CheckFail, Detail: strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}, true
	case len(optional) > 0:
		return Check{Name: "acl", Status: CheckWarn, Fix: strings.Join(fixes, "; "),
			Detail: fmt.Sprintf("user %s may run every command semrun needs on keys under %s, but %s", user, r.prefix, strings.Join(costs, "; "))}, false
	case len(oddMsgs) > 0:
		var answers []string
		for _, msg := range oddMsgs {
			answers = append(answers, strings.Join(odd[msg], ", ")+": "+msg)
		}
		return Check{Name: "acl", Status: CheckWarn, Fix: fixFor(answers[0]),
			Detail: fmt.Sprintf("user %s may run every command semrun sends, but Redis answered %s", user, strings.Join(answers, "; "))}, false
	}
	check := Check{Name: "acl", Status: CheckOK, Detail: fmt.Sprintf("user %s may run the %d commands semrun sends, on keys under %s", user, len(RedisCommands()), r.prefix)}
	if !cleaned {
		check.Status = CheckWarn
		check.Detail += ", but doctor could not remove its throw-away keys (they expire within a minute)"
	}
	return check, false
}

// refused names the commands the user may not run, and the fix, for a
// script that Redis refused a command without naming it.
func (r *Redis) refused(ctx context.Context) string {
	const unknown = "a command semrun's scripts run was refused (semrun doctor names it)"
	c, ok := r.client.(doctorClient)
	if !ok {
		return unknown
	}
	// Within the caller's deadline: a release has 2s, and a Ctrl-C ends it.
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	check, refused := r.acl(ctx, c)
	if !refused {
		return unknown
	}
	return check.Detail + "; fix: " + check.Fix
}

// cleanup removes doctor's throw-away keys, or makes them expire at once
// for a user not allowed DEL, even when ctx was cancelled. They share one
// hash tag, so one DEL takes them all in a cluster too. It tells whether
// that worked.
func (r *Redis) cleanup(ctx context.Context, c doctorClient, keys []string) bool {
	ctx = context.WithoutCancel(ctx)
	if r.do(ctx, c, append([]any{"DEL"}, toAny(keys)...)...).Err() == nil {
		return true
	}
	ok := true
	for _, k := range keys {
		if r.do(ctx, c, "PEXPIRE", k, 1).Err() != nil {
			ok = false
		}
	}
	return ok
}

// scripts runs semrun's own scripts as a run does, on a throw-away
// semaphore: a grant, a waiter in line, a renewal, a release that hands
// the seat over to the waiter (read with BLPOP), status, and the last
// release. A missing permission the acl check found is not told again.
func (r *Redis) scripts(ctx context.Context, c doctorClient, aclFailed bool) Check {
	key := doctorKey()
	keys, channel := r.keys(key), r.channel(key)
	holder, waiter := newPermitID(), newPermitID()
	defer r.cleanup(ctx, c, append(keys, wakeKey(channel, holder), wakeKey(channel, waiter)))
	loaded := false
	run := func(s *redis.Script, args ...any) (any, error) {
		call, cancel := context.WithTimeout(ctx, r.connectTimeout)
		defer cancel()
		res, err := s.EvalSha(call, r.client, keys, args...).Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
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
		if _, err = run(releaseScript, holder, channel); err != nil {
			return "release", err
		}
		// A whole second, which Redis before 6.0 takes too (the seat is
		// there already): the acl check tries what waiters send.
		kv, err := r.do(ctx, c, "BLPOP", wakeKey(channel, waiter), 1).StringSlice()
		if err == nil && (len(kv) != 2 || !parseTurn(kv[1]).handed) {
			err = fmt.Errorf("got %q, want the permit handed over", kv)
		}
		if err != nil {
			return "BLPOP of the waiter's wake list", err
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
		return Check{Name: "scripts", Status: CheckOK, Detail: "semrun's scripts (" + how + ") granted, queued, renewed, handed a seat over (BLPOP) and released on a throw-away key"}
	}
	_, _, perm := refusal(err)
	if perm && aclFailed {
		return Check{Name: "scripts", Status: CheckSkip, Detail: fmt.Sprintf("stopped at %s by a missing permission (see acl)", step)}
	}
	check := Check{Name: "scripts", Status: CheckFail, Detail: step + ": " + shortError(err), Fix: fixFor(err.Error())}
	if perm {
		check.Fix = "find the command refused as an admin: redis-cli ACL LOG 1 (its object), then ACL SETUSER " + r.username() + " +COMMAND"
	}
	return check
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
