package semaphore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/semrun/semrun/internal/clock"
)

// Every script starts with lib.lua: the keys they share, the clock, and the
// sweep and wake-up every change of a semaphore goes through.
var (
	//go:embed lib.lua
	libLua string
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(libLua + acquireLua)
	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(libLua + renewLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(libLua + releaseLua)
	//go:embed status.lua
	statusLua    string
	statusScript = redis.NewScript(libLua + statusLua)
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// URL is redis://[user:pass@]host:port/db, rediss:// or unix:///path.
	URL string
	// Prefix namespaces every key semrun writes.
	Prefix string
	// ConnectTimeout bounds how long an unreachable store is retried;
	// DefaultConnectTimeout when not positive.
	ConnectTimeout time.Duration
	// Warnf, when set, receives warnings (callers asking different capacities).
	Warnf func(format string, args ...any)
	// TLS configures TLS for a rediss:// URL; set for another scheme, it
	// is refused.
	TLS *TLSOptions
	// Password is used when the URL carries none (from a file or the
	// environment, so that it is not on the command line).
	Password string
	// Cluster treats the URL as a seed node of a Redis Cluster (more seeds
	// with ?addr=host:port&addr=...), as redis-cli -c does.
	Cluster bool
	// SentinelMaster, when set, treats the URL as a Sentinel (more with
	// ?addr=), whose userinfo is the sentinels' own; the master of that
	// name holds the permits, with Password for it.
	SentinelMaster string
}

// Redis is a Store whose permits live in Redis, one sorted set per key,
// touched only by the atomic scripts embedded in this package.
type Redis struct {
	client         redis.Scripter
	closer         func() error
	prefix         string
	addr           string // redacted, for messages
	connectTimeout time.Duration
	warnf          func(format string, args ...any)
}

// DefaultConnectTimeout is how long an unreachable store is retried unless
// RedisOptions say otherwise.
const DefaultConnectTimeout = 10 * time.Second

var silenceLibrary sync.Once

// NewRedis returns a store for o.URL: one server, a Redis Cluster or the
// master that sentinels name, all through go-redis's universal client. It
// does not connect yet, so a command that fails validation later has held
// nothing and waited for nothing.
func NewRedis(o RedisOptions) (*Redis, error) {
	opt, addr, err := o.universal()
	if err != nil {
		return nil, err
	}
	if err := o.settle(addr, opt); err != nil {
		return nil, err
	}
	if o.SentinelMaster != "" {
		addr += " (sentinel master " + o.SentinelMaster + ")"
	}
	c := redis.NewUniversalClient(opt)
	// In a cluster, every key of a semaphore, its wake lists included,
	// shares one hash tag, so each script runs on the one node that serves
	// its slot; go-redis follows MOVED and ASK.
	return NewRedisWithClient(c, c.Close, addr, o), nil
}

// universal reads o.URL into the universal client's options, and returns
// the URL to show. go-redis's parser reads the first node's URL; with
// Cluster or SentinelMaster, more nodes come from ?addr=, as in go-redis's
// cluster URLs. No other query option is taken: semrun's own flags set
// what they would (timeouts, retries, TLS), and one that did nothing would
// mislead.
func (o RedisOptions) universal() (*redis.UniversalOptions, string, error) {
	several := o.Cluster || o.SentinelMaster != ""
	// The whole URL first: cut at its first ?, a password with an
	// unescaped ? would be read partly as the query, and quoted.
	shown, err := checkRedisURL(o.URL)
	if err != nil {
		return nil, "", err
	}
	base, query, _ := strings.Cut(o.URL, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		// The error would quote the query, which may hold a password.
		return nil, "", fmt.Errorf("%s: malformed URL query", shown)
	}
	more := q["addr"]
	q.Del("addr")
	for _, a := range more {
		// As go-redis's cluster and sentinel URLs took them.
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			if at := strings.LastIndex(a, "@"); at >= 0 {
				a = "xxxxx" + a[at:] // never a password
			}
			return nil, "", fmt.Errorf("%s: addr=%s: want host:port", shown, a)
		}
	}
	first := base
	if len(q) > 0 {
		first += "?" + q.Encode()
	}
	opt, shown, err := ParseRedisURL(first)
	if err != nil {
		return nil, "", err
	}
	for name := range q {
		if name == "skip_verify" {
			return nil, "", fmt.Errorf("%s: skip_verify in the URL: use --tls-insecure, which warns", shown)
		}
		if name != "db" || opt.Network != "unix" {
			return nil, "", fmt.Errorf("%s: unknown URL option %q (semrun takes addr= with a cluster or sentinels, db= with unix://)", shown, name)
		}
	}
	switch {
	case o.Cluster && o.SentinelMaster != "":
		// go-redis would make a client that routes by slot among a
		// master's replicas: not a cluster, and not one master either.
		return nil, "", fmt.Errorf("%s: a cluster or a master behind sentinels, not both", shown)
	case len(more) > 0 && !several:
		return nil, "", fmt.Errorf("%s: ?addr= names more nodes of a cluster or more sentinels: add --cluster or --sentinel-master", shown)
	case several && opt.Network == "unix":
		return nil, "", fmt.Errorf("%s: a cluster or sentinels are reached by redis:// or rediss://", shown)
	case o.Cluster && opt.DB != 0:
		return nil, "", fmt.Errorf("%s: a cluster has only database 0", shown)
	}
	u := &redis.UniversalOptions{
		Addrs:    append([]string{opt.Addr}, more...),
		DB:       opt.DB,
		Username: opt.Username, Password: opt.Password,
		TLSConfig:     opt.TLSConfig,
		DialTimeout:   opt.DialTimeout,
		MasterName:    o.SentinelMaster,
		IsClusterMode: o.Cluster,
	}
	if o.SentinelMaster != "" {
		// The URL's user and password are the sentinels' own; the
		// master's password comes from o.Password.
		u.SentinelUsername, u.SentinelPassword = u.Username, u.Password
		u.Username, u.Password = "", ""
	}
	if opt.Network == "unix" {
		// The universal options carry no network, so the socket is dialled here.
		path := opt.Addr
		u.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: u.DialTimeout}
			return d.DialContext(ctx, "unix", path)
		}
	}
	return u, shown, nil
}

