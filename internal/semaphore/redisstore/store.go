// Package redisstore keeps semaphores in Redis: one server, the master
// that sentinels name, or a Redis Cluster. A semaphore is a few keys that
// share one hash tag, touched only by the Lua scripts of package protocol,
// which also owns their keys, arguments, replies and records; waiters
// block on wake lists of their own (wait.go); a permit is a lease on the
// server's clock (lease.go). What happens to each key is logged and
// counted by the scripts, and read back by Events and Status (events.go).
package redisstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/semrun/semrun/internal/semaphore"
)

// The settings of a Redis store, as messages name them (see semaphore.Names).
const (
	URLSetting            semaphore.Setting = "Redis URL"
	PrefixSetting         semaphore.Setting = "key prefix"
	PasswordSetting       semaphore.Setting = "Redis password"
	ClusterSetting        semaphore.Setting = "cluster"
	SentinelMasterSetting semaphore.Setting = "sentinel master"
	TLSCASetting          semaphore.Setting = "TLS CA file"
	TLSCertSetting        semaphore.Setting = "TLS certificate"
	TLSKeySetting         semaphore.Setting = "TLS key"
	TLSServerNameSetting  semaphore.Setting = "TLS server name"
	TLSInsecureSetting    semaphore.Setting = "TLS insecure"
	// ConnectTimeoutSetting is named in the message of a store that
	// stayed unreachable for it.
	ConnectTimeoutSetting semaphore.Setting = "connect timeout"
)

// Options configure a Redis store.
type Options struct {
	// URL is redis://[user:pass@]host:port/db, rediss:// or unix:///path.
	URL string
	// Prefix namespaces every key the store writes; it must not be empty.
	Prefix string
	// ConnectTimeout bounds how long an unreachable store is retried;
	// DefaultConnectTimeout when not positive.
	ConnectTimeout time.Duration
	// Warnf, when set, receives warnings (callers asking different capacities).
	Warnf func(format string, args ...any)
	// Infof, when set, receives what is worth saying with --verbose only
	// (records of a key dropped because they were not records).
	Infof func(format string, args ...any)
	// TLS configures TLS for a rediss:// URL; set for another scheme, it
	// is refused.
	TLS TLSOptions
	// Password, when set, gives the password when the URL carries none,
	// or the master's behind sentinels: from a file or the environment,
	// so that it is not on the command line. New calls it only then.
	Password func() (string, error)
	// Cluster treats the URL as a seed node of a Redis Cluster (more seeds
	// with ?addr=host:port&addr=...), as redis-cli -c does.
	Cluster bool
	// SentinelMaster, when set, treats the URL as a Sentinel (more with
	// ?addr=), whose userinfo is the sentinels' own; the master of that
	// name holds the permits, with Password for it.
	SentinelMaster string
	// Names name the settings in messages; semaphore.OwnNames when nil.
	Names semaphore.Names
	// Unnamed: the URL is the caller's default, which no setting named. A
	// connection refused there is not retried: the user has not started
	// a Redis yet, or meant another (NoServerError).
	Unnamed bool
	// RestartFence is the restart fence a run would ask: doctor warns
	// while the server has been up for less. 0: no warning.
	RestartFence time.Duration
	// MinReplicas is the min replicas a run would ask: doctor warns when
	// it is no majority of a master's replicas (see majority), and fails
	// when the master has fewer.
	MinReplicas int
	// Verbose: the caller says what happens (--verbose). The first grant
	// with min replicas then also reads how many replicas the master has,
	// in the same round trip as its WAIT, to warn when min replicas is no
	// majority of them.
	Verbose bool
	// Retrying, when set, hears of the first failure of a call that is
	// retried for the connect timeout, once a call, with the store's
	// address as messages show it (no password).
	Retrying func(addr string, err error)
	// NoEvents: the store logs no events of the keys it serves (a
	// stream a key, capped near semaphore.MaxEvents entries, written by
	// each grant, release...; see Events). It still keeps their counters
	// (KeyStatus.Counts), and Events still reads what others logged.
	NoEvents bool
}

func (o *Options) names() semaphore.Names {
	if o.Names == nil {
		return semaphore.OwnNames{}
	}
	return o.Names
}

// Store is a semaphore.Store whose permits live in Redis.
type Store struct {
	client         Client
	prefix         string
	addr           string // redacted, for messages
	connectTimeout time.Duration
	cluster        bool
	// urlPassword: the URL carries a password, the server's or the sentinels'.
	urlPassword bool
	// askedPassword: New took the password from Options.Password.
	askedPassword bool
	// dial makes a client like client, with connections of its own (nil
	// for a store over a client it was given: NewWithClient).
	dial  func() Client
	warnf func(format string, args ...any)
	infof func(format string, args ...any)
	names semaphore.Names
	// maxLine is the longest line a key takes (MaxLine; tests shorten it).
	maxLine int
	// reached: a call got the server's answer, so the store was reachable.
	reached atomic.Bool
	// waitedOn are the keys (string) whose waiters' asks were answered: a
	// caller that waits on one again (a run whose permit aged before its
	// command could start) rides out an outage as before.
	waitedOn sync.Map
	// unnamed, retrying, restartFence, minReplicas, verbose and
	// noEvents are Options'.
	unnamed      bool
	retrying     func(addr string, err error)
	restartFence time.Duration
	minReplicas  int
	verbose      bool
	noEvents     bool
}

