package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

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
	// operator: only an operator's user needs it on its key (semrun key);
	// a run's may lack it.
	operator bool
	// keys is the ACL key pattern of its key, for an optional probe whose
	// key the user may be refused alone: what to grant then (not every
	// key under the prefix, which would let a run's user write the
	// policy).
	keys string
}

// aclProbes are every command semrun sends, itself or from its scripts,
// on keys as it names them. Besides these, go-redis sends HELLO (which no
// ACL refuses), SELECT for a database other than 0 and, in a cluster,
// CLUSTER SLOTS: without those, doctor cannot connect (latency names
// them); and COMMAND in a cluster (acl tries it there).
func (s *Store) aclProbes(k protocol.Keys, noHolder string) []aclProbe {
	wake := k.WakeList(noHolder)
	events, stats := protocol.SuffixPattern(s.prefix, "events"), protocol.SuffixPattern(s.prefix, "stats")
	index := protocol.IndexPattern(s.prefix)
	// The renewal of a permit nobody holds reads the keys and writes nothing.
	renew := protocol.RenewArgs{ID: noHolder, TTL: time.Second}
	return []aclProbe{
		// Cleaning up comes first: without PEXPIRE, nothing is written.
		{args: []any{"DEL", wake}},
		{args: []any{"PEXPIRE", k.Token, 60000}},
		{args: protocol.Command("EVAL", k, renew)},
		{args: protocol.Command("EVALSHA", k, renew)},
		{args: []any{"TIME"}},
		{args: []any{"INFO", "server"}},
		{args: []any{"WAIT", 0, 0}, optional: s.names.Name(semaphore.MinReplicasSetting) + " would fail"},
		{args: []any{"HSET", k.Info, "#doctor", 1}, writes: true},
		{args: []any{"HGET", k.Info, "#doctor"}},
		{args: []any{"HMGET", k.Info, "#doctor", "#cap"}},
		{args: []any{"HGETALL", k.Hold + ":doctor"}},
		// A key's settings: read by every script, written by semrun key.
		{args: []any{"HMGET", k.Policy, "cap", "paused"}},
		{args: []any{"HSET", k.Policy, "#doctor", 1}, writes: true, operator: true},
		{args: []any{"HDEL", k.Info, "#doctor"}},
		{args: []any{"ZADD", k.Holders, 1, "doctor"}, writes: true},
		{args: []any{"ZSCORE", k.Holders, "doctor"}},
		{args: []any{"ZRANK", k.Holders, "doctor"}},
		{args: []any{"ZCARD", k.Holders}},
		{args: []any{"ZRANGE", k.Holders, 0, -1, "WITHSCORES"}},
		{args: []any{"ZRANGEBYSCORE", k.Holders, "(0", "+inf", "WITHSCORES"}},
		{args: []any{"ZREM", k.Holders, "doctor"}},
		{args: []any{"SET", k.Token, 1}, writes: true},
		{args: []any{"GET", k.Token}},
		{args: []any{"EXISTS", k.Token}},
		{args: []any{"PTTL", k.Token}},
		{args: []any{"RPUSH", wake, "doctor"}, writes: true},
		// What semrun's waiters send: a timeout in fractions of a second.
		{args: []any{"BLPOP", wake, "0.01"}},
		{args: []any{"SCAN", 0, "MATCH", protocol.KeyPattern(s.prefix), "COUNT", 10},
			optional: "semrun status without a KEY would fail"},
		// What happened to a key (events.go): the scripts log it in a pcall,
		// so a refusal loses the events, never a grant.
		{args: []any{"XADD", k.Events, "MAXLEN", "~", protocol.MaxEvents, "*", "e", "doctor"}, writes: true,
			optional: "no events would be logged (semrun events)", keys: events},
		{args: []any{"XLEN", k.Events}, optional: eventsFail, keys: events},
		{args: []any{"XRANGE", k.Events, "-", "+", "COUNT", 1}, optional: eventsFail, keys: events},
		{args: []any{"XREVRANGE", k.Events, "+", "-", "COUNT", 1}, optional: eventsFail, keys: events},
		{args: []any{"XREAD", "COUNT", 1, "STREAMS", k.Events, "0-0"}, optional: eventsFail, keys: events},
		// The counters, which the scripts write as the log, in a pcall.
		{args: []any{"HMGET", k.Stats, "grants"}, optional: "no counters would be kept (semrun metrics)", keys: stats},
		// The index: every key's, whose life a probe must not change, so
		// SADD is tried on a throw-away key, and the index is only read, and
		// a member it never had removed.
		{args: []any{"SADD", k.Stats, "doctor"}, writes: true, optional: unlisted, keys: stats},
		{args: []any{"SSCAN", protocol.Index(s.prefix), 0, "COUNT", 1}, optional: unlisted, keys: index},
		{args: []any{"SCARD", protocol.Index(s.prefix)}, optional: unlisted, keys: index},
		{args: []any{"SREM", protocol.Index(s.prefix), k.Name}, optional: unlisted, keys: index},
	}
}