// settle applies o's TLS settings and password, and semrun's connection
// settings, to the client's options.
func (o RedisOptions) settle(addr string, opt *redis.UniversalOptions) error {
	if o.TLS.set() {
		if opt.TLSConfig == nil {
			return fmt.Errorf("%s: TLS settings need a rediss:// URL", addr)
		}
		if err := o.TLS.apply(opt.TLSConfig); err != nil {
			return err
		}
	}
	if opt.Password == "" {
		opt.Password = o.Password
	}
	// go-redis logs dial failures to stderr on its own; semrun decides what is printed.
	silenceLibrary.Do(func() { redis.SetLogger(&logging.VoidLogger{}) })
	// RESP2, and no CLIENT SETINFO: one round trip less per connection
	// (go-redis still sends HELLO 2 on each).
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.ContextTimeoutEnabled = true
	// Every call has a deadline of its own, which bounds its reads; a fixed
	// read timeout would cut a waiter's BLPOP short.
	opt.ReadTimeout = -1
	// A waiter's BLPOP holds a connection while it blocks: every waiting
	// Acquire in the process needs one of its own, besides the renewals,
	// releases and status calls. Connections are only made when needed.
	opt.PoolSize = 1024
	// Retries are decided here, against the connect timeout, not inside go-redis.
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	if opt.DialTimeout == 0 {
		opt.DialTimeout = 5 * time.Second // go-redis's default
	}
	if o.ConnectTimeout > 0 && o.ConnectTimeout < opt.DialTimeout {
		opt.DialTimeout = o.ConnectTimeout
	}
	return nil
}

// NewRedisWithClient returns a store over an existing client; addr names it
// in messages and must hold no secret. Tests use it to inject failures.
func NewRedisWithClient(c redis.Scripter, closer func() error, addr string, o RedisOptions) *Redis {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	warnf := o.Warnf
	if warnf == nil {
		warnf = func(string, ...any) {}
	}
	if closer == nil {
		closer = func() error { return nil }
	}
	return &Redis{client: c, closer: closer, prefix: o.Prefix, addr: addr, connectTimeout: o.ConnectTimeout, warnf: warnf}
}

// ParseRedisURL checks raw and returns the client options with the URL to
// show in messages, its password redacted. Errors never quote raw, which
// may hold a password.
func ParseRedisURL(raw string) (*redis.Options, string, error) {
	shown, err := checkRedisURL(raw)
	if err != nil {
		return nil, shown, err
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return nil, shown, fmt.Errorf("%s: %s", shown, strings.TrimPrefix(err.Error(), "redis: "))
	}
	return opt, shown, nil
}

