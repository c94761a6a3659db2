package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// The oldest Redis semrun supports, and why: waiters block with BLPOP
// timeouts in fractions of a second, which Redis reads as such since 6.0
// (before, they are refused and waiters poll instead). ACL users came with
// 6.0 too. Below 4.0 the scripts fail: they set several fields of a hash
// in one HSET.
const (
	minRedisMajor, minRedisMinor = 6, 0
	minRedisWhy                  = "waiters block with BLPOP timeouts in fractions of a second"
)

// doctorLease is the lease of the throw-away permits doctor takes. Short:
// what a doctor killed midway leaves in Redis lapses soon (its other keys
// expire within a minute).
const doctorLease = 5 * time.Second

// doctorKey is the name of a throw-away semaphore that no one else uses.
func doctorKey() string { return "semrun-doctor-" + rand.Text() }

// doctorNode is one Redis server doctor looks at: the one behind the store, or
// a master of a cluster.
type doctorNode struct {
	Node
	name string // shown before each detail in a cluster; empty otherwise
	// info holds the fields of the INFO sections read, infoErr why a
	// section could not be read.
	info, infoErr map[string]string
}

// check is a check of n, whose detail names n in a cluster.
func (n *doctorNode) check(name string, status semaphore.CheckStatus, detail, fix string) semaphore.Check {
	if n.name != "" {
		detail = "node " + n.name + ": " + detail
	}
	return semaphore.Check{Name: name, Status: status, Detail: detail, Fix: fix}
}

// Doctor checks that Redis can keep semrun's promises: it is reachable and
// new enough, semrun's scripts run there as this user, and nothing in its
// settings can drop a permit (eviction) or serve a stale one (a replica).
// It writes only to throw-away semaphores under the prefix, which it
// removes.
func (s *Store) Doctor(ctx context.Context) []semaphore.Check {
	var first, last []semaphore.Check
	blocked := "" // the first check that makes acl and scripts pointless
	servers, err := s.servers(ctx)
	if err != nil {
		first, blocked = []semaphore.Check{s.unreachable(s.addr, err)}, "latency"
	}
	for _, n := range servers {
		lat := s.latency(ctx, n)
		first = append(first, lat)
		if lat.Status == semaphore.CheckFail {
			blocked = cmp.Or(blocked, "latency")
			continue
		}
		s.readInfo(ctx, n)
		srv := s.server(n)
		first = append(first, srv)
		if srv.Status == semaphore.CheckFail { // a sentinel, or a cluster node without the cluster setting
			blocked = cmp.Or(blocked, "server")
			continue
		}
		rep := s.replication(n)
		last = append(last, s.persistence(ctx, n), s.maxmemory(ctx, n), rep)
		if rep.Status == semaphore.CheckFail { // a replica refuses the writes
			blocked = cmp.Or(blocked, "replication")
		}
	}
	if blocked != "" {
		why := "not run: see " + blocked
		first = append(first, semaphore.Check{Name: "acl", Status: semaphore.CheckSkip, Detail: why},
			semaphore.Check{Name: "scripts", Status: semaphore.CheckSkip, Detail: why})
	} else {
		acl, refused := s.acl(ctx)
		first = append(first, acl, s.scripts(ctx, refused))
	}
	return append(first, last...)
}

// servers are the servers to look at: every master of a cluster, or the
// one server.
func (s *Store) servers(ctx context.Context) ([]*doctorNode, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	masters, err := s.client.Masters(ctx)
	if err != nil {
		return nil, err
	}
	var out []*doctorNode
	for _, m := range masters {
		n := &doctorNode{Node: m}
		if s.cluster {
			n.name = m.Addr()
		}
		out = append(out, n)
	}
	return out, nil
}

// do sends one command, bounded by the connect timeout: a server that
// stops answering fails a check instead of hanging doctor.
func (s *Store) do(ctx context.Context, send func(context.Context, ...any) *redis.Cmd, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	return send(ctx, args...)
}

