package redisstore

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// Each script is lib.lua and the script's own file, sent as one.
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

	acquireScript = newScript("acquire.lua", acquireLua)
	renewScript   = newScript("renew.lua", renewLua)
	releaseScript = newScript("release.lua", releaseLua)
	statusScript  = newScript("status.lua", statusLua)
	watchScript   = newScript("watch.lua", watchLua)
)

// script is one of the store's scripts. Its source and the hash Redis
// knows it by are made when it is first used, so that a run pays for the
// scripts it runs only: making all five took 0.2ms of every start-up, of
// --local and of version too.
type script struct {
	name  string
	body  string // the script's own file, run after lib.lua
	built *builtScript
}

// builtScript is a script's source and hash, made once.
type builtScript struct {
	once   sync.Once
	source string // lib.lua and the script's own file
	lua    *redis.Script
}

func newScript(name, body string) script {
	return script{name: name, body: body, built: &builtScript{}}
}

func (s script) build() *builtScript {
	s.built.once.Do(func() {
		s.built.source = libLua + s.body
		s.built.lua = redis.NewScript(s.built.source)
	})
	return s.built
}

// source is the text sent with EVAL: lib.lua and the script's own file.
func (s script) source() string { return s.build().source }

// lua is the script as go-redis runs it.
func (s script) lua() *redis.Script { return s.build().lua }

// run runs the script with EVALSHA, loading it first when Redis lacks it.
func (s script) run(ctx context.Context, c redis.Scripter, k semKeys, args namedArgs) (any, error) {
	res, err := s.lua().Run(ctx, c, k.list(), args...).Result()
	return res, s.wrap(err)
}

// libLines is how many lines of a script lib.lua takes.
var libLines = strings.Count(libLua, "\n")