// What fails without the commands that read events, or keep the index.
const (
	eventsFail = "semrun events would fail"
	unlisted   = "semrun events and metrics without a KEY would find no key"
)

// name is the command's name, as ACL names it.
func (p aclProbe) name() string { return strings.ToLower(p.args[0].(string)) }

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Commands are the commands semrun sends to Redis, itself or from its
// scripts, as ACL names them: what a Redis user for semrun must be allowed
// (WAIT for the min replicas setting only).
func Commands() []string {
	var names []string
	for _, p := range (&Store{names: semaphore.OwnNames{}}).aclProbes(protocol.NewKeys("", ""), "") {
		names = append(names, p.name())
	}
	slices.Sort(names)
	return names
}

// refusedCommand finds the command an ACL refusal names; compiled when
// first needed, as start-up need not pay for it.
var refusedCommand = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`'([a-z_|-]+)' command`) })

// refusal tells an ACL refusal: perm is true for one, with key true when a
// key was refused, and command the command when Redis named it.
func refusal(err error) (command string, key, perm bool) {
	if err == nil {
		return "", false, false
	}
	msg := err.Error()
	if !strings.Contains(msg, "NOPERM") && !strings.Contains(msg, "can't run this command") && !strings.Contains(msg, "no permissions") &&
		!strings.Contains(msg, "can't access at least one of the keys") {
		return "", false, false
	}
	if m := refusedCommand().FindStringSubmatch(msg); m != nil {
		command = m[1]
	}
	return command, command == "" && strings.Contains(msg, "key"), true
}

// probe sends p. A command that writes goes in one round trip with a
// PEXPIRE of its key, so that a doctor killed at any point leaves only
// keys that expire.
func (s *Store) probe(ctx context.Context, p aclProbe) error {
	if !p.writes {
		return s.do(ctx, s.client.Do, p.args...).Err()
	}
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	key := p.args[1].(string)
	n, err := s.client.Node(ctx, key)
	if err != nil {
		return err
	}
	var cmd *redis.Cmd
	_, _ = n.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = pipe.Do(ctx, p.args...)
		pipe.PExpire(ctx, key, time.Minute)
		return nil
	})
	return cmd.Err()
}

// aclFindings are what the probes found.
type aclFindings struct {
	missing, optional, costs, keyRefused []string
	// keysOptional are the patterns of the optional keys refused (see
	// aclProbe's keys).
	keysOptional []string
	// odd are the answers that are no refusal, each with the commands
	// that got it, in the order they came.
	odd map[string][]string
	// oddMsgs are odd's answers, in order.
	oddMsgs []string
	// canWrite: PEXPIRE was allowed, so the commands that write were tried.
	canWrite bool
	// runsOnly: the user may not change a key's settings (an operator's
	// may): fine for runs.
	runsOnly bool
}