// checkRedisURL checks raw's form, but not its query, and returns the URL
// to show in messages (empty when even that could show a password).
func checkRedisURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the whole URL
		}
		if !strings.Contains(raw, "@") {
			return "", fmt.Errorf("malformed URL: %w", err)
		}
		if strings.Contains(err.Error(), `"`) {
			// The error quotes part of the URL: with a password that has an
			// unescaped / # or ?, that part is the password's.
			return "", unescapedPassword(raw)
		}
		return "", fmt.Errorf("%s: malformed URL: %w", hideUserinfo(raw), err)
	}
	shown := redactURL(u)
	if u.Opaque != "" {
		// "user:pass@host:6379" parses as scheme "user" with an opaque rest.
		return shown, fmt.Errorf("%s: not a URL of the form redis://host:port/db", shown)
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 && (u.User == nil || !strings.HasPrefix(raw[at+1:], u.Host)) {
		// The text before the last @ was not all read as user:password, so
		// part of the password went into the host, path or query.
		return "", unescapedPassword(raw)
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return shown, fmt.Errorf("%s: no host", shown)
		}
	case "unix":
		if u.Path == "" {
			return shown, fmt.Errorf("%s: no socket path", shown)
		}
	case "":
		return shown, fmt.Errorf("%s: no scheme (want redis://, rediss:// or unix://)", shown)
	default:
		return shown, fmt.Errorf("%s: unknown scheme %q (want redis, rediss or unix)", shown, u.Scheme)
	}
	return shown, nil
}

// unescapedPassword is the error for a URL whose password was not all read
// as one, most likely for an unescaped / # or ? in it.
func unescapedPassword(raw string) error {
	return fmt.Errorf("%s: malformed URL (escape / # ? in a password as %%2F %%23 %%3F)", hideUserinfo(raw))
}

// hideUserinfo replaces everything between the scheme and the last @ of a
// URL that did not parse, so that no part of a password is shown.
func hideUserinfo(raw string) string {
	at := strings.LastIndex(raw, "@")
	scheme, _, found := strings.Cut(raw, "://")
	if !found || len(scheme) > at {
		return "…" + raw[at:]
	}
	return scheme + "://xxxxx" + raw[at:]
}

// redactURL shows u without its password, its query (options may hold
// secrets) or, for an opaque URL, anything after the scheme.
func redactURL(u *url.URL) string {
	if u.Opaque != "" {
		return u.Scheme + ":…"
	}
	shown := *u
	shown.RawQuery, shown.ForceQuery = "", false
	return shown.Redacted()
}

// Addr is the store's address with any password redacted.
func (r *Redis) Addr() string { return r.addr }

// Close closes the store's connections.
func (r *Redis) Close() error { return r.closer() }

var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// keys names a semaphore's keys. They share one hash tag, so one Cluster
// slot; braces in the prefix and the key are escaped so that neither can
// break the tag.
func (r *Redis) keys(key string) []string {
	base := r.base(key)
	return []string{base + "holders", base + "info", base + "token", base + "queue", base + "waiters"}
}

// channel is the prefix of the key's wake lists: each waiter blocks on its
// own, wakeKey, where the scripts push its turn.
func (r *Redis) channel(key string) string { return r.base(key) + "wake" }

// wakeKey is the waiter id's wake list: named after a hash of the id, so
// that the list tells nobody a permit id. It shares the key's hash tag.
func wakeKey(channel, id string) string {
	sum := sha1.Sum([]byte(id))
	return channel + ":" + hex.EncodeToString(sum[:8])
}

func (r *Redis) base(key string) string {
	return keyEscaper.Replace(r.prefix) + "{" + keyEscaper.Replace(key) + "}:"
}

// globEscaper escapes what SCAN's MATCH pattern would read as a wildcard.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// keyUnescaper undoes keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// scanner is what a client needs to list keys.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// names lists the semaphores under the prefix, sorted, with SCAN: KEYS
// would block Redis for as long as it takes to walk every key. In a
// cluster, every master is scanned.
func (r *Redis) names(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.connectTimeout)
	defer cancel()
	prefix := keyEscaper.Replace(r.prefix) + "{"
	pattern := globEscaper.Replace(prefix) + "*}:*"
	var mu sync.Mutex
	found := map[string]bool{}
	scan := func(ctx context.Context, c scanner) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			name, _, ok := strings.Cut(strings.TrimPrefix(iter.Val(), prefix), "}")
			if ok {
				mu.Lock()
				found[keyUnescaper.Replace(name)] = true
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	case scanner:
		err = scan(ctx, c)
	default:
		err = errors.New("this client cannot list keys: name them")
	}
	if err != nil {
		return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", r.prefix, r.addr, err)
	}
	names := slices.Sorted(maps.Keys(found))
	return names, nil
}

