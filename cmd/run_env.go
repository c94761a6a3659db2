package cmd

import (
	"slices"
	"strconv"
	"strings"

	"github.com/semrun/semrun/internal/semaphore"
)

// Variables the child gets, deliberately not the configuration variables:
// a semrun inside the child must not inherit its parent's key or capacity.
const (
	envHeldKey      = "SEMRUN_HELD_KEY"
	envHeldPermits  = "SEMRUN_HELD_PERMITS"
	envFencingToken = "SEMRUN_FENCING_TOKEN"
	// envFencingTokens is every key's token, KEY=TOKEN a line.
	envFencingTokens = "SEMRUN_FENCING_TOKENS"
	// envHeldKeys lists, one a line, the keys held by every semrun this
	// one runs under, so that a nested semrun never waits for an ancestor.
	envHeldKeys = "SEMRUN_HELD_KEYS"
	// The slots held (semaphore.Slots): of the first key, the first and
	// all, their names when named, and every key's, KEY=SLOTS a line.
	envSlot      = "SEMRUN_SLOT"
	envSlots     = "SEMRUN_SLOTS"
	envSlotName  = "SEMRUN_SLOT_NAME"
	envSlotNames = "SEMRUN_SLOT_NAMES"
	envKeySlots  = "SEMRUN_KEY_SLOTS"
)

// slotVariables are the variables that tell the slots held.
var slotVariables = []string{envSlot, envSlots, envSlotName, envSlotNames, envKeySlots}

// childVariables are the variables semrun gives its command, and what
// each holds, as the man page lists them.
var childVariables = []struct{ name, meaning string }{
	{envHeldKey, "the key held; of several (-k a -k b), the first"},
	{envHeldPermits, "the capacity N this call asked for (of the first key)"},
	{envFencingToken, "an integer that strictly increases with every grant of this key, even after its keys expired or Redis lost its data: pass it to a downstream system so that it can reject a stale holder (of several keys, the first's)"},
	{envFencingTokens, "every key's fencing token, KEY=TOKEN a line, in the order the keys were given"},
	{envHeldKeys, "the keys of every semrun the command runs under, one a line: a semrun asked for any of them refuses with status 125 instead of waiting for itself"},
	{envSlot, "which of the key's permits is held, from 0 to N-1, each held by one holder at a time (of a --weight, the first; of several keys, the first key's): CUDA_VISIBLE_DEVICES=$SEMRUN_SLOT; unset on a key of more than 1024 permits"},
	{envSlots, "every slot held, comma-separated (with --weight K, K of them)"},
	{envSlotName, "the slot's name, when an operator named the key's slots (semrun key set KEY --slots a,b,c)"},
	{envSlotNames, "every slot's name, comma-separated, in the order of " + envSlots},
	{envKeySlots, "every key's slots, KEY=SLOTS a line, in the order the keys were given"},
}

// childVariable tells the variables semrun gives its command, and a later
// one a hold gives, which a semrun inside that command sees.
func childVariable(name string) bool {
	return strings.HasPrefix(name, "SEMRUN_HELD_") || name == envFencingToken || name == envFencingTokens || name == "SEMRUN_HANDLE" ||
		slices.Contains(slotVariables, name)
}

// heldKeys are the keys the semruns this one runs under hold. Keys have no
// control characters, so a newline separates them unambiguously.
func (o *waitOptions) heldKeys() []string {
	keys := strings.FieldsFunc(o.f.getenv(envHeldKeys), func(r rune) bool { return r == '\n' })
	if k := o.f.getenv(envHeldKey); k != "" && !slices.Contains(keys, k) {
		keys = append(keys, k)
	}
	return keys
}

// childEnv is semrun's environment for the child, less the variables that
// choose what semrun holds and the secrets it used, plus the SEMRUN_HELD_*
// variables, the fencing tokens and the slots, one a key in o.keys' order.
// A parent's slot variables go: a key that numbers none sets none.
func (o *runOptions) childEnv(environ []string, tokens []int64, slots []semaphore.Slots) []string {
	drop := map[string]bool{
		"SEMRUN_KEY": true, "SEMRUN_PERMITS": true, envRedisPassword: true, envRedisCLIAuth: o.secrets.usedCLIAuth,
		envHeldKey: true, envHeldPermits: true, envFencingToken: true, envHeldKeys: true, envFencingTokens: true,
	}
	for _, name := range slotVariables {
		drop[name] = true
	}
	env := make([]string, 0, len(environ)+4)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		// Any URL with userinfo may carry a password, even one that does
		// not parse (a password with an unescaped /).
		if drop[name] || name == envNames["redis"] && strings.Contains(value, "@") {
			continue
		}
		env = append(env, kv)
	}
	keys := o.keys
	if len(keys) == 0 {
		keys = []string{o.key} // a run under a handle
	}
	pairs := make([]string, len(keys))
	for i, key := range keys {
		pairs[i] = key + "=" + strconv.FormatInt(tokens[i], 10)
	}
	env = append(env,
		envHeldKey+"="+keys[0],
		envHeldKeys+"="+strings.Join(append(o.heldKeys(), keys...), "\n"),
		envHeldPermits+"="+strconv.Itoa(o.permitsOf(0)),
		envFencingToken+"="+strconv.FormatInt(tokens[0], 10),
		envFencingTokens+"="+strings.Join(pairs, "\n"),
	)
	return append(env, slotEnv(keys, slots)...)
}

// slotEnv are the variables that tell the slots held: the first key's,
// and, where any key numbers slots, every key's.
func slotEnv(keys []string, slots []semaphore.Slots) []string {
	var env []string
	if len(slots) > 0 && len(slots[0].Numbers) > 0 {
		first := slots[0]
		env = append(env, envSlot+"="+strconv.Itoa(first.Numbers[0]), envSlots+"="+first.NumbersText())
		if len(first.Names) > 0 {
			env = append(env, envSlotName+"="+first.Names[0], envSlotNames+"="+first.NamesText())
		}
	}
	var lines []string
	for i, s := range slots {
		if len(s.Numbers) > 0 && i < len(keys) {
			lines = append(lines, keys[i]+"="+s.NumbersText())
		}
	}
	if len(lines) > 0 {
		env = append(env, envKeySlots+"="+strings.Join(lines, "\n"))
	}
	return env
}

// slotsText says, for a log line, which slots lease holds: ", slots 0,3"
// (of several keys, each key's, "; " between), "" for none.
func slotsText(lease semaphore.Lease) string {
	var parts []string
	for _, s := range semaphore.SlotsOf(lease) {
		if len(s.Numbers) > 0 {
			parts = append(parts, s.NumbersText())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ", slots " + strings.Join(parts, "; ")
}