// acl sends every command semrun sends, as semrun does, on a throw-away
// semaphore, and names those refused. It returns whether any was.
func (s *Store) acl(ctx context.Context) (semaphore.Check, bool) {
	k := protocol.NewKeys(s.prefix, doctorKey())
	id := newPermitID()
	all := append(k.All(), k.WakeList(id))
	f, err := s.runProbes(ctx, k, id)
	if f != nil && !f.runsOnly {
		all = append(all, k.Policy) // written: by a user that may
	}
	cleaned := s.cleanup(ctx, all)
	if err != nil {
		return semaphore.Check{Name: "acl", Status: semaphore.CheckFail, Detail: "could not finish: " + err.Error(),
			Fix: "run doctor again once Redis answers (see latency)"}, false
	}
	return s.aclCheck(f, cleaned)
}

// runProbes sends every probe, and sorts Redis's answers.
func (s *Store) runProbes(ctx context.Context, k protocol.Keys, id string) (*aclFindings, error) {
	f := &aclFindings{odd: map[string][]string{}}
	probes := s.aclProbes(k, id)
	if s.cluster {
		// go-redis asks COMMAND where each command's key is, before it
		// routes one it does not know (BLPOP); refused, it asks again every
		// time, and sends the command to any node first.
		probes = append(probes, aclProbe{args: []any{"COMMAND"},
			optional: "in a cluster, every BLPOP would cost a refused COMMAND and a redirection (MOVED)"})
	}
	for _, p := range probes {
		if p.writes && !f.canWrite {
			continue // it would leave a key behind that does not expire
		}
		name := p.name()
		err := s.probe(ctx, p)
		// NOSCRIPT: EVALSHA was allowed (EVAL, refused, loaded nothing).
		if err == nil || errors.Is(err, redis.Nil) || protocol.IsNoScript(err) {
			f.canWrite = f.canWrite || name == "pexpire"
			continue
		}
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			// The network: the rest would fail alike.
			return nil, fmt.Errorf("%s: %w", strings.ToUpper(name), err)
		}
		f.sort(p, err)
	}
	slices.Sort(f.missing)
	f.missing = slices.Compact(f.missing)
	return f, nil
}

// sort files Redis's answer to p, an error.
func (f *aclFindings) sort(p aclProbe, err error) {
	name := p.name()
	command, key, perm := refusal(err)
	switch {
	case !perm:
		msg := shortError(err)
		if !slices.Contains(f.oddMsgs, msg) {
			f.oddMsgs = append(f.oddMsgs, msg)
		}
		f.odd[msg] = append(f.odd[msg], strings.ToUpper(name))
	case key && p.operator:
		f.runsOnly = true
	case key && p.keys != "":
		if !slices.Contains(f.keysOptional, p.keys) {
			f.keysOptional = append(f.keysOptional, p.keys)
			f.costs = append(f.costs, fmt.Sprintf("not keys %s: %s", p.keys, p.optional))
		}
	case key:
		f.keyRefused = append(f.keyRefused, strings.ToUpper(name))
	case command == "" && !strings.HasPrefix(err.Error(), "NOPERM"):
		// A script refused one of its commands without naming it: the
		// probes of those commands name it.
	case command == "" || command == name:
		if p.optional != "" {
			f.optional = append(f.optional, name)
			f.costs = append(f.costs, fmt.Sprintf("not %s: %s", strings.ToUpper(name), p.optional))
		} else {
			f.missing = append(f.missing, name)
		}
	default:
		// A script named the command it was refused.
		f.missing = append(f.missing, command)
	}
}

