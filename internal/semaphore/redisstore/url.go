package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// target is what the URL and the options say to connect to.
type target struct {
	opt *redis.UniversalOptions
	// shown is the URL to show in messages: no password, no query.
	shown string
	// password: the URL carries a password (a sentinel URL's is the
	// sentinels'), which is then wherever the URL is.
	password bool
}

// parseTarget reads o.URL into the universal client's options. go-redis's
// parser reads the first node's URL; with Cluster or SentinelMaster, more
// nodes come from ?addr=, as in go-redis's cluster URLs. No other query
// option is taken: semrun's own settings set what they would (timeouts,
// retries, TLS), and one that did nothing would mislead.
func (o *Options) parseTarget() (*target, error) {
	// The whole URL first: cut at its first ?, a password with an
	// unescaped ? would be read partly as the query, and quoted.
	shown, err := checkURL(o.URL)
	if err != nil {
		return nil, o.urlError(err)
	}
	base, query, _ := strings.Cut(o.URL, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		// The error would quote the query, which may hold a password.
		return nil, o.urlError(fmt.Errorf("%s: malformed URL query", shown))
	}
	more := q["addr"]
	q.Del("addr")
	for name := range q {
		if name != "db" && name != "skip_verify" {
			// Refused before go-redis, whose error lists every name: with
			// an unescaped & in a password=, one is part of the password.
			return nil, o.urlError(fmt.Errorf("%s: unknown URL option %s (semrun takes addr= with a cluster or sentinels, db= with unix://)", shown, optionName(name)))
		}
	}
	for _, a := range more {
		// As go-redis's cluster and sentinel URLs took them.
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			if at := strings.LastIndex(a, "@"); at >= 0 {
				a = "xxxxx" + a[at:] // never a password
			}
			return nil, o.urlError(fmt.Errorf("%s: addr=%s: want host:port", shown, a))
		}
	}
	first := base
	if len(q) > 0 {
		first += "?" + q.Encode()
	}
	opt, err := redis.ParseURL(first)
	if err != nil {
		return nil, o.urlError(fmt.Errorf("%s: %s", shown, strings.TrimPrefix(err.Error(), "redis: ")))
	}
	if err := o.checkTopology(shown, q, more, opt); err != nil {
		return nil, err
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
	t := &target{opt: u, shown: shown, password: opt.Password != ""}
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
	return t, nil
}

// checkTopology refuses query options semrun does not take, and URLs that
// do not fit a cluster or sentinels.
func (o *Options) checkTopology(shown string, q url.Values, more []string, opt *redis.Options) error {
	names := o.names()
	several := o.Cluster || o.SentinelMaster != ""
	for name := range q {
		if name == "skip_verify" {
			return o.urlError(fmt.Errorf("%s: skip_verify in the URL: use %s, which warns", shown, names.Name(TLSInsecureSetting)))
		}
		if name != "db" || opt.Network != "unix" {
			return o.urlError(fmt.Errorf("%s: unknown URL option %s (semrun takes addr= with a cluster or sentinels, db= with unix://)", shown, optionName(name)))
		}
	}
	switch {
	case o.Cluster && o.SentinelMaster != "":
		// go-redis would make a client that routes by slot among a
		// master's replicas: not a cluster, and not one master either.
		return fmt.Errorf("%s and %s: choose one", names.Name(ClusterSetting), names.Name(SentinelMasterSetting))
	case len(more) > 0 && !several:
		return o.urlError(fmt.Errorf("%s: ?addr= names more nodes of a cluster or more sentinels: add %s or %s",
			shown, names.Name(ClusterSetting), names.Name(SentinelMasterSetting)))
	case several && opt.Network == "unix":
		return o.urlError(fmt.Errorf("%s: a cluster or sentinels are reached by redis:// or rediss://", shown))
	case o.Cluster && opt.DB != 0:
		return o.urlError(fmt.Errorf("%s: a cluster has only database 0", shown))
	}
	return nil
}

func (o *Options) urlError(err error) error {
	return &semaphore.SettingError{Setting: URLSetting, Err: err}
}

