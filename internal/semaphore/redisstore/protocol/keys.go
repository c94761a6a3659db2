package protocol

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// Keys are the Redis keys of one semaphore (lib.lua says what each
// holds). They share one hash tag, so one Cluster slot; braces in the
// prefix and the key are escaped so that neither can break the tag.
type Keys struct {
	// Name is the semaphore's key, as its callers name it.
	Name                                         string
	Holders, Info, Token, Queue, Waiters, Leases string
	// Policy is what an operator set on the key (semrun key): it never
	// expires, and only an operator writes it. No script names it among
	// its KEYS: Redis checks those for writing, and a run's ACL user may
	// be let read it only. lib.lua finds it from Info's name.
	Policy string
	// Wake is the prefix of the waiters' wake lists: each waiter blocks on
	// its own (WakeList), where the scripts push its turn.
	Wake string
	// Hold is the prefix of the holds' records (HoldRecord).
	Hold string
	// Events and Stats are what happened to the key (lib.lua says what
	// each holds): its capped event log, and its counters. They outlive
	// the others, EventLife after the last event, and are not in List:
	// not KEYS of the scripts (see All).
	Events, Stats string
}

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// keyUnescaper undoes keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// NewKeys are the keys of the semaphore key under prefix.
func NewKeys(prefix, key string) Keys {
	base := keyEscaper.Replace(prefix) + "{" + keyEscaper.Replace(key) + "}:"
	return Keys{
		Name:    key,
		Holders: base + "holders", Info: base + "info", Token: base + "token",
		Queue: base + "queue", Waiters: base + "waiters", Leases: base + "leases", Wake: base + "wake", Hold: base + "hold",
		Policy: base + "policy", Events: base + "events", Stats: base + "stats",
	}
}

// List is the keys of the semaphore's state, which live as long as its
// leases (lib.lua's keepalive): KEYS of every script, in the order
// lib.lua takes them.
func (k Keys) List() []string {
	return []string{k.Holders, k.Info, k.Token, k.Queue, k.Waiters, k.Leases}
}

// All is every key the scripts write: List, then Events and Stats. Those
// two are not KEYS (lib.lua names them from Info, as it does Policy):
// Redis refuses a script one of whose KEYS the ACL user may not use
// before it runs, so a user refused the log (the run's user of a release
// before events) could take no permit at all; not KEYS, an XADD refused
// fails inside the script's pcall, and only the event is lost. While the
// slot migrates, a script run where its state is may find its log moved
// already: the event is lost alike, never written where the key is not.
func (k Keys) All() []string {
	return append(k.List(), k.Events, k.Stats)
}

// Index is the set of the semaphores under prefix whose events or
// counters the store keeps (Store.Keys): outside any semaphore's hash
// tag, so a client, not a script, adds to it, when a script says it
// renewed a key's counters (once an hour at most).
func Index(prefix string) string {
	return keyEscaper.Replace(prefix) + "keys"
}

// IndexPattern is an ACL key pattern for Index alone.
func IndexPattern(prefix string) string {
	return globEscaper.Replace(Index(prefix))
}

// Member is the name the permit of id goes by in the keys (lib.lua's
// member): its SHA-1, in hex. The keys hold members, never ids, and the
// scripts take ids: whoever reads the keys can use nothing they hold.
func Member(id string) string {
	sum := sha1.Sum([]byte(id))
	return hex.EncodeToString(sum[:])
}

// WakeList is the wake list of the waiter whose permit id is id: named
// after a hash of its member, so that the list tells nobody a permit id.
// It shares the semaphore's hash tag. lib.lua's wakekey names it alike.
func (k Keys) WakeList(id string) string {
	return k.Wake + ":" + shortHash(Member(id))
}

// HoldRecord is the record of the hold whose permit id is id, named
// after a hash of its member as a wake list is (hold.lua's hk).
func (k Keys) HoldRecord(id string) string {
	return k.Hold + ":" + shortHash(Member(id))
}

// shortHash is the first 16 hex digits of the SHA-1 of s.
func shortHash(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// IsWakeList tells whether l could be one of the key's own wake lists:
// a name a reply carries is Redis's word, and only those are looked at.
func (k Keys) IsWakeList(l string) bool {
	return len(l) == len(k.Wake)+17 && strings.HasPrefix(l, k.Wake+":")
}

// globEscaper escapes what SCAN's MATCH pattern would read as a wildcard.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// KeyPattern is SCAN's MATCH pattern, or an ACL key pattern, for the keys
// of every semaphore under prefix.
func KeyPattern(prefix string) string { return SuffixPattern(prefix, "*") }

// SuffixPattern is an ACL key pattern, or SCAN's MATCH, for the keys of
// every semaphore under prefix whose name ends in suffix after the hash
// tag ("holders", "wake:*"): anchored on the tag, it matches no key of
// another kind, whatever characters a key's name holds. A key's braces
// are escaped, so the only "}" in its Redis keys ends the tag, and
// "semrun:{*}:hold:*" cannot match "semrun:{deploy:hold:prod}:policy" as
// "semrun:*:hold:*" would.
func SuffixPattern(prefix, suffix string) string {
	return globEscaper.Replace(keyEscaper.Replace(prefix)+"{") + "*}:" + suffix
}

// RunKeys are the ACL key selectors of a Redis user for runs only under
// prefix (semrun, acquire, --handle, release, status, events, metrics,
// doctor): every key of a semaphore's state, its wake lists, holds, log
// and counters, and the index, read and written; its policy read only,
// so that the user may not change a key's settings (semrun key).
// docs/configuration.md gives them for the prefix semrun:.
func RunKeys(prefix string) []string {
	out := make([]string, 0, 12)
	for _, suffix := range []string{"holders", "info", "token", "queue", "waiters", "leases", "wake:*", "hold:*", "events", "stats"} {
		out = append(out, "~"+SuffixPattern(prefix, suffix))
	}
	return append(out, "~"+IndexPattern(prefix), "%R~"+SuffixPattern(prefix, "policy"))
}

// OperatorKeys are the ACL key selectors of a Redis user that may also
// change a key's settings (semrun key): every key of every semaphore
// under prefix, and the index.
func OperatorKeys(prefix string) []string {
	return []string{"~" + KeyPattern(prefix), "~" + IndexPattern(prefix)}
}

// SemaphoreOf is the semaphore a key SCAN found under prefix belongs to.
func SemaphoreOf(prefix, redisKey string) (string, bool) {
	name, _, ok := strings.Cut(strings.TrimPrefix(redisKey, keyEscaper.Replace(prefix)+"{"), "}")
	if !ok {
		return "", false
	}
	return keyUnescaper.Replace(name), true
}

// IsPast tells a key of what happened to a semaphore (Events, Stats),
// which outlives its state.
func IsPast(redisKey string) bool {
	return strings.HasSuffix(redisKey, "}:events") || strings.HasSuffix(redisKey, "}:stats")
}