// blocker is what a client needs for pushed wake-ups (BLPOP); a client
// without it (a test's wrapper) makes waiters look again on a timer instead.
type blocker interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// WaiterLease is how long a waiter keeps its place in line without telling
// the store it is still there: a waiter that vanished (killed, host gone)
// leaves the line after at most this, or the lease of the permit it asks
// for if that is shorter.
const WaiterLease = 10 * time.Second

func waiterLease(req Request) time.Duration {
	if req.NoWait {
		return 0
	}
	return min(req.TTL, WaiterLease)
}

// newPermitID returns 130 bits from crypto/rand: a client that does not
// hold a permit cannot guess its id to renew or release it.
func newPermitID() string { return rand.Text() }

// Acquire implements Store. A caller that cannot have its turn now takes
// a place in line, and blocks until a script pushes its turn to its list
// (a release, a lapsed lease or a vanished waiter gave it its turn), the
// earliest lease can lapse, or its place needs
// renewing: that renewal is also the safety net for a lost message.
func (r *Redis) Acquire(ctx context.Context, req Request) (Lease, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	id := newPermitID()
	keys, channel := r.keys(req.Key), r.channel(req.Key)
	meta, err := json.Marshal(req.Holder)
	if err != nil {
		return nil, fmt.Errorf("encode holder info: %w", err)
	}
	wlease := waiterLease(req)
	w := wakeups{client: r.client, key: wakeKey(channel, id), poll: backoff{next: 10 * time.Millisecond, max: 500 * time.Millisecond}}
	told := false
	var last WaitState
	// inLine is the last ask that left the caller in line: when it sent it,
	// and the server's clock as the script ran, after that. A permit handed
	// over later lapses at a server time, which this turns into a local
	// deadline that is never later than the store's.
	var inLine struct {
		sent clock.Instant
		now  int64
	}
	for {
		sent := clock.Now()
		res, err := r.callRetrying(ctx, acquireScript, keys, id, req.Permits, req.TTL.Milliseconds(), meta,
			req.weight(), wlease.Milliseconds(), channel, max(req.RestartFence, 0).Milliseconds())
		if err != nil {
			if ctx.Err() != nil {
				// The script may have run before ctx ended: give back what
				// may have been granted, or the place in line, now.
				r.abandon(ctx, keys, channel, id)
			}
			return nil, fmt.Errorf("acquire key %q: %w", req.Key, err)
		}
		g, err := parseGrant(res)
		if err != nil {
			r.abandon(ctx, keys, channel, id)
			return nil, fmt.Errorf("acquire key %q: %w", req.Key, err)
		}
		if g.previous != int64(req.Permits) && !told {
			r.warnf("key %q: this call asks for %d permits, the previous caller asked for %d", req.Key, req.Permits, g.previous)
		}
		told = true
		switch moved := time.Duration(g.moved) * time.Millisecond; {
		case moved > 0:
			r.warnf("key %q: no call reached Redis for longer than its holders renew: Redis's clock stepped forward, or every holder stopped renewing; their leases were pushed back %v", req.Key, moved)
		case moved < 0:
			r.warnf("key %q: Redis's clock went back %v", req.Key, -moved)
		}
		if g.granted {
			return r.replicated(ctx, req, r.lease(req, keys, channel, id, g.token, sent.Add(serverSpan(g.left))))
		}
		fenced := time.Duration(g.fenced) * time.Millisecond
		if req.NoWait {
			if fenced > 0 {
				return nil, fmt.Errorf("key %q: %w", req.Key, &FenceError{Left: fenced})
			}
			return nil, fmt.Errorf("key %q: %d of %d permits held: %w", req.Key, g.held, req.Permits, ErrBusy)
		}
		inLine.sent, inLine.now = sent, g.now
		// The fence is shown to the second, so that the line is not redrawn for less.
		if st := (WaitState{Held: int(g.held), Capacity: req.Permits, Position: int(g.position), Waiting: int(g.waiting), Fenced: fenced.Round(time.Second)}); st != last && req.OnWait != nil {
			req.OnWait(st)
			last = st
		}
		// Jittered, so that waiters that came together do not renew together.
		delay := wlease/3*9/10 + mrand.N(wlease/15+1)
		// Healthy holders renew long before their lease could lapse, and
		// a waiter asks again before that; only a crashed holder's lapse
		// comes first, and then every waiter looks at once.
		if g.lapseIn > 0 {
			delay = min(delay, time.Duration(g.lapseIn)*time.Millisecond+time.Millisecond)
		}
		turn, err := w.wait(ctx, delay)
		if err != nil {
			r.abandon(ctx, keys, channel, id)
			return nil, fmt.Errorf("wait for key %q: %w", req.Key, err)
		}
		if !turn.handed {
			continue
		}
		l := r.lease(req, keys, channel, id, turn.token, inLine.sent.Add(serverSpan(turn.expiry-inLine.now)))
		// A waiter that read its turn late (it was stopped) renews first,
		// so that its command does not start with its lease about to lapse.
		if clock.Until(l.deadline) < req.TTL/2 {
			call, cancel := context.WithTimeout(ctx, r.connectTimeout)
			err := l.Renew(call)
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				r.abandon(ctx, keys, channel, id)
				return nil, fmt.Errorf("wait for key %q: %w", req.Key, context.Cause(ctx))
			case err != nil:
				// Lapsed unused (ErrLost: ask again, at the back of the
				// line), or in doubt: asking again tells which.
				continue
			}
		}
		return r.replicated(ctx, req, l)
	}
}

