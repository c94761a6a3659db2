package protocol

import (
	"context"
	_ "embed"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Each script is the limits, lib.lua and the script's own file, sent as one.
var (
	//go:embed lib.lua
	libLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed status.lua
	statusLua string
	//go:embed watch.lua
	watchLua string
	//go:embed key.lua
	keyLua string
	//go:embed hold.lua
	holdLua string
	//go:embed many.lua
	manyLua string

	acquireScript = newScript("acquire.lua", acquireLua)
	renewScript   = newScript("renew.lua", renewLua)
	releaseScript = newScript("release.lua", releaseLua)
	statusScript  = newScript("status.lua", statusLua)
	watchScript   = newScript("watch.lua", watchLua)
	holdScript    = newScript("hold.lua", holdLua)
	keyScript     = newScript("key.lua", keyLua)
	manyScript    = newScript("many.lua", manyLua)
)

// Scripts are every script, for the tests that check them all.
func Scripts() []*Script {
	return []*Script{acquireScript, renewScript, releaseScript, statusScript, watchScript, holdScript, keyScript, manyScript}
}

// Script is one of the store's scripts. Its source and the hash Redis
// knows it by are made when it is first used, so that a run pays for the
// scripts it runs only, and --local and version for none:
// BenchmarkBuildAllScripts measures what building them all at start-up
// would cost every run.
type Script struct {
	name   string
	body   string // the script's own file, run after lib.lua
	once   sync.Once
	source string // the limits, lib.lua and the script's own file
	lua    *redis.Script
}

func newScript(name, body string) *Script { return &Script{name: name, body: body} }

// Build makes the script's source and hash now, if not made yet: a caller
// that will need it at a moment when every millisecond counts (a release
// that hands a permit over) makes it beforehand. The source carries only
// the part of lib.lua the script needs (libFor).
func (s *Script) Build() {
	s.once.Do(func() {
		lib, err := libFor(s.name)
		if err != nil { // lib.lua is embedded: TestScriptsDefineWhatTheyCall fails first
			panic(err)
		}
		s.source = limitsLua() + lib + s.body
		s.lua = redis.NewScript(s.source)
	})
}

// Name is the script's file name.
func (s *Script) Name() string { return s.name }

// Source is the text sent with EVAL.
func (s *Script) Source() string { s.Build(); return s.source }

// Hash is the SHA-1 EVALSHA names the script by.
func (s *Script) Hash() string { s.Build(); return s.lua.Hash() }

// Run runs a with EVALSHA on k, loading the script first when Redis lacks
// it. Errors the script raised name its file and line (Wrap).
func Run(ctx context.Context, c redis.Scripter, k Keys, a Args) (any, error) {
	sc := a.script()
	sc.Build()
	res, err := sc.lua.Run(ctx, c, k.List(), a.argv(k)...).Result()
	return res, sc.Wrap(err)
}

// RunMany runs many.lua for a on its keys (ManyArgs.Keys), as Run does.
func RunMany(ctx context.Context, c redis.Scripter, a ManyArgs) (any, error) {
	sc := a.script()
	sc.Build()
	var keys []string
	for _, k := range a.Keys {
		keys = append(keys, k.List()...)
	}
	res, err := sc.lua.Run(ctx, c, keys, a.argv(Keys{})...).Result()
	return res, sc.Wrap(err)
}

// Eval sends a with EVAL, the whole script: in a pipeline, a NOSCRIPT
// reply to EVALSHA could not be answered with a load in time.
func Eval(ctx context.Context, c redis.Scripter, k Keys, a Args) *redis.Cmd {
	return c.Eval(ctx, a.script().Source(), k.List(), a.argv(k)...)
}

// EvalSha sends a with EVALSHA only: NOSCRIPT when Redis lacks the script.
func EvalSha(ctx context.Context, c redis.Scripter, k Keys, a Args) *redis.Cmd {
	return c.EvalSha(ctx, a.script().Hash(), k.List(), a.argv(k)...)
}

// Command is a as the arguments of one EVAL or EVALSHA (verb) command,
// for a client's Do.
func Command(verb string, k Keys, a Args) []any {
	script := a.script().Source()
	if verb == "EVALSHA" {
		script = a.script().Hash()
	}
	keys := k.List()
	out := []any{verb, script, len(keys)}
	for _, key := range keys {
		out = append(out, key)
	}
	return append(out, a.argv(k)...)
}

// IsNoScript tells Redis's answer to EVALSHA of a script it does not have.
func IsNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// limitLines and libLines are how many lines of a script the limits and
// lib.lua take.
var (
	limitLines = 1
	libLines   = strings.Count(libLua, "\n")
)

// scriptLine finds where an error says it was raised: Redis says
// "user_script:N", gopher-lua (miniredis) ":N:" and "<:N>".
// Compiled when first needed: start-up need not pay for it.
var scriptLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(user_script|[\s<]):(\d+)`) })

// Wrap names the file and line of an error the script raised, where Redis
// counts the lines of the limits, lib.lua and the script's own as one.
func (s *Script) Wrap(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err // nil, or not the server's: the network, a deadline
	}
	msg := scriptLine().ReplaceAllStringFunc(err.Error(), func(m string) string {
		at := strings.LastIndexByte(m, ':')
		line, _ := strconv.Atoi(m[at+1:])
		before := m[:at]
		if before == "user_script" {
			before = ""
		}
		switch {
		case line > limitLines+libLines:
			return before + s.name + ":" + strconv.Itoa(line-limitLines-libLines)
		case line > limitLines:
			return before + "lib.lua:" + strconv.Itoa(line-limitLines)
		}
		return before + "limits.go:" + strconv.Itoa(line)
	})
	if msg == err.Error() {
		return err
	}
	return &scriptError{msg: msg, err: err}
}

// scriptError is what Redis said, with the script's own file and line.
type scriptError struct {
	msg string
	err error
}

func (e *scriptError) Error() string { return e.msg }
func (e *scriptError) Unwrap() error { return e.err }

// Build makes a's script now (see Script.Build).
func Build(a Args) { a.script().Build() }

// Wrap names the file and line of an error a's script raised (Script.Wrap).
func Wrap(a Args, err error) error { return a.script().Wrap(err) }
