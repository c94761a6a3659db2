package redisstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// serverError is an error reply of Redis, as go-redis gives one: a
// redis.Error.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// TestRetryClassification: which failures a call retries for the connect
// timeout (they may heal: a server loading its data, busy with a script,
// a replica promoted, the network), and which it reports at once.
func TestRetryClassification(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
		// auth: the failure wants a password.
		auth bool
	}{
		{"LOADING", serverError("LOADING Redis is loading the dataset in memory"), true, false},
		{"BUSY", serverError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true, false},
		{"MASTERDOWN", serverError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true, false},
		{"READONLY", serverError("READONLY You can't write against a read only replica."), true, false},
		{"TRYAGAIN", serverError("TRYAGAIN Multiple keys request during rehashing of slot"), true, false},
		{"CLUSTERDOWN", serverError("CLUSTERDOWN The cluster is down"), true, false},
		{"slot migrating", serverError("ERR Script attempted to access a non local key in a cluster node script: 1234abcd, on @user_script:12."), true, false},
		// go-redis follows a redirection itself; one it gives back is not
		// the store's to retry.
		{"MOVED", serverError("MOVED 3999 127.0.0.1:6381"), false, false},
		{"ASK", serverError("ASK 3999 127.0.0.1:6381"), false, false},
		// go-redis loads a script Redis lacks (EVALSHA, then EVAL).
		{"NOSCRIPT", serverError("NOSCRIPT No matching script. Please use EVAL."), false, false},
		{"NOPERM", serverError("NOPERM User semrun has no permissions to run the 'info' command"), false, false},
		{"WRONGPASS", serverError("WRONGPASS invalid username-password pair or user is disabled."), false, false},
		{"NOAUTH", serverError("NOAUTH Authentication required."), false, true},
		{"unauthenticated", serverError("ERR Protocol error: unauthenticated multibulk length"), false, true},
		{"OOM", serverError("OOM command not allowed when used memory > 'maxmemory'."), false, false},
		{"script error", serverError("ERR user_script:12: Script attempted to access nonexistent global variable 'x' script: 1234abcd"), false, false},
		{"wrong type", serverError("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, false},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, false},
		{"connection closed", io.EOF, true, false},
		{"deadline", context.DeadlineExceeded, true, false},
		{"deadline wrapped", fmt.Errorf("dial tcp: %w", context.DeadlineExceeded), true, false},
		{"certificate", x509.UnknownAuthorityError{}, false, false},
		{"plain text", errPlainText, false, false},
		{"absurd reply", absurdReply("?"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.err); got != tc.retry {
				t.Errorf("retryable(%v): got %v, want %v", tc.err, got, tc.retry)
			}
			if got := unauthenticated(tc.err); got != tc.auth {
				t.Errorf("unauthenticated(%v): got %v, want %v", tc.err, got, tc.auth)
			}
		})
	}
}

// TestRedisBusyServerIsRetried: a call to a server busy with a script (it
// answers BUSY) is retried, and succeeds once the script is killed.
func TestRedisBusyServerIsRetried(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := raw.ConfigSet(ctx, "lua-time-limit", "50").Err(); err != nil {
		t.Fatalf("CONFIG SET lua-time-limit: got error %v, want nil", err)
	}
	t.Cleanup(func() { _ = rawClient(t, srv.Addr).ScriptKill(context.Background()).Err() })
	loop := rawClient(t, srv.Addr)
	go func() { _ = loop.Eval(ctx, "while true do end", nil).Err() }()
	waitFor(t, 5*time.Second, "the server answers BUSY", func() bool {
		return strings.HasPrefix(fmt.Sprint(raw.Ping(ctx).Err()), "BUSY")
	})
	var (
		mu   sync.Mutex
		seen error
	)
	st := newStore(t, srv.URL(), Options{ConnectTimeout: 5 * time.Second, Retrying: func(_ string, err error) {
		mu.Lock()
		seen = err
		mu.Unlock()
		// The server heals: the next try finds it free.
		if err := raw.ScriptKill(ctx).Err(); err != nil {
			t.Errorf("SCRIPT KILL: got error %v, want nil", err)
		}
	}})
	l, err := st.Acquire(ctx, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 10 * time.Second, NoWait: true})
	if err != nil {
		t.Fatalf("Acquire from a busy server: got error %v, want a permit once the script is killed", err)
	}
	release(t, l)
	mu.Lock()
	defer mu.Unlock()
	if !strings.HasPrefix(fmt.Sprint(seen), "BUSY") {
		t.Errorf("the failure retried: got %v, want BUSY", seen)
	}
	var rerr interface{ RedisError() }
	if !errors.As(seen, &rerr) {
		t.Errorf("the failure retried: got %T, want Redis's own error", seen)
	}
}

// A host name no resolver knows (a typo in the URL) fails at once, with
// the resolver's word; one it could not look up for now is retried for the
// connect timeout, as any outage.
func TestUnknownHostFailsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		dns   net.DNSError
		retry bool
	}{
		{"no such host", net.DNSError{Err: "no such host", Name: "redsi.example", IsNotFound: true}, false},
		{"a resolver that timed out", net.DNSError{Err: "i/o timeout", Name: "redis.example", IsTimeout: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dials sync.Mutex
			tries := 0
			c := redis.NewClient(&redis.Options{Addr: tc.dns.Name + ":6379", DisableIdentity: true, Protocol: 2, MaxRetries: -1, DialerRetries: 1,
				Dialer: func(context.Context, string, string) (net.Conn, error) {
					dials.Lock()
					tries++
					dials.Unlock()
					err := tc.dns
					return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &err}
				}})
			t.Cleanup(func() { _ = c.Close() })
			st := NewWithClient(ServerClient(c), "redis://"+tc.dns.Name+":6379/0", Options{Prefix: testPrefix, ConnectTimeout: 500 * time.Millisecond})
			_, err := st.Acquire(ctxTimeout(t, 10*time.Second), semaphore.Request{Key: "k", Permits: 1, TTL: 30 * time.Second})
			dials.Lock()
			n := tries
			dials.Unlock()
			unreachable := errors.Is(err, semaphore.ErrUnreachable)
			switch {
			case err == nil || !strings.Contains(err.Error(), tc.dns.Err):
				t.Errorf("Acquire: got %v, want the resolver's %q", err, tc.dns.Err)
			case !tc.retry && (unreachable || n != 1):
				t.Errorf("Acquire: got %v after %d dials, want it at the first, not retried", err, n)
			case tc.retry && (!unreachable || n < 2):
				t.Errorf("Acquire: got %v after %d dials, want it retried for the connect timeout", err, n)
			}
		})
	}
}
