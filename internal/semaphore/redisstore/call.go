package redisstore

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// call runs a script, retrying failures that may heal (connection refused,
// timeouts, a loading server) for at most the connect timeout.
func (s *Store) call(ctx context.Context, k protocol.Keys, args protocol.Args) (any, error) {
	return s.retry(ctx, func(ctx context.Context) (any, error) { return protocol.Run(ctx, s.client, k, args) })
}

// retry runs run as call does a script.
func (s *Store) retry(ctx context.Context, run func(context.Context) (any, error)) (any, error) {
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	giveUp := time.Now().Add(s.connectTimeout)
	var failing error
	stopped := func() error {
		cause := context.Cause(ctx)
		if failing != nil && errors.Is(cause, context.DeadlineExceeded) && !s.reached.Load() {
			// The caller's deadline ran out before the store ever
			// answered: that is the store's fault, not a busy semaphore.
			// Once it did, a deadline that ends a call in flight is the
			// caller's: busy.
			return fmt.Errorf("%s %w: %w", s.addr, semaphore.ErrUnreachable, failing)
		}
		return cause
	}
	for {
		attempt, cancel := context.WithDeadline(ctx, giveUp)
		res, err := run(attempt)
		cancel()
		switch {
		case err == nil:
			s.reached.Store(true)
			return res, nil
		case ctx.Err() != nil:
			return nil, stopped()
		case !retryable(err):
			return nil, s.explain(ctx, err)
		}
		if noServer := s.noServer(err); noServer != nil {
			return nil, noServer
		}
		if noSuchHost(err) && !s.reached.Load() {
			// A name no resolver knows (a typo in the URL) will not heal
			// within the connect timeout; once the store was reached, an
			// answer like it is an outage, ridden out.
			return nil, s.explain(ctx, err)
		}
		if failing == nil && s.retrying != nil {
			s.retrying(s.addr, err)
		}
		if failing == nil || !errors.Is(err, context.DeadlineExceeded) {
			failing = err // the attempt cut short at giveUp says less than the one before
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, fmt.Errorf("%s %w for %v (%s): %w", s.addr, semaphore.ErrUnreachable, s.connectTimeout, s.names.Name(ConnectTimeoutSetting), failing)
		}
		if clock.Sleep(ctx, min(wait.step(), left)) != nil {
			return nil, stopped()
		}
	}
}

// NoServerError means nothing listens at the address semrun uses when
// none is named: the connection was refused, and is not retried. It is
// semaphore.ErrUnreachable.
type NoServerError struct {
	// Addr is where semrun looked: host and port.
	Addr string
	Err  error
}

func (e *NoServerError) Error() string {
	return fmt.Sprintf("no Redis listens at the default address %s: %v", e.Addr, e.Err)
}

func (e *NoServerError) Unwrap() []error { return []error{semaphore.ErrUnreachable, e.Err} }

// noServer is a *NoServerError for a connection refused at the default
// address, before the store ever answered; nil for anything else.
func (s *Store) noServer(err error) error {
	if !s.unnamed || s.reached.Load() || !errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	addr := s.addr
	if u, err := url.Parse(s.addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	return &NoServerError{Addr: addr, Err: err}
}

// explain says why Redis refused a script, where its own words do not.
func (s *Store) explain(ctx context.Context, err error) error {
	switch {
	case unauthenticated(err):
		// Redis refuses a command of many arguments from a client that has
		// not authenticated with a protocol error that does not say why.
		return fmt.Errorf("%s: Redis wants a password (the URL's, %s): %w", s.addr, s.names.Ways(PasswordSetting, ""), err)
	case strings.Contains(err.Error(), "can't run this command"):
		// Inside a script, Redis 7 does not name the command it refused:
		// sent alone, each command semrun sends is named if refused.
		return fmt.Errorf("%s: %s (Redis said: %w)", s.addr, s.refusedCommands(ctx), err)
	}
	return fmt.Errorf("%s: %w%s", s.addr, err, s.trustHint(err))
}

// unauthenticated tells a refusal for want of a password.
func unauthenticated(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOAUTH") || strings.Contains(msg, "unauthenticated")
}

// retryable tells failures that may heal from those that will not (bad
// password, missing permission, a script error).
func retryable(err error) bool {
	if untrusted(err) || plainText(err) || errors.Is(err, errAbsurdReply) || errors.Is(err, errNotRedis) {
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

// noSuchHost tells a host name the resolver says does not exist, as
// opposed to one it could not look up for now.
func noSuchHost(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// backoff doubles a delay up to max, each step jittered by ±25% so that
// waiters started together do not retry together.
type backoff struct{ next, max time.Duration }

func (b *backoff) step() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	return d*3/4 + mrand.N(d/2+1)
}