var _ semaphore.Store = (*Store)(nil)

var silenceLibrary sync.Once

// New checks o and returns a store for o.URL: one server, a Redis Cluster
// or the master that sentinels name. It does not connect yet, so a command
// that fails validation later has held nothing and waited for nothing.
// Settings it refuses come as a *semaphore.SettingError.
func New(o Options) (*Store, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	t, err := o.parseTarget()
	if err != nil {
		return nil, err
	}
	if err := o.applyTLS(t.opt.TLSConfig, t.shown); err != nil {
		return nil, err
	}
	asked := o.Password != nil && t.opt.Password == ""
	if asked {
		if t.opt.Password, err = o.Password(); err != nil {
			return nil, err
		}
	}
	o.settle(t.opt)
	addr := t.shown
	if o.SentinelMaster != "" {
		addr += " (sentinel master " + o.SentinelMaster + ")"
	}
	// Every client gets recoverHook: a reply go-redis panics on is an error.
	dial := func() Client {
		if o.Cluster {
			cc := redis.NewClusterClient(t.opt.Cluster())
			cc.AddHook(recoverHook{})
			// Renewals with WAIT and doctor talk to nodes directly.
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(recoverHook{}) })
			return ClusterClient(cc)
		}
		var sc *redis.Client
		if o.SentinelMaster != "" {
			sc = redis.NewFailoverClient(t.opt.Failover())
		} else {
			sc = redis.NewClient(t.opt.Simple())
		}
		sc.AddHook(recoverHook{})
		return ServerClient(sc)
	}
	s := NewWithClient(dial(), addr, o)
	s.dial = dial
	s.urlPassword, s.askedPassword = t.password, asked
	s.unnamed, s.retrying, s.restartFence = o.Unnamed, o.Retrying, o.RestartFence
	return s, nil
}

// DefaultConnectTimeout is how long an unreachable store is retried
// unless Options say otherwise.
const DefaultConnectTimeout = 10 * time.Second

// check refuses settings that are wrong whatever the URL, and fills in
// the defaults.
func (o *Options) check() error {
	if o.Prefix == "" {
		return &semaphore.SettingError{Setting: PrefixSetting, Err: errors.New("must not be empty")}
	}
	if o.MinReplicas < 0 || o.MinReplicas > semaphore.MaxReplicas {
		return &semaphore.SettingError{Setting: semaphore.MinReplicasSetting, Value: o.MinReplicas, Err: fmt.Errorf("must be from 0 to %d", semaphore.MaxReplicas)}
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	return nil
}

// settle applies semrun's connection settings to the client's options.
func (o *Options) settle(opt *redis.UniversalOptions) {
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
	opt.DialTimeout = min(opt.DialTimeout, o.ConnectTimeout)
	if opt.TLSConfig != nil && opt.Dialer == nil {
		opt.Dialer = tlsDialer(opt.TLSConfig, opt.DialTimeout)
	}
	opt.Dialer = guardDialer(opt.Dialer, opt.DialTimeout)
}

// NewWithClient returns a store over c; addr names it in messages and must
// hold no secret. Of o, only Prefix, ConnectTimeout, Warnf, Infof, Cluster,
// Names, MinReplicas, Verbose and NoEvents are used: c is connected as it
// is. Tests use it to wrap a client.
func NewWithClient(c Client, addr string, o Options) *Store {
	warnf, infof := o.Warnf, o.Infof
	if warnf == nil {
		warnf = func(string, ...any) {}
	}
	if infof == nil {
		infof = func(string, ...any) {}
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	return &Store{client: c, prefix: o.Prefix, addr: addr, connectTimeout: o.ConnectTimeout,
		cluster: o.Cluster, warnf: warnf, infof: infof, names: o.names(), maxLine: MaxLine,
		minReplicas: o.MinReplicas, verbose: o.Verbose, noEvents: o.NoEvents}
}

// Addr is the store's address with any password redacted.
func (s *Store) Addr() string { return s.addr }

// String says where the store keeps its permits: its address, with any
// password redacted.
func (s *Store) String() string { return "Redis at " + s.addr }

// PasswordInURL tells whether the URL carries a password (the server's, or
// the sentinels'), which then is wherever the URL is: a command line.
func (s *Store) PasswordInURL() bool { return s.urlPassword }

// PasswordAsked tells whether New took the password from Options.Password:
// the URL carried none where one goes.
func (s *Store) PasswordAsked() bool { return s.askedPassword }

// Close closes the store's connections.
func (s *Store) Close() error { return s.client.Close() }