// aclCheck says what the probes found, and how to mend it.
func (s *Store) aclCheck(f *aclFindings, cleaned bool) (semaphore.Check, bool) {
	user := s.client.User()
	var fixes, problems []string
	if len(f.missing) > 0 || len(f.optional) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" +"+strings.Join(append(slices.Clone(f.missing), f.optional...), " +"))
	}
	if len(f.keyRefused) > 0 {
		// A run's keys: what semrun needs, and no key's settings to change
		// (an operator's: protocol.OperatorKeys, which the check says once
		// the run's pass).
		fixes = append(fixes, "ACL SETUSER "+user+" "+strings.Join(protocol.RunKeys(s.prefix), " "))
	} else if len(f.keysOptional) > 0 {
		fixes = append(fixes, "ACL SETUSER "+user+" ~"+strings.Join(f.keysOptional, " ~"))
	}
	if len(f.missing) > 0 {
		problems = append(problems, fmt.Sprintf("user %s may not run %s, which semrun sends", user, strings.ToUpper(strings.Join(f.missing, ", "))))
		if slices.Contains(f.missing, "info") {
			problems = append(problems, fmt.Sprintf("without INFO every acquire fails (the restart fence reads it) unless %s 0", s.names.Name(semaphore.RestartFenceSetting)))
		}
	}
	if len(f.keyRefused) > 0 {
		refused := strings.Join(f.keyRefused, ", ")
		if len(f.keyRefused) > 3 {
			refused = fmt.Sprintf("%d commands", len(f.keyRefused))
		}
		problems = append(problems, fmt.Sprintf("user %s may not use keys under %s (refused to %s)", user, s.prefix, refused))
	}
	if !f.canWrite && len(f.keyRefused) == 0 {
		problems = append(problems, "PEXPIRE was refused, so the commands that write were not tried")
	}
	switch {
	case len(problems) > 0:
		return semaphore.Check{Name: "acl", Status: semaphore.CheckFail, Detail: strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}, true
	case len(f.optional) > 0 || len(f.keysOptional) > 0:
		return semaphore.Check{Name: "acl", Status: semaphore.CheckWarn, Fix: strings.Join(fixes, "; "),
			Detail: fmt.Sprintf("user %s may run every command semrun needs on keys under %s, but %s", user, s.prefix, strings.Join(f.costs, "; "))}, false
	case len(f.oddMsgs) > 0:
		var answers []string
		for _, msg := range f.oddMsgs {
			answers = append(answers, strings.Join(f.odd[msg], ", ")+": "+msg)
		}
		return semaphore.Check{Name: "acl", Status: semaphore.CheckWarn, Fix: s.fixFor(answers[0]),
			Detail: fmt.Sprintf("user %s may run every command semrun sends, but Redis answered %s", user, strings.Join(answers, "; "))}, false
	}
	check := semaphore.Check{Name: "acl", Status: semaphore.CheckOK, Detail: fmt.Sprintf("user %s may run the %d commands semrun sends, on keys under %s", user, len(Commands()), s.prefix)}
	policy := protocol.SuffixPattern(s.prefix, "policy")
	if f.runsOnly {
		check.Detail += fmt.Sprintf("; it may read a key's settings but not change them, as a run's user needs (semrun key needs an operator's, which may write %s)", policy)
	} else {
		check.Detail += fmt.Sprintf("; it may change a key's settings (semrun key), as an operator's user may (a run's needs only read %s: %%R~)", policy)
	}
	if !cleaned {
		check.Status = semaphore.CheckWarn
		check.Detail += ", but doctor could not remove its throw-away keys (they expire within a minute)"
	}
	return check, false
}

// refusedCommands names the commands the user may not run, and the fix,
// for a script that Redis refused a command without naming it.
func (s *Store) refusedCommands(ctx context.Context) string {
	// Within the caller's deadline: a release has 2s, and a Ctrl-C ends it.
	ctx, cancel := context.WithTimeout(ctx, doctorLease)
	defer cancel()
	check, refused := s.acl(ctx)
	if !refused {
		return "a command semrun's scripts run was refused (semrun doctor names it)"
	}
	return check.Detail + "; fix: " + check.Fix
}

// cleanup removes doctor's throw-away keys, or makes them expire at once
// for a user not allowed DEL, even when ctx was cancelled. They share one
// hash tag, so one DEL takes them all in a cluster too. It tells whether
// that worked.
func (s *Store) cleanup(ctx context.Context, keys []string) bool {
	ctx = context.WithoutCancel(ctx)
	if s.do(ctx, s.client.Do, append([]any{"DEL"}, toAny(keys)...)...).Err() == nil {
		return true
	}
	ok := true
	for _, k := range keys {
		if s.do(ctx, s.client.Do, "PEXPIRE", k, 1).Err() != nil {
			ok = false
		}
	}
	return ok
}