// unreachable is the latency check of a server doctor could not talk to,
// with the fix its error points at.
func (s *Store) unreachable(addr string, err error) semaphore.Check {
	fix := fmt.Sprintf("start Redis there, or point %s at it", s.names.Ways(URLSetting, ""))
	msg := err.Error()
	switch {
	case unauthenticated(err) || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid password"):
		fix = fmt.Sprintf("give the right user and password (the URL, %s)", s.names.Ways(PasswordSetting, ""))
	case untrusted(err):
		fix = fmt.Sprintf("trust Redis's certificate (%s, %s), or give the client certificate it asks for (%s, %s)",
			s.names.Name(TLSCASetting), s.names.Name(TLSServerNameSetting), s.names.Name(TLSCertSetting), s.names.Name(TLSKeySetting))
	case strings.Contains(msg, "'select'"):
		fix = "ACL SETUSER " + s.client.User() + " +select, or use database 0 (the URL's /0)"
	case strings.Contains(msg, "'cluster|slots'"):
		fix = "ACL SETUSER " + s.client.User() + " +cluster|slots (go-redis finds the cluster's nodes with it)"
	case strings.Contains(msg, "cluster support disabled"):
		fix = fmt.Sprintf("drop %s: this Redis is not a cluster", s.names.Name(ClusterSetting))
	}
	detail := fmt.Sprintf("cannot reach %s: %v", addr, err)
	var rerr redis.Error
	if errors.As(err, &rerr) {
		detail = fmt.Sprintf("%s refused semrun: %v", addr, err)
	}
	return semaphore.Check{Name: "latency", Status: semaphore.CheckFail, Detail: detail, Fix: fix}
}

