package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

const secret = "s3cret"

// parseURL reads raw as New does, with no other option set.
func parseURL(raw string) (*target, error) {
	return (&Options{URL: raw}).parseTarget()
}

func TestParseURLValid(t *testing.T) {
	for _, tc := range []struct {
		raw, addr, network, user, password string
		db                                 int
		tls                                bool
	}{
		{raw: "redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379", network: "tcp"},
		{raw: "redis://127.0.0.1", addr: "127.0.0.1:6379", network: "tcp"},
		{raw: "redis://user:" + secret + "@127.0.0.1:6380/2", addr: "127.0.0.1:6380", network: "tcp", user: "user", password: secret, db: 2},
		{raw: "redis://:" + secret + "@localhost/1", addr: "localhost:6379", network: "tcp", password: secret, db: 1},
		{raw: "rediss://user:" + secret + "@127.0.0.1:6380/0", addr: "127.0.0.1:6380", network: "tcp", user: "user", password: secret, tls: true},
		{raw: "unix:///tmp/redis.sock", addr: "/tmp/redis.sock", network: "unix"},
		{raw: "unix://user:" + secret + "@/tmp/redis.sock?db=3", addr: "/tmp/redis.sock", network: "unix", user: "user", password: secret, db: 3},
	} {
		target, err := parseURL(tc.raw)
		if err != nil {
			t.Errorf("parseURL(%q): got error %v, want nil", tc.raw, err)
			continue
		}
		opt, shown := target.opt, target.shown
		network := "tcp"
		if opt.Dialer != nil {
			network = "unix"
		}
		if opt.Addrs[0] != tc.addr || network != tc.network || opt.Username != tc.user || opt.Password != tc.password || opt.DB != tc.db || (opt.TLSConfig != nil) != tc.tls {
			t.Errorf("parseURL(%q): got addr %q network %q user %q password %q db %d tls %v, want %q %q %q %q %d %v",
				tc.raw, opt.Addrs[0], network, opt.Username, opt.Password, opt.DB, opt.TLSConfig != nil,
				tc.addr, tc.network, tc.user, tc.password, tc.db, tc.tls)
		}
		if target.password != (tc.password != "") {
			t.Errorf("parseURL(%q): got a password in the URL %v, want %v", tc.raw, target.password, tc.password != "")
		}
		if strings.Contains(shown, secret) {
			t.Errorf("parseURL(%q): got shown %q, want the password redacted", tc.raw, shown)
		}
		if tc.password != "" && !strings.Contains(shown, "xxxxx") {
			t.Errorf("parseURL(%q): got shown %q, want a visible redaction mark", tc.raw, shown)
		}
		if tc.network == "tcp" && !strings.Contains(shown, strings.Split(tc.addr, ":")[0]) {
			t.Errorf("parseURL(%q): got shown %q, want it to name the host", tc.raw, shown)
		}
	}
}

