package redisstore

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
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
		{"http://user:" + secret + "@127.0.0.1/0", "unknown scheme"},
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
	if n := zcard(t, raw, protocol.NewKeys(testPrefix, key).Holders); n != 1 {
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

// redactionShapes are URL shapes a password may be put in, with PW where
// it goes: as written, often without escaping what it should. (In
// redis://NAME@host, NAME is a user name, which is shown.)
var redactionShapes = []string{
	"redis://:PW@127.0.0.1:6379/0", "redis://user:PW@127.0.0.1/0", "rediss://:PW@host:6380",
	"redis://:PW@", "redis://:PW@/", "redis://:PW@[::1", "redis://:PW@host:port:x",
	"redis://:PW@host/db", "redis://:PW@host/0?addr=x", "redis://:p@/PW@host/0", "redis://:PW@host/0#frag",
	"unix://:PW@/tmp/redis.sock", "unix://user:PW@", "user:PW@host:6379", ":PW@host", "PW",
	"redis://:PW@host:6379/0?password=PW", "redis://host/0?addr=:PW@other:1", "redis://:PW@ho st/0",
	"redis://:PW@host:99999/0", "redis://:PW@%zz/0", "rediss://:PW@host:6379/0?skip_verify=true",
}

// checkRedacted fails t when the password pw shows in any message that
// parsing raw gives, as any five characters of it in a row.
func checkRedacted(t *testing.T, raw, pw string, settings ...func(*Options)) {
	t.Helper()
	o := &Options{URL: raw}
	for _, set := range settings {
		set(o)
	}
	var out string
	if target, err := o.parseTarget(); err != nil {
		out = err.Error()
	} else {
		out = target.shown
	}
	for i := 0; i+5 <= len(pw); i++ {
		if strings.Contains(out, pw[i:i+5]) {
			t.Fatalf("parsing %q: got %q, which shows %q of the password %q", raw, out, pw[i:i+5], pw)
		}
	}
}

// FuzzURLRedaction: no URL shape shows a password, whatever it holds.
// The password's alphabet has no lowercase letters nor digits, which
// messages and hosts are made of, so a match is the password's.
func FuzzURLRedaction(f *testing.F) {
	for i := range redactionShapes {
		f.Add(i, "S3CRET/PW@#?%:", false)
		f.Add(i, "AB@CD/EF#GH?IJ%KL", true)
		f.Add(i, "%41%2F%ZZ@@//##??", false)
	}
	f.Fuzz(func(t *testing.T, shape int, pw string, cluster bool) {
		if shape < 0 || len(pw) < 5 || strings.IndexFunc(pw, func(r rune) bool { return !strings.ContainsRune(pwAlphabet, r) }) >= 0 {
			t.Skip("not a password of the alphabet")
		}
		raw := strings.ReplaceAll(redactionShapes[shape%len(redactionShapes)], "PW", pw)
		checkRedacted(t, raw, pw, func(o *Options) { o.Cluster = cluster })
	})
}

const pwAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ@/#?%:!$&'()*+,;=[]~_-."

// TestURLRedactionRandom runs many random passwords through every shape,
// so that CI covers more than the fuzz seeds.
func TestURLRedactionRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, 6+rng.IntN(14))
		for i := range b {
			b[i] = pwAlphabet[rng.IntN(len(pwAlphabet))]
		}
		raw := redactionShapes[rng.IntN(len(redactionShapes))]
		checkRedacted(t, strings.ReplaceAll(raw, "PW", string(b)), string(b), func(o *Options) { o.Cluster = rng.IntN(2) == 0 })
	}
}