// replicated returns l once req.MinReplicas replicas have its grant,
// renewing it on one connection with a WAIT until they do, for at most the
// connect timeout; it gives the permit back if they never do.
func (r *Redis) replicated(ctx context.Context, req Request, l *redisLease) (Lease, error) {
	if req.MinReplicas <= 0 {
		return l, nil
	}
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	giveUp := time.Now().Add(r.connectTimeout)
	for {
		// Each try gets the WAIT's own bound, and the connect timeout for the rest.
		call, cancel := context.WithTimeout(ctx, replicaWait(l.ttl)+r.connectTimeout)
		err := l.Renew(call)
		cancel()
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrLost) || ctx.Err() != nil || time.Until(giveUp) <= 0 || sleep(ctx, min(wait.step(), time.Until(giveUp))) != nil {
			r.abandon(ctx, l.keys, l.channel, l.id)
			switch {
			case ctx.Err() != nil:
				return nil, fmt.Errorf("acquire key %q: %w", req.Key, context.Cause(ctx))
			case errors.Is(err, ErrLost):
				return nil, fmt.Errorf("acquire key %q: lapsed before %d replicas had it: %w", req.Key, req.MinReplicas, err)
			}
			return nil, fmt.Errorf("acquire key %q: %w: %w", req.Key, ErrUnreachable, err)
		}
	}
}

// serverSpan is a span of ms between two readings of the server's clock,
// as a local duration never longer than the true one: each reading is
// rounded down to the millisecond, which can add up to 1ms to the span.
func serverSpan(ms int64) time.Duration { return time.Duration(ms-1) * time.Millisecond }

func (r *Redis) lease(req Request, keys []string, channel, id string, token int64, deadline clock.Instant) *redisLease {
	return &redisLease{r: r, minReplicas: req.MinReplicas, key: req.Key, keys: keys, channel: channel, id: id, ttl: req.TTL, token: token, deadline: deadline}
}

// wakeups are a waiter's wake list. The scripts push its turn there, and
// it stays until read: a wake-up that comes while the waiter asks is not lost.
type wakeups struct {
	client redis.Scripter
	key    string
	poll   backoff // for a client that cannot block
}

// turn is what a waiter read from its wake list.
type turn struct {
	// handed is true when a script gave the waiter its permit: token is
	// its fencing token and expiry the server time its lease lapses at.
	// Otherwise the waiter asks again.
	handed        bool
	token, expiry int64
}

// parseTurn reads an element of a wake list: "g <token> <expiry ms>" for a
// permit handed over, anything else to ask again.
func parseTurn(elem string) turn {
	var t turn
	if n, err := fmt.Sscanf(elem, "g %d %d", &t.token, &t.expiry); err == nil && n == 2 {
		t.handed = true
	}
	return t
}

