package cmd

import (
	"slices"
	"strconv"
	"strings"
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
)

// childVariables are the variables semrun gives its command, and what
// each holds, as the man page lists them.
var childVariables = []struct{ name, meaning string }{
	{envHeldKey, "the key held; of several (-k a -k b), the first"},
	{envHeldPermits, "the capacity N this call asked for (of the first key)"},
	{envFencingToken, "an integer that strictly increases with every grant of this key, even after its keys expired or Redis lost its data: pass it to a downstream system so that it can reject a stale holder (of several keys, the first's)"},
	{envFencingTokens, "every key's fencing token, KEY=TOKEN a line, in the order the keys were given"},
	{envHeldKeys, "the keys of every semrun the command runs under, one a line: a semrun asked for any of them refuses with status 125 instead of waiting for itself"},
}

// childVariable tells the variables semrun gives its command, and a later
// one a hold gives, which a semrun inside that command sees.
func childVariable(name string) bool {
	return strings.HasPrefix(name, "SEMRUN_HELD_") || name == envFencingToken || name == envFencingTokens || name == "SEMRUN_HANDLE"
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
// variables and the fencing tokens, one a key in o.keys' order.
func (o *runOptions) childEnv(environ []string, tokens []int64) []string {
	drop := map[string]bool{
		"SEMRUN_KEY": true, "SEMRUN_PERMITS": true, envRedisPassword: true, envRedisCLIAuth: o.secrets.usedCLIAuth,
		envHeldKey: true, envHeldPermits: true, envFencingToken: true, envHeldKeys: true, envFencingTokens: true,
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
	return append(env,
		envHeldKey+"="+keys[0],
		envHeldKeys+"="+strings.Join(append(o.heldKeys(), keys...), "\n"),
		envHeldPermits+"="+strconv.Itoa(o.permitsOf(0)),
		envFencingToken+"="+strconv.FormatInt(tokens[0], 10),
		envFencingTokens+"="+strings.Join(pairs, "\n"),
	)
}