// scriptLine finds where an error says it was raised: Redis says
// "user_script:N", gopher-lua (miniredis) ":N:" and "<:N>".
// Compiled when first needed: start-up need not pay for it.
var scriptLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(user_script|[\s<]):(\d+)`) })

// wrap names the file and line of an error a script raised, where Redis
// counts the lines of lib.lua and the script's own as one.
func (s script) wrap(err error) error {
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
		if line > libLines {
			return before + s.name + ":" + strconv.Itoa(line-libLines)
		}
		return before + "lib.lua:" + strconv.Itoa(line)
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

// namedArgs are a script's ARGV: name, value, name, value... (lib.lua's args).
type namedArgs []any

// acquireArgs are acquire.lua's arguments.
type acquireArgs struct {
	id      string
	permits int
	ttl     time.Duration
	// meta is what status shows of the caller: its semaphore.HolderInfo,
	// as JSON.
	meta   []byte
	weight int
	// wait is the waiter lease; 0: the caller does not wait.
	wait time.Duration
	wake string // the wake lists' prefix
	// fence is the restart fence; 0: none.
	fence time.Duration
	// line is the longest line the key takes; 0 is MaxLine.
	line int
}

func (a acquireArgs) named() namedArgs {
	if a.line <= 0 {
		a.line = MaxLine
	}
	return namedArgs{
		"id", a.id, "permits", a.permits, "ttl", a.ttl.Milliseconds(), "meta", a.meta,
		"weight", a.weight, "wait", a.wait.Milliseconds(), "wake", a.wake, "fence", max(a.fence, 0).Milliseconds(), "line", a.line,
	}
}

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	granted                bool
	token, held, previous  int64
	lapse                  int64 // ms until the earliest lease lapses, or the fence ends
	position, waiting, now int64
	left, fenced, moved    int64 // ms
	// full: the line was full, and the caller is not in it.
	full bool
	// bad are the records the script dropped, which were not records.
	bad []any
	// handed are the wake lists of the waiters it handed a seat to.
	handed []any
	// wait is the caller's waiter lease, ms, when it is in line.
	wait int64
}

func decodeAcquire(res any) (acquireReply, error) {
	var r acquireReply
	var granted, full int64
	err := decodeReply(acquireScript.name, res, map[string]any{
		"granted": &granted, "token": &r.token, "held": &r.held, "previous": &r.previous,
		"lapse": &r.lapse, "position": &r.position, "waiting": &r.waiting, "now": &r.now,
		"left": &r.left, "fenced": &r.fenced, "moved": &r.moved, "full": &full, "bad": &r.bad, "handed": &r.handed, "wait": &r.wait,
	})
	r.granted, r.full = granted == 1, full == 1
	if err == nil && r.granted && r.token <= 0 {
		err = fmt.Errorf("%s: unexpected reply %s (token %d)", acquireScript.name, shortReply(res), r.token)
	}
	return r, err
}

// renewArgs are renew.lua's arguments: fence is the holder's restart
// fence, which the key remembers while the lease lasts.
func renewArgs(id string, ttl, fence time.Duration) namedArgs {
	return namedArgs{"id", id, "ttl", ttl.Milliseconds(), "fence", max(fence, 0).Milliseconds()}
}

// decodeRenew reads renew.lua's reply: whether the lease was extended.
func decodeRenew(res any) (bool, error) {
	var renewed int64
	err := decodeReply(renewScript.name, res, map[string]any{"renewed": &renewed})
	return renewed == 1, err
}

// releaseArgs are release.lua's arguments.
func releaseArgs(id, wake string) namedArgs { return namedArgs{"id", id, "wake", wake} }

// releaseReply is release.lua's reply.
type releaseReply struct {
	// released: the caller held a permit or waited.
	released bool
	// bad are the records the script dropped, which were not records;
	// handed the wake lists of the waiters it handed a seat to.
	bad, handed []any
}

func decodeRelease(res any) (releaseReply, error) {
	var r releaseReply
	var released int64
	err := decodeReply(releaseScript.name, res, map[string]any{"released": &released, "bad": &r.bad, "handed": &r.handed})
	r.released = released == 1
	return r, err
}

// statusList is how many holders, and how many waiters, status lists
// at most: listing more would make the script's work grow with the line.
const statusList = 1000

// statusArgs are status.lua's arguments.
func statusArgs() namedArgs { return namedArgs{"list", statusList} }

// statusReply is status.lua's reply.
type statusReply struct {
	now, capacity, held, holding, waiting, fenced int64
	holders, waiters                              []any
}

func decodeStatus(res any) (statusReply, error) {
	var r statusReply
	err := decodeReply(statusScript.name, res, map[string]any{
		"now": &r.now, "capacity": &r.capacity, "held": &r.held, "holding": &r.holding, "waiting": &r.waiting,
		"holders": &r.holders, "waiters": &r.waiters, "fenced": &r.fenced,
	})
	return r, err
}

// decodeReply reads a reply of names and values into fields, each an
// *int64 or a *[]any by its name. Every field must be there, once, with a
// value of its type, and nothing else: a reply is the scripts' own, and
// any other is not to be trusted.
func decodeReply(script string, res any, fields map[string]any) error {
	v, ok := res.([]any)
	if !ok || len(v) != 2*len(fields) {
		return fmt.Errorf("%s: unexpected reply %s", script, shortReply(res))
	}
	seen := map[string]bool{}
	for i := 0; i < len(v); i += 2 {
		name, _ := v[i].(string)
		field, ok := fields[name]
		if !ok || seen[name] {
			return fmt.Errorf("%s: unexpected reply %s (field %.40q)", script, shortReply(res), name)
		}
		seen[name] = true
		switch f := field.(type) {
		case *int64:
			*f, ok = v[i+1].(int64)
		case *[]any:
			*f, ok = v[i+1].([]any)
		}
		if !ok {
			return fmt.Errorf("%s: unexpected reply %s (field %.40q)", script, shortReply(res), name)
		}
	}
	return nil
}

// shortReply shows at most 200 bytes of a reply, which may be anything.
func shortReply(res any) string {
	s := fmt.Sprint(res)
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// turn is what a waiter read from its wake list.
type turn struct {
	// handed is true when a script gave the waiter its permit: token is
	// its fencing token and expiry the server time its lease lapses at.
	handed        bool
	token, expiry int64
	// look, when not handed, is the server time at which the waiter is to
	// ask again: a permit handed to the waiter before it may lapse
	// unclaimed then. 0 for an element that is neither: garbage.
	look int64
}

// readTurn reads a turn record (lib.lua's turnRecord): "g <token> <expiry
// ms>" for a permit handed over, "c <ms>" to look again then. Anything
// else is garbage, which the waiter drops.
func readTurn(elem string) turn {
	var t turn
	if len(elem) > 64 {
		return t
	}
	if n, err := fmt.Sscanf(elem, "g %d %d", &t.token, &t.expiry); err == nil && n == 2 && t.token > 0 && t.expiry > 0 {
		t.handed = true
		return t
	}
	t.token, t.expiry = 0, 0
	if n, err := fmt.Sscanf(elem, "c %d", &t.look); err != nil || n != 1 || t.look <= 0 {
		t.look = 0
	}
	return t
}

// readHolder reads a holder record (lib.lua's holderRecord), now being the
// server's clock in ms.
func readHolder(rec string, now int64) (semaphore.Holder, error) {
	var h semaphore.Holder
	n, err := readRecord(rec, 4, &h.HolderInfo)
	if err != nil {
		return h, err
	}
	if n[0] < 1 || n[0] > semaphore.MaxPermits || n[3] < 1 || n[3] > n[0] || n[1] < 1 {
		return h, fmt.Errorf("malformed record %.200q", rec)
	}
	h.Permits, h.Token, h.Age, h.Weight = int(n[0]), n[1], span(now-n[2]), int(n[3])
	return h, nil
}

// readWaiter reads a waiter record (lib.lua's waiterRecord), now being the
// server's clock in ms.
func readWaiter(rec string, now int64) (semaphore.Waiter, error) {
	var w semaphore.Waiter
	n, err := readRecord(rec, 5, &w.HolderInfo)
	if err != nil {
		return w, err
	}
	if n[1] < 1 || n[1] > semaphore.MaxPermits || n[2] < 1 || n[2] > n[1] {
		return w, fmt.Errorf("malformed record %.200q", rec)
	}
	w.Permits, w.Weight, w.Waited = int(n[1]), int(n[2]), span(now-n[3])
	return w, nil
}

// span is ms as a duration, from 0 to 100 years: records are anyone's.
func span(ms int64) time.Duration {
	return time.Duration(min(max(ms, 0), 100*365*24*time.Hour.Milliseconds())) * time.Millisecond
}

// readRecord reads count integers, then the holder JSON, from a record.
func readRecord(rec string, count int, info *semaphore.HolderInfo) ([]int64, error) {
	f := strings.SplitN(rec, " ", count+1)
	if len(f) != count+1 {
		return nil, fmt.Errorf("malformed record %.200q", rec)
	}
	nums := make([]int64, count)
	for i := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("malformed record %.200q", rec)
		}
		nums[i] = n
	}
	if f[count] != "" {
		if err := json.Unmarshal([]byte(f[count]), info); err != nil {
			return nil, fmt.Errorf("malformed record %.200q: %w", rec, err)
		}
	}
	return nums, nil
}

// isNoScript tells Redis's answer to EVALSHA of a script it does not have.
func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