// wait returns when the waiter's turn was pushed, or after d, or with ctx's
// cause: at once, even while BLPOP still blocks.
func (w *wakeups) wait(ctx context.Context, d time.Duration) (turn, error) {
	b, ok := w.client.(blocker)
	if !ok {
		return turn{}, sleep(ctx, min(d, w.poll.step()))
	}
	type popped struct {
		elem string
		err  error
	}
	// The call's own deadline is a second past BLPOP's timeout.
	call, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+time.Second)
	done := make(chan popped, 1)
	go func() {
		defer cancel()
		kv, err := b.Do(call, "BLPOP", w.key, strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)).StringSlice()
		if errors.Is(err, redis.Nil) {
			err = nil // timed out: time to renew the place in line
		}
		var p popped
		if err == nil && len(kv) == 2 {
			p.elem = kv[1]
		}
		p.err = err
		done <- p
	}()
	select {
	case <-ctx.Done():
		return turn{}, context.Cause(ctx)
	case p := <-done:
		if p.err != nil {
			// Waiting goes on: the next ask retries the store, or fails.
			return turn{}, sleep(ctx, min(d, w.poll.step()))
		}
		return parseTurn(p.elem), nil
	}
}

type grant struct {
	granted  bool
	token    int64
	held     int64
	previous int64
	lapseIn  int64
	position int64
	waiting  int64
	now      int64 // the server's clock, ms
	left     int64 // ms left of the lease granted
	fenced   int64 // ms left of the restart fence
	moved    int64 // ms the holders were pushed back; negative: the clock went back
}

func parseGrant(res any) (grant, error) {
	v, ok := res.([]any)
	if !ok || len(v) != 11 {
		return grant{}, fmt.Errorf("unexpected reply %v from acquire script", res)
	}
	var n [11]int64
	for i := range v {
		if n[i], ok = v[i].(int64); !ok {
			return grant{}, fmt.Errorf("unexpected reply %v from acquire script", res)
		}
	}
	return grant{granted: n[0] == 1, token: n[1], held: n[2], previous: n[3], lapseIn: n[4], position: n[5], waiting: n[6], now: n[7], left: n[8], fenced: n[9], moved: n[10]}, nil
}

// abandon releases id after ctx ended, under a short deadline of its own.
func (r *Redis) abandon(ctx context.Context, keys []string, channel, id string) {
	// Short: a caller who gave up on waiting, or was signalled, wants out now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 250*time.Millisecond)
	defer cancel()
	_ = releaseScript.Run(ctx, r.client, keys, id, channel).Err()
}

// callRetrying runs a script, retrying failures that may heal (connection
// refused, timeouts, a loading server) for at most the connect timeout.
func (r *Redis) callRetrying(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	giveUp := time.Now().Add(r.connectTimeout)
	var failing error
	stopped := func() error {
		cause := context.Cause(ctx)
		if failing != nil && errors.Is(cause, context.DeadlineExceeded) {
			// The caller's deadline ran out while the store was failing:
			// that is the store's fault, not a busy semaphore.
			return fmt.Errorf("%w: %s: %w", ErrUnreachable, r.addr, failing)
		}
		return cause
	}
	for {
		attempt, cancel := context.WithDeadline(ctx, giveUp)
		res, err := s.Run(attempt, r.client, keys, args...).Result()
		cancel()
		switch {
		case err == nil:
			return res, nil
		case ctx.Err() != nil:
			return nil, stopped()
		case !retryable(err):
			if unauthenticated(err) {
				// Redis refuses a command of many arguments from a client
				// that has not authenticated with a protocol error that
				// does not say why.
				return nil, fmt.Errorf("%s: Redis wants a password (the URL's, --redis-password-file, SEMRUN_REDIS_PASSWORD or REDISCLI_AUTH): %w", r.addr, err)
			}
			if strings.Contains(err.Error(), "can't run this command") {
				// Inside a script, Redis 7 does not name the command it
				// refused: doctor's probes do.
				return nil, fmt.Errorf("%s: %s (Redis said: %w)", r.addr, r.refused(ctx), err)
			}
			return nil, fmt.Errorf("%s: %w%s", r.addr, err, trustHint(err))
		}
		if failing == nil || !errors.Is(err, context.DeadlineExceeded) {
			failing = err // the attempt cut short at giveUp says less than the one before
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, r.addr, failing)
		}
		if sleep(ctx, min(wait.step(), left)) != nil {
			return nil, stopped()
		}
	}
}

// unauthenticated tells a refusal for want of a password.
func unauthenticated(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOAUTH") || strings.Contains(msg, "unauthenticated")
}

