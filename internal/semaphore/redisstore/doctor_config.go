package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/semrun/semrun/internal/semaphore"
)

// The checks of the server's configuration: what a restart keeps, what a
// full server drops, and whether it is a master.

// configGet reads one setting with CONFIG GET, which an ACL user may be
// refused.
func (s *Store) configGet(ctx context.Context, n *doctorNode, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	res, err := n.ConfigGet(ctx, name).Result()
	if v, ok := res[name]; ok || err != nil {
		return v, err
	}
	return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
}

// persistence tells what a restart keeps. It is never a failure: the
// restart fence keeps at most N holders through a restart that lost
// permits. Losing them all stops every running command, though.
func (s *Store) persistence(ctx context.Context, n *doctorNode) semaphore.Check {
	switch n.info["aof_enabled"] {
	case "":
		return n.check("persistence", semaphore.CheckWarn, "could not check: "+n.infoMissing("persistence"),
			"allow INFO (see acl), or check by hand as an admin: redis-cli INFO persistence (aof_enabled) and CONFIG GET save")
	case "1":
		how := ""
		if fsync, err := s.configGet(ctx, n, "appendfsync"); err == nil {
			how = " (appendfsync " + fsync + ")"
		}
		return n.check("persistence", semaphore.CheckOK, "AOF on"+how+": a restart keeps the permits, but for the latest writes the disk had not got; the restart fence covers those", "")
	}
	save, err := s.configGet(ctx, n, "save")
	switch {
	case err != nil:
		return n.check("persistence", semaphore.CheckWarn, fmt.Sprintf("AOF off, and could not read the RDB save points (%s): without either, a restart loses every permit", shortError(err)),
			"check by hand as an admin: redis-cli CONFIG GET save (empty: no snapshots); CONFIG SET appendonly yes keeps permits across a restart")
	case strings.TrimSpace(save) != "":
		return n.check("persistence", semaphore.CheckOK, "RDB snapshots (save "+save+"), no AOF: a restart loses the grants made since the last snapshot; the restart fence keeps new holders from joining those that still run", "")
	}
	return n.check("persistence", semaphore.CheckWarn, "none (no AOF, no RDB snapshots): a restart loses every permit, so running commands are stopped (exit 112) and nothing is granted for the restart fence; the fence keeps at most N holders",
		"CONFIG SET appendonly yes (and appendonly yes in redis.conf), to keep permits across a restart; keep the restart fence on either way")
}