func TestParseURLInvalid(t *testing.T) {
	for _, tc := range []struct {
		raw, mention string // mention: what the message must name
	}{
		{"", "scheme"},
		{"127.0.0.1:6379", ""},
		{"//user:" + secret + "@127.0.0.1:6379", "scheme"},
		{"http://user:" + secret + "@127.0.0.1/0", `"http"`},
		{"redis://user:" + secret + "@127.0.0.1:port/0", "port"},
		{"redis://user:" + secret + "@[::1/0", "]"},
		{"redis://user:" + secret + "@host name/0", "host"},
		{"redis://us er:" + secret + "@127.0.0.1/0", "userinfo"},
		{"redis://user:" + secret + "@127.0.0.1:6379/0\x00", "control"},
		{"redis://user:" + secret + "@127.0.0.1:6379/abc", "database"},
		{"redis://user:" + secret + "@127.0.0.1:6379/0/1", "path"},
		{"redis://user:" + secret + "@/0", "no host"},
		{"unix://user:" + secret + "@", "socket"},
		{"redis://user:" + secret + "@127.0.0.1:6379/0?dial_timeout=soon", "dial_timeout"},
		{"redis://user:" + secret + "@127.0.0.1:6379/0?bogus=1", "bogus"},
		{"redis://127.0.0.1:6379/0?password=" + secret, "password"},
	} {
		target, err := parseURL(tc.raw)
		if err == nil || target != nil {
			t.Errorf("parseURL(%q): got (%v, %v), want (nil, error)", tc.raw, target, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("parseURL(%q): got message %q, want no password in either", tc.raw, err)
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("parseURL(%q): got message %q, want it to mention %q", tc.raw, err, tc.mention)
		}
	}
	// NewRedis refuses what parseURL refuses, with the same care.
	if st, err := New(withDefaults(Options{URL: "http://user:" + secret + "@127.0.0.1/0"})); err == nil || st != nil || strings.Contains(err.Error(), secret) {
		t.Errorf("NewRedis with an unknown scheme: got (%v, %v), want (nil, an error without the password)", st, err)
	}
}

// A password with an unescaped / # or ? is read partly as host, port, path
// or query; none of it may be shown.
func TestParseURLUnescapedPasswordHidden(t *testing.T) {
	for _, raw := range []string{
		"redis://user:pa/" + secret + "@127.0.0.1:6379/0",
		"redis://:Zm9v/YmFy+" + secret + "@127.0.0.1:6379/0",
		"redis://:64999/" + secret + "@127.0.0.1:6379",
		"redis://user:p#" + secret + "@127.0.0.1:6379/0",
		"redis://user:p?" + secret + "@127.0.0.1:6379/0",
		"redis://user:" + secret + "/x@127.0.0.1:6379/0",
	} {
		target, err := parseURL(raw)
		if err == nil || target != nil {
			t.Errorf("parseURL(%q): got (%v, %v), want an error", raw, target, err)
			continue
		}
		if strings.Contains(err.Error(), secret) ||
			strings.Contains(err.Error(), "Zm9v") || strings.Contains(err.Error(), "pa/") || strings.Contains(err.Error(), "64999") {
			t.Errorf("parseURL(%q): got message %q, want no part of the password", raw, err)
		}
		if !strings.Contains(err.Error(), "%2F") {
			t.Errorf("parseURL(%q): got message %q, want it to say how to escape", raw, err)
		}
	}
}

// url.EscapeError quotes the bad escape, which may come from a password.
func TestParseURLBadEscapeHidesPassword(t *testing.T) {
	_, err := parseURL("redis://user:pa%zq@127.0.0.1:6379/0")
	if err == nil || strings.Contains(err.Error(), "zq") || !strings.Contains(err.Error(), "escape") {
		t.Errorf("got %v, want an error about an escape that does not quote it", err)
	}
}

func TestParseURLWithoutSlashesHidesPassword(t *testing.T) {
	// Forgetting "//" makes net/url read the rest as an opaque part, which
	// URL.Redacted does not touch.
	for _, raw := range []string{
		"default:" + secret + "@127.0.0.1:6379",
		"redis:user:" + secret + "@127.0.0.1:6379/0",
	} {
		_, err := parseURL(raw)
		if err == nil {
			t.Errorf("parseURL(%q): got nil error, want one", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("parseURL(%q): got message %q, want no password in either", raw, err)
		}
	}
}

// TestRedisUnixSocket: a unix:// URL reaches the server over its socket,
// with the database the URL names.
func TestRedisUnixSocket(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	if srv.Socket() == "" {
		t.Skip("the test's directory is too long a path for a socket")
	}
	store := newStore(t, "unix://"+srv.Socket()+"?db=3", Options{})
	ctx := context.Background()
	key := uniqueKey(t)
	l, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire over a Unix socket: got error %v, want a permit", err)
	}
	defer release(t, l)
	raw := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Socket(), DB: 3, Protocol: 2, DisableIdentity: true})
	defer raw.Close()
	if n := zcard(t, raw, newKeys(testPrefix, key).holders); n != 1 {
		t.Errorf("holders in database 3: got %d, want 1", n)
	}
}

// TestRedisURLOptionsRefused: query options semrun does not take are
// refused, naming the option, never quoting a password.
func TestRedisURLOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{URL: "redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=3"}, `unknown URL option "dial_timeout"`},
		{Options{URL: "redis://127.0.0.1:1/0?db=2"}, `unknown URL option "db"`},
		{Options{URL: "redis://127.0.0.1:1/0?addr=127.0.0.1:2"}, "add <cluster> or <sentinel master>"},
		{Options{URL: "redis://127.0.0.1:1/0", Cluster: true, SentinelMaster: "m"}, "<cluster> and <sentinel master>: choose one"},
		{Options{URL: "redis://:" + secret + "@127.0.0.1:1/0?addr=%zz", Cluster: true}, "malformed URL query"},
		// A password with an unescaped ? must not be read as a query, in
		// any mode: its second half would be quoted as an option's name.
		{Options{URL: "redis://user:p?" + secret + "@127.0.0.1:1/0"}, "%3F"},
		{Options{URL: "redis://:64999?" + secret + "@127.0.0.1:1/0", Cluster: true}, "%3F"},
		{Options{URL: "redis://:64999?" + secret + "@127.0.0.1:1/0", SentinelMaster: "m"}, "%3F"},
		// More seeds are host:port, as go-redis's own URL parsers required.
		{Options{URL: "redis://127.0.0.1:1/0?addr=127.0.0.1", Cluster: true}, "addr=127.0.0.1: want host:port"},
		{Options{URL: "redis://127.0.0.1:1/0?addr=:2", SentinelMaster: "m"}, "addr=:2: want host:port"},
		{Options{URL: "redis://127.0.0.1:1/0?addr=127.0.0.1:2&addr=", Cluster: true}, "want host:port"},
	} {
		_, err := New(withDefaults(tc.o))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("NewRedis(%+v): got error %v, want one saying %q without the password", tc.o.URL, err, tc.want)
		}
	}
}