// retryable tells failures that may heal from those that will not (bad
// password, missing permission, a script error).
func retryable(err error) bool {
	if untrusted(err) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // the network: refused, reset, timed out
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
		if strings.HasPrefix(rerr.Error(), p) {
			return true
		}
	}
	// While a semaphore's slot migrates, a script that touches one of its
	// keys the node no longer has (a wake list: every key of a semaphore
	// shares its slot) fails, for as long as the migration lasts. The
	// scripts are safe to run again.
	return strings.Contains(rerr.Error(), "Script attempted to access a non local key in a cluster node")
}

// Status implements Store. Without keys, it lists every key under the
// prefix (see names).
func (r *Redis) Status(ctx context.Context, keys []string) ([]KeyStatus, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = r.names(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]KeyStatus, 0, len(keys))
	for _, key := range keys {
		res, err := r.callRetrying(ctx, statusScript, r.keys(key))
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		st, err := parseStatus(key, res)
		if err != nil {
			return nil, fmt.Errorf("status of key %q: %w", key, err)
		}
		out = append(out, st)
	}
	return out, nil
}

func parseStatus(key string, res any) (KeyStatus, error) {
	v, ok := res.([]any)
	if !ok || len(v) < 3 {
		return KeyStatus{}, fmt.Errorf("unexpected reply %v from status script", res)
	}
	now, _ := v[0].(int64)
	capacity, _ := v[1].(int64)
	holders, _ := v[2].(int64)
	if holders < 0 || int(3+2*holders) > len(v) {
		return KeyStatus{}, fmt.Errorf("unexpected reply %v from status script", res)
	}
	st := KeyStatus{Key: key, Capacity: int(max(capacity, 0)), Holders: []Holder{}, Waiters: []Waiter{}}
	rest := v[3:]
	for i := 0; i < int(holders); i++ {
		expiry, _ := rest[2*i].(int64)
		info, _ := rest[2*i+1].(string)
		h, err := parseHolder(info, now)
		if err != nil {
			return KeyStatus{}, err
		}
		h.ExpiresIn = time.Duration(expiry-now) * time.Millisecond
		st.Holders = append(st.Holders, h)
		st.Held += h.Weight
	}
	for i, rec := range rest[2*holders:] {
		w, err := parseWaiter(fmt.Sprint(rec), now)
		if err != nil {
			return KeyStatus{}, err
		}
		w.Position = i + 1
		st.Waiters = append(st.Waiters, w)
	}
	return st, nil
}

// parseRecord reads count integers, then the holder JSON, from a record.
func parseRecord(rec string, count int, info *HolderInfo) ([]int64, error) {
	f := strings.SplitN(rec, " ", count+1)
	if len(f) != count+1 {
		return nil, fmt.Errorf("malformed record %q", rec)
	}
	nums := make([]int64, count)
	for i := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed record %q: %w", rec, err)
		}
		nums[i] = n
	}
	if f[count] != "" {
		if err := json.Unmarshal([]byte(f[count]), info); err != nil {
			return nil, fmt.Errorf("malformed record %q: %w", rec, err)
		}
	}
	return nums, nil
}

// numbers tells how many numbers lead rec, a record whose current form
// has count of them: count, or one less for the record of an older semrun,
// which lacks the last (its meta, JSON, or nothing, comes there instead).
func numbers(rec string, count int) int {
	if f := strings.SplitN(rec, " ", count+1); len(f) == count || len(f) == count+1 && strings.HasPrefix(f[count-1], "{") {
		return count - 1
	}
	return count
}

// parseHolder reads "<permits> <token> <granted ms> <weight> <meta>" (see
// lib.lua), or the record of a semrun from before weights, without one.
func parseHolder(info string, now int64) (Holder, error) {
	var h Holder
	fields := numbers(info, 4)
	n, err := parseRecord(info, fields, &h.HolderInfo)
	if err != nil {
		return Holder{}, err
	}
	h.Permits, h.Token, h.Age, h.Weight = int(n[0]), n[1], time.Duration(now-n[2])*time.Millisecond, 1
	if fields == 4 {
		h.Weight = int(n[3])
	}
	return h, nil
}

// parseWaiter reads "<lease expiry ms> <permits> <weight> <since ms> <ttl ms> <meta>"
// (see lib.lua), or the record of a semrun from before permits were handed
// over, without ttl.
func parseWaiter(rec string, now int64) (Waiter, error) {
	var w Waiter
	n, err := parseRecord(rec, numbers(rec, 5), &w.HolderInfo)
	if err != nil {
		return Waiter{}, err
	}
	w.Permits, w.Weight, w.Waited = int(n[1]), int(n[2]), time.Duration(now-n[3])*time.Millisecond
	return w, nil
}