// latency measures round trips to n with PING, or TIME for a user not
// allowed PING (semrun needs TIME, not PING); when both are refused, the
// refusals are round trips too.
func (s *Store) latency(ctx context.Context, n *doctorNode) semaphore.Check {
	const rounds = 10
	addr := cmp.Or(n.name, s.addr)
	// The first round trip connects: it is not counted.
	cmd := ""
	for _, try := range []string{"PING", "TIME"} {
		err := s.do(ctx, n.Do, try).Err()
		if err == nil {
			cmd = try
			break
		}
		if _, _, perm := refusal(err); !perm {
			return s.unreachable(addr, err)
		}
	}
	what := cmd + "s"
	if cmd == "" {
		cmd, what = "PING", "refused PINGs"
	}
	rtts := make([]time.Duration, rounds)
	for i := range rtts {
		start := time.Now()
		err := s.do(ctx, n.Do, cmd).Err()
		rtts[i] = time.Since(start)
		if err != nil {
			if _, _, perm := refusal(err); !perm || what != "refused PINGs" {
				return s.unreachable(addr, err)
			}
		}
	}
	slices.Sort(rtts)
	detail := fmt.Sprintf("p50 %s, max %s (%d %s)", millis(rtts[(rounds-1)/2]), millis(rtts[rounds-1]), rounds, what)
	if n.name == "" {
		detail = s.addr + ": " + detail
	}
	return n.check("latency", semaphore.CheckOK, detail, "")
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
func (s *Store) readInfo(ctx context.Context, n *doctorNode) {
	n.info, n.infoErr = map[string]string{}, map[string]string{}
	for _, section := range []string{"server", "persistence", "memory", "replication"} {
		call, cancel := context.WithTimeout(ctx, s.connectTimeout)
		text, err := n.Do(call, "INFO", section).Text()
		cancel()
		if err != nil {
			n.infoErr[section] = shortError(err)
		}
		maps.Copy(n.info, parseInfo(text))
	}
}

// parseInfo reads INFO's "name:value" lines, whatever the server sent
// around them: a section header, or none, is skipped like any line that is
// not a field. At most 1000 fields are kept.
func parseInfo(text string) map[string]string {
	fields := map[string]string{}
	for line := range strings.Lines(text) {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok || name == "" || strings.HasPrefix(name, "#") || len(fields) >= 1000 {
			continue
		}
		fields[name] = value
	}
	return fields
}

// infoMissing says why an INFO section could not be read.
func (n *doctorNode) infoMissing(section string) string {
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
func (s *Store) server(n *doctorNode) semaphore.Check {
	need := fmt.Sprintf("semrun needs %d.%d or later: %s", minRedisMajor, minRedisMinor, minRedisWhy)
	version := n.info["redis_version"]
	if version == "" {
		return n.check("server", semaphore.CheckWarn, "could not read the version: "+n.infoMissing("server")+"; "+need,
			"allow INFO (see acl), or check by hand: redis-cli INFO server | grep redis_version")
	}
	name := "Redis " + version
	if v := n.info["valkey_version"]; v != "" {
		name = "Valkey " + v
	}
	switch mode := n.info["redis_mode"]; {
	case mode == "sentinel":
		return n.check("server", semaphore.CheckFail, name+" is a Sentinel: it names the master that holds the data, and holds none itself",
			fmt.Sprintf("give %s NAME (the master's name in the sentinels' configuration) with this address", s.names.Name(SentinelMasterSetting)))
	case mode == "cluster" && !s.cluster:
		return n.check("server", semaphore.CheckFail, name+" is a node of a Redis Cluster: it refuses keys of the slots other nodes serve (MOVED)",
			"add "+s.names.Ways(ClusterSetting, "true"))
	case mode != "":
		name += " (" + mode + ")"
	}
	var fenced time.Duration // what is left of the restart fence a run would have
	if up, err := strconv.ParseInt(n.info["uptime_in_seconds"], 10, 64); err == nil {
		name += ", up " + (time.Duration(up) * time.Second).String()
		fenced = s.restartFence - time.Duration(up)*time.Second
	}
	var major, minor int
	_, _ = fmt.Sscanf(version, "%d.%d", &major, &minor)
	upgrade := fmt.Sprintf("upgrade Redis to %d.%d or later", minRedisMajor, minRedisMinor)
	switch {
	case major < 4:
		return n.check("server", semaphore.CheckFail, name+": "+need+"; before 4.0 its scripts fail", upgrade)
	case major < minRedisMajor || major == minRedisMajor && minor < minRedisMinor:
		return n.check("server", semaphore.CheckWarn, name+": "+need+"; here they are refused, and poll instead of being woken", upgrade)
	}
	if fenced > 0 {
		// A run would wait this long for its grant, whatever else is well.
		return n.check("server", semaphore.CheckWarn, fmt.Sprintf("%s: less than the restart fence of %v, so nothing is granted for %v more; %s",
			name, s.restartFence, fenced, need), fmt.Sprintf("wait %v; where Redis keeps its data across restarts, %s skips the fence", fenced, s.names.Ways(semaphore.RestartFenceSetting, "0")))
	}
	return n.check("server", semaphore.CheckOK, name+"; "+need, "")
}

// fixFor is the fix of an error a command got that is no refusal.
func (s *Store) fixFor(msg string) string {
	switch {
	case strings.Contains(msg, "OOM "):
		return "free memory, or raise maxmemory (see maxmemory-policy)"
	case strings.Contains(msg, "READONLY"):
		return fmt.Sprintf("point %s at the master (see replication)", s.names.Name(URLSetting))
	case strings.Contains(msg, "MOVED") || strings.Contains(msg, "CROSSSLOT"):
		return fmt.Sprintf("add %s for a Redis Cluster", s.names.Ways(ClusterSetting, "true"))
	}
	return fmt.Sprintf("use Redis %d.%d or later, or a server that runs Lua scripts as Redis does", minRedisMajor, minRedisMinor)
}