// checkURL checks raw's form, but not its query, and returns the URL to
// show in messages. Errors never quote raw, which may hold a password.
func checkURL(raw string) (string, error) {
	if !strings.Contains(raw, "://") && hostPort().MatchString(raw) {
		// A host and port without a scheme (redis-cli's -h and -p, in
		// one): shown, since no password looks like that. A URL with a
		// scheme cannot match: the regexp is not even compiled for it.
		return "…", fmt.Errorf("%s: not a URL; did you mean redis://%s/0?", raw, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error quotes the whole URL
		}
		if !strings.Contains(raw, "@") {
			return "", fmt.Errorf("malformed URL: %w", err)
		}
		if quoted, ok := quotedPart(err); ok && !afterUserinfo(raw, quoted) {
			// The error quotes part of the URL that may be the password's:
			// with an unescaped / # or ? in it, or a bad %-escape.
			return "", unescapedPassword(raw)
		}
		return "", fmt.Errorf("%s: malformed URL: %w", hideUserinfo(raw), err)
	}
	shown := redactURL(u)
	if u.Opaque != "" {
		// "user:pass@host:6379" parses as scheme "user" with an opaque rest.
		return shown, fmt.Errorf("%s: not a URL of the form redis://host:port/db", shown)
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 && (u.User == nil || at >= authorityEnd(raw)) {
		// The last @ is not the one that ends the user:password, so part
		// of the password went into the host, path, query or fragment.
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
		// Not shown: with no scheme, it may be a password given as a URL.
		return "…", errors.New("no scheme (want redis://, rediss:// or unix://)")
	default:
		// Not shown: a password given as the URL, or "user:pass@host"
		// mistyped, can parse as a scheme.
		return "…", errors.New("unknown scheme (want redis://, rediss:// or unix://)")
	}
	return shown, nil
}

// authorityEnd is where raw's authority (user:password@host:port) ends:
// at the first / ? or # after the scheme's //.
func authorityEnd(raw string) int {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	} else if strings.HasPrefix(raw, "//") {
		start = len("//")
	}
	if end := strings.IndexAny(raw[start:], "/?#"); end >= 0 {
		return start + end
	}
	return len(raw)
}

// unescapedPassword is the error for a URL whose password was not all read
// as one, most likely for an unescaped / # or ? in it.
func unescapedPassword(raw string) error {
	return fmt.Errorf("%s: malformed URL (escape / # ? in a password as %%2F %%23 %%3F)", hideUserinfo(raw))
}

// hostPort matches a host name or IPv4 address and a port, alone;
// compiled when first needed, as start-up need not pay for it.
var hostPort = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*:[0-9]{1,5}$`)
})

// hideUserinfo shows a URL with an @ that did not parse, or whose password
// was not read whole, without its user and password. What follows the last
// @ is shown only when that @ ends the authority's userinfo: with an
// unescaped / # or ? in a password, the last @ is past the authority, and
// nothing tells where the password ends: then only the scheme is shown.
func hideUserinfo(raw string) string {
	scheme, _, found := strings.Cut(raw, "://")
	if !found || strings.ContainsAny(scheme, "@/#?%:") {
		scheme = ""
	}
	at := strings.LastIndex(raw, "@")
	switch {
	case scheme == "":
		return "…" // no telling what is what
	case at < 0 || at >= authorityEnd(raw):
		return scheme + "://…"
	}
	// The host and port only: a query may hold a password too.
	return scheme + "://xxxxx" + raw[at:authorityEnd(raw)]
}

// optionName shows a query option's name when it looks like one: one
// made of a password's pieces (password=a&b) is not shown.
func optionName(name string) string {
	if len(name) > 0 && len(name) <= 32 && strings.Trim(name, "abcdefghijklmnopqrstuvwxyz_") == "" {
		return strconv.Quote(name)
	}
	return "(not shown: it may be part of a password)"
}

// quotedPart is the part of the URL that a url.Parse error quotes.
func quotedPart(err error) (string, bool) {
	msg := err.Error()
	first, last := strings.Index(msg, `"`), strings.LastIndex(msg, `"`)
	if first < 0 || last <= first {
		return "", false
	}
	q, uerr := strconv.Unquote(msg[first : last+1])
	if uerr != nil {
		return msg[first+1 : last], true
	}
	return q, true
}

// afterUserinfo tells whether part is found only between the @ that ends
// raw's userinfo and the end of its authority (the host and port), so
// that it is no part of a password.
func afterUserinfo(raw, part string) bool {
	at, end := strings.LastIndex(raw, "@"), authorityEnd(raw)
	return part != "" && at >= 0 && at < end &&
		strings.Contains(raw[at+1:end], part) && !strings.Contains(raw[:at], part) && !strings.Contains(raw[end:], part)
}

// redactURL shows u without its password, its query (options may hold
// secrets) or, for an opaque URL, anything after the scheme.
func redactURL(u *url.URL) string {
	if u.Opaque != "" {
		return "…" // "user:pass@host": what parsed as a scheme is the user
	}
	shown := *u
	shown.RawQuery, shown.ForceQuery = "", false
	return shown.Redacted()
}