type redisLease struct {
	r           *Redis
	minReplicas int
	key         string
	keys        []string
	channel     string
	id          string
	ttl         time.Duration
	token       int64

	mu       sync.Mutex
	deadline clock.Instant
}

func (l *redisLease) Token() int64 { return l.token }

func (l *redisLease) Deadline() clock.Instant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *redisLease) Renew(ctx context.Context) error {
	sent := clock.Now()
	var res int64
	var err error
	if l.minReplicas > 0 {
		res, err = l.renewReplicated(ctx)
	} else {
		res, err = renewScript.Run(ctx, l.r.client, l.keys, l.id, l.ttl.Milliseconds()).Int64()
	}
	if err != nil {
		return fmt.Errorf("renew key %q on %s: %w", l.key, l.r.addr, err)
	}
	if res != 1 {
		return fmt.Errorf("renew key %q: %w", l.key, ErrLost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The script's expiry is its clock's reading, rounded down, plus ttl.
	if d := sent.Add(l.ttl - time.Millisecond); d.After(l.deadline) {
		l.deadline = d
	}
	return nil
}

// pipeliner sends commands on one connection, as WAIT needs: it waits
// for the replicas to have the writes of its own connection.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// renewLuaSource is sent whole in a pipeline, where a NOSCRIPT reply to
// EVALSHA could not be answered with a load in time.
var renewLuaSource = libLua + renewLua

// renewReplicated renews the lease and waits, on the same connection, for
// minReplicas replicas to have the renewal, and so every write before it,
// the grant included. A renewal they do not all have in time does not
// count: a failover could lose it.
func (l *redisLease) renewReplicated(ctx context.Context) (int64, error) {
	p, err := l.r.replicaWaiter(ctx, l.keys[0])
	if err != nil {
		return 0, err
	}
	var renew, wait *redis.Cmd
	timeout := replicaWait(l.ttl)
	if d, ok := ctx.Deadline(); ok {
		// WAIT must answer before the call's deadline cuts the connection.
		timeout = max(min(timeout, time.Until(d)/2), time.Millisecond)
	}
	if _, err := p.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		renew = pipe.Eval(ctx, renewLuaSource, l.keys, l.id, l.ttl.Milliseconds())
		wait = pipe.Do(ctx, "WAIT", l.minReplicas, timeout.Milliseconds())
		return nil
	}); err != nil {
		if c, ok := l.r.client.(*redis.ClusterClient); ok && (redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")) {
			// The slot moved: the next try asks the node that serves it now.
			c.ReloadState(ctx)
		}
		return 0, err
	}
	res, err := renew.Int64()
	if err != nil || res != 1 {
		return res, err
	}
	acked, err := wait.Int64()
	if err != nil {
		return 0, err
	}
	if acked < int64(l.minReplicas) {
		return 0, fmt.Errorf("%d of %d replicas had it within %v (--min-replicas)", acked, l.minReplicas, timeout)
	}
	return 1, nil
}

// replicaWaiter is where a renewal and its WAIT go together: the client
// itself, or in a cluster the master that serves key's slot, since WAIT
// names no key a cluster client could route by.
func (r *Redis) replicaWaiter(ctx context.Context, key string) (pipeliner, error) {
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("find the node that serves key %q: %w", key, err)
		}
		return node, nil
	case pipeliner:
		return c, nil
	}
	return nil, errors.New("this client cannot wait for replicas")
}

// replicaWait bounds a WAIT for replicas: a tenth of the lease, from 100ms
// to 1s.
func replicaWait(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

// Files is nil: the permit lives in Redis.
func (l *redisLease) Files() []*os.File { return nil }

func (l *redisLease) Release(ctx context.Context) error {
	// Retried within ctx, as a release is safe to repeat: a failover or a
	// dropped connection need not leave the seat held for a whole TTL.
	if _, err := l.r.callRetrying(ctx, releaseScript, l.keys, l.id, l.channel); err != nil {
		return fmt.Errorf("release key %q: %w", l.key, err)
	}
	return nil
}

// backoff doubles a delay up to max, each step jittered by ±25% so that
// waiters started together do not retry together.
type backoff struct{ next, max time.Duration }

func (b *backoff) step() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	return d*3/4 + mrand.N(d/2+1)
}

// sleep waits for d or until ctx is done, returning ctx's cause then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