// maxmemory checks that Redis never evicts semrun's keys: a holder's
// record evicted is a permit someone else is granted while it runs. Every
// key semrun writes carries a TTL (so that an abandoned semaphore
// vanishes), so volatile-* policies may evict them as much as allkeys-*:
// only noeviction is safe. A full Redis under noeviction refuses writes,
// which fails acquires and renewals, but never admits more than N.
func (s *Store) maxmemory(ctx context.Context, n *doctorNode) semaphore.Check {
	policy, limit, shown := n.info["maxmemory_policy"], n.info["maxmemory"], n.info["maxmemory_human"]
	if policy == "" || limit == "" {
		// Not every server says it in INFO; CONFIG GET may be refused.
		var err error
		if policy, err = s.configGet(ctx, n, "maxmemory-policy"); err == nil {
			limit, err = s.configGet(ctx, n, "maxmemory")
		}
		if err != nil {
			return n.check("maxmemory-policy", semaphore.CheckWarn, fmt.Sprintf("could not check: %s, and %s; any policy but noeviction lets Redis evict semrun's keys", n.infoMissing("memory"), shortError(err)),
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
		return n.check("maxmemory-policy", semaphore.CheckFail, fmt.Sprintf("noeviction, and full (maxmemory %s): Redis refuses semrun's writes, so acquires fail and holders lose their permits", shown),
			"raise maxmemory, or free memory")
	case policy == "noeviction" && bytes > 0 && used*10 >= bytes*9:
		return n.check("maxmemory-policy", semaphore.CheckWarn, fmt.Sprintf("noeviction, but %d%% of maxmemory %s used: when full, Redis refuses semrun's writes, so acquires fail and holders lose their permits", used*100/bytes, shown),
			"raise maxmemory, or free memory")
	case policy == "noeviction" && bytes > 0:
		return n.check("maxmemory-policy", semaphore.CheckOK, fmt.Sprintf("noeviction (maxmemory %s): a full Redis refuses writes rather than drop semrun's keys", shown), "")
	case policy == "noeviction":
		return n.check("maxmemory-policy", semaphore.CheckOK, "noeviction (maxmemory 0: no limit): Redis never drops semrun's keys", "")
	case bytes > 0:
		return n.check("maxmemory-policy", semaphore.CheckFail, fmt.Sprintf("%s with maxmemory %s: a full Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), forgetting holders that still run: more than N could hold a key", policy, shown), fix)
	}
	return n.check("maxmemory-policy", semaphore.CheckWarn, policy+", but maxmemory 0 (no limit): nothing is evicted now; once a limit is set, Redis may evict semrun's keys (they all carry a TTL, so volatile-* policies pick them too), and more than N could hold a key", fix)
}

// replication refuses a replica (it refuses semrun's writes, or keeps
// grants its master never sees), points a master with replicas at the min
// replicas setting, and checks the one a run would ask: more than half of
// the master's replicas (see majority), and no more than it has.
func (s *Store) replication(n *doctorNode) semaphore.Check {
	switch role := n.info["role"]; role {
	case "":
		return n.check("replication", semaphore.CheckWarn, "could not check: "+n.infoMissing("replication")+"; semrun needs a master, not a replica",
			"allow INFO (see acl), or check by hand: redis-cli INFO replication (role:master)")
	case "master":
	default:
		master := "its master"
		if host := n.info["master_host"]; host != "" {
			master = net.JoinHostPort(host, n.info["master_port"])
		}
		return n.check("replication", semaphore.CheckFail, fmt.Sprintf("a replica of %s: it refuses semrun's writes (READONLY), or, writable, keeps grants its master never sees", master),
			fmt.Sprintf("point %s at the master (%s), or use %s to follow it through failovers", s.names.Name(URLSetting), master, s.names.Name(SentinelMasterSetting)))
	}
	replicas, _ := strconv.Atoi(n.info["connected_slaves"])
	setting := s.names.Name(semaphore.MinReplicasSetting)
	have := fmt.Sprintf("master with %d replicas", replicas)
	if replicas == 1 {
		have = "master with 1 replica"
	}
	if why, fix := s.noMajority(s.minReplicas, replicas); why != "" {
		return n.check("replication", semaphore.CheckWarn, have+"; "+why, fix+": more than half of the master's replicas")
	}
	switch {
	case s.minReplicas > replicas:
		// WAIT is never answered: every grant fails after the connect timeout.
		return n.check("replication", semaphore.CheckFail, fmt.Sprintf("%s, fewer than %s %d: no grant counts until that many replicas have it, so every run fails", have, setting, s.minReplicas),
			fmt.Sprintf("connect more replicas (INFO replication, connected_slaves), or lower %s", setting))
	case s.minReplicas > 0:
		return n.check("replication", semaphore.CheckOK, fmt.Sprintf("%s; %s %d, more than half of them: a grant counts once they have it, so a failover keeps it and no partition lets two sides grant it", have, setting, s.minReplicas), "")
	case replicas == 0:
		return n.check("replication", semaphore.CheckOK, "master, no replicas", "")
	case replicas == 1:
		return n.check("replication", semaphore.CheckOK, fmt.Sprintf("%s: a failover can lose the grants it had not received yet; %s 1 makes each grant wait until it has it", have, setting), "")
	}
	return n.check("replication", semaphore.CheckOK, fmt.Sprintf("%s: a failover can lose the grants they had not received yet; %s %d, more than half of them, makes each grant wait until that many have it", have, setting, majority(replicas)), "")
}
