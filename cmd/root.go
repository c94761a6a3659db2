// Package cmd is semrun's command line: flags, configuration, and the one
// place where outcomes become exit statuses.
package cmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// Streams are the standard files semrun and its child use.
type Streams struct {
	In       *os.File
	Out, Err *os.File
}

// commonOptions are the settings every command that talks to a store has.
type commonOptions struct {
	local        bool
	lockDir      string
	redisURL     string
	cluster      bool
	sentinel     string // the master's name
	tls          semaphore.TLSOptions
	passwordFile string
	// urlInArgs: --redis was given on the command line, where others see it.
	urlInArgs bool
	// urlPassword: the URL carries a password (the sentinels' with Sentinel).
	urlPassword bool
	// usedCLIAuth: the password came from REDISCLI_AUTH, which the child
	// then does not get.
	usedCLIAuth    bool
	prefix         string
	connectTimeout time.Duration
	config         string
	verbose, quiet bool
	logFormat      string
	sources        sources
	// configured: applyConfig ran, so logFormat is the settings' own.
	configured bool
	// stderr is where semrun's own lines go.
	stderr io.Writer
	// logAttrs go with every line in JSON, once known (the key).
	logAttrs []any
	// configFiles are the config files read, for --verbose.
	configFiles []string
}

// Main runs semrun with the process's arguments and returns its exit status.
func Main() int {
	return Run(context.Background(), os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// Run runs semrun with args and returns its exit status. When the child was
// killed by a signal, Run makes semrun die of the same signal, and returns
// 128+N only where that is not possible.
func Run(ctx context.Context, args []string, s Streams) int {
	common := &commonOptions{sources: sources{}}
	root := newCmdRoot(s, common)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	code, sig, msg := exitStatus(err)
	if msg != "" {
		if !common.configured && cmd != nil {
			// The command line failed before the settings were read (an
			// unknown flag, no command): read them now, for --log-format.
			_ = applyConfig(cmd, common)
		}
		common.logger(s.Err).Final(code, msg)
	}
	if sig != 0 {
		runner.DieOf(sig)
	}
	return code
}

// NewCmdRoot builds the semrun command: run a command under a permit, with
// status, version and completion as subcommands.
func NewCmdRoot(s Streams) *cobra.Command {
	return newCmdRoot(s, &commonOptions{sources: sources{}})
}

// newCmdRoot is NewCmdRoot with the settings Run reads after the command.
func newCmdRoot(s Streams, common *commonOptions) *cobra.Command {
	common.stderr = s.Err
	root := newCmdRun(s, common)
	pf := root.PersistentFlags()
	pf.BoolVar(&common.local, "local", false, "keep the permits on this host, as file locks, instead of in Redis")
	pf.StringVar(&common.lockDir, "lock-dir", "", "with --local: the lock directory (default "+semaphore.SystemLockDir+" for root and where root shares it, else /run/lock/semrun-UID)")
	if runtime.GOOS == "windows" {
		// There is no local store there: --local is refused, not offered.
		_ = pf.MarkHidden("local")
		_ = pf.MarkHidden("lock-dir")
	}
	pf.StringVar(&common.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL where the permits live (redis://, rediss://, unix://)")
	pf.BoolVar(&common.cluster, "cluster", false, "Redis Cluster: --redis is a seed node (more with ?addr=host:port&addr=...)")
	pf.StringVar(&common.sentinel, "sentinel-master", "", "Redis Sentinel: --redis is a sentinel (more with ?addr=...), its user and password the sentinels'; this names the master")
	pf.StringVar(&common.tls.CAFile, "tls-ca", "", "with rediss://: PEM file of the CAs that may sign Redis's certificate (default: the system's)")
	pf.StringVar(&common.tls.CertFile, "tls-cert", "", "with rediss://: client certificate (PEM), for a Redis that asks for one")
	pf.StringVar(&common.tls.KeyFile, "tls-key", "", "with rediss://: the client certificate's key (PEM)")
	pf.StringVar(&common.tls.ServerName, "tls-server-name", "", "with rediss://: the name Redis's certificate must have (default: the URL's host)")
	pf.BoolVar(&common.tls.Insecure, "tls-insecure", false, "with rediss://: do not verify Redis's certificate (warns)")
	pf.StringVar(&common.passwordFile, "redis-password-file", "", "read the Redis password from this file (readable by its owner only), when the URL has none")
	pf.StringVar(&common.prefix, "prefix", "semrun:", "namespace of semrun's keys in the store")
	pf.DurationVar(&common.connectTimeout, "connect-timeout", 10*time.Second, "give up on an unreachable store after this")
	pf.StringVar(&common.config, "config", "", "config file (YAML), instead of ~/.config/semrun/config.yaml; "+SystemConfigFile+" still applies under it")
	pf.BoolVarP(&common.verbose, "verbose", "v", false, "say what happens on stderr")
	pf.BoolVarP(&common.quiet, "quiet", "q", false, "say nothing but errors")
	pf.StringVar(&common.logFormat, "log-format", "text", "format of semrun's own lines on stderr: text or json (one object a line)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !needsConfig(cmd) {
			return nil
		}
		return applyConfig(cmd, common)
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.AddCommand(newCmdStatus(common), newCmdDoctor(common), newCmdVersion())
	return root
}

// needsConfig tells whether cmd reads the settings: version and the
// shell completions do not, so that a broken config file cannot keep
// anyone from learning the version or completing a command line.
func needsConfig(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "version", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return false
		}
	}
	return true
}

// validate checks the settings of commands that talk to a store, and
// decides which store that is.
func (c *commonOptions) validate(cmd *cobra.Command) error {
	flags := cmd.Flags()
	if c.local {
		// A stronger setting wins (a --redis flag over SEMRUN_LOCAL); two of
		// equal strength contradict each other.
		switch local, redis := c.sources.rank(flags, "local"), c.sources.rank(flags, "redis"); {
		case redis > local:
			c.local = false
		case redis == local:
			return usageErrorf("%s and %s: choose one", c.sources.name("local"), c.sources.name("redis"))
		}
	}
	if !c.local && flags.Changed("lock-dir") {
		return usageErrorf("--lock-dir %s: only with --local", c.lockDir)
	}
	if c.local {
		if c.lockDir == "" && c.sources.rank(flags, "lock-dir") > rankDefault {
			return usageErrorf("%s: must not be empty", c.sources.name("lock-dir"))
		}
	} else if opt, shown, err := semaphore.ParseRedisURL(c.seedURL()); err != nil {
		return usageErrorf("%s: %v", c.sources.name("redis"), err)
	} else if err := c.checkTLS(opt.TLSConfig != nil, shown); err != nil {
		return err
	} else {
		c.urlPassword = opt.Password != ""
	}
	c.urlInArgs = c.sources.rank(flags, "redis") == rankFlag
	if !c.local && c.cluster && c.sentinel != "" {
		return usageErrorf("%s and %s: choose one", c.sources.name("cluster"), c.sources.name("sentinel-master"))
	}
	if c.connectTimeout <= 0 {
		return usageErrorf("%s: must be positive", c.sources.show("connect-timeout", c.connectTimeout))
	}
	if c.prefix == "" {
		return usageErrorf("%s: must not be empty", c.sources.name("prefix"))
	}
	if c.verbose && c.quiet {
		return usageErrorf("--verbose and --quiet: choose one")
	}
	return nil
}

// seedURL is the URL to check as one server's: with --cluster, the
// query's further seeds (?addr=...) are go-redis's cluster syntax.
func (c *commonOptions) seedURL() string {
	if !c.cluster && c.sentinel == "" {
		return c.redisURL
	}
	base, _, _ := strings.Cut(c.redisURL, "?")
	return base
}

// checkTLS refuses TLS settings without a rediss:// URL, and a client
// certificate without its key or a key without its certificate.
func (c *commonOptions) checkTLS(tls bool, shown string) error {
	set := []struct {
		flag string
		on   bool
	}{{"tls-ca", c.tls.CAFile != ""}, {"tls-cert", c.tls.CertFile != ""}, {"tls-key", c.tls.KeyFile != ""},
		{"tls-server-name", c.tls.ServerName != ""}, {"tls-insecure", c.tls.Insecure}}
	for _, s := range set {
		if s.on && !tls {
			return usageErrorf("%s: needs a rediss:// URL, not %s (%s)", c.sources.name(s.flag), shown, c.sources.name("redis"))
		}
	}
	switch {
	case c.tls.CertFile != "" && c.tls.KeyFile == "":
		return usageErrorf("%s %s: needs %s", c.sources.name("tls-cert"), c.tls.CertFile, c.sources.name("tls-key"))
	case c.tls.KeyFile != "" && c.tls.CertFile == "":
		return usageErrorf("%s %s: needs %s", c.sources.name("tls-key"), c.tls.KeyFile, c.sources.name("tls-cert"))
	}
	return nil
}

// openStore opens the store the settings chose: the host's lock directory
// with --local, else Redis. Nothing past this point knows which it is.
func (c *commonOptions) openStore(warnf func(string, ...any)) (semaphore.Store, error) {
	if warnf == nil {
		warnf = c.logger(c.stderr).Warnf
	}
	if c.local {
		dir := c.lockDir
		if dir == "" {
			dir = semaphore.DefaultLockDir()
		}
		s, err := semaphore.NewLocal(semaphore.LocalOptions{Dir: dir, Warnf: warnf})
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		return s, nil
	}
	password, err := c.password()
	if err != nil {
		return nil, err
	}
	if c.tls.Insecure {
		warnf("%s: Redis's certificate is not verified: anyone between here and Redis can read and change what semrun sends", c.sources.name("tls-insecure"))
	}
	if c.urlInArgs && c.urlPassword {
		warnf("--redis: a password on the command line can be seen by other users (ps); use --redis-password-file or SEMRUN_REDIS_PASSWORD")
	}
	s, err := semaphore.NewRedis(semaphore.RedisOptions{
		URL: c.redisURL, Prefix: c.prefix, ConnectTimeout: c.connectTimeout, Warnf: warnf,
		TLS: &c.tls, Password: password, Cluster: c.cluster, SentinelMaster: c.sentinel,
	})
	if err != nil {
		return nil, usageErrorf("%s: %v", c.sources.name("redis"), err)
	}
	return s, nil
}

// Where a password may come from besides the URL, in this order.
const (
	envRedisPassword = "SEMRUN_REDIS_PASSWORD"
	envRedisCLIAuth  = "REDISCLI_AUTH" // redis-cli's
)

// password is the Redis password from --redis-password-file, else
// SEMRUN_REDIS_PASSWORD, else REDISCLI_AUTH; empty when none is set. A
// file others can read is refused: the password would not be secret.
func (c *commonOptions) password() (string, error) {
	// With Sentinel, the URL's password is the sentinels': the master's
	// comes from the other sources.
	if c.urlPassword && c.sentinel == "" {
		return "", nil // the URL's
	}
	if c.passwordFile != "" {
		name := c.sources.name("redis-password-file")
		f, err := os.Open(c.passwordFile)
		if err != nil {
			return "", usageErrorf("%s: %v", name, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return "", usageErrorf("%s: %v", name, err)
		}
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			return "", usageErrorf("%s %s: readable by others (mode %04o); chmod 600 it", name, c.passwordFile, perm)
		}
		b, err := io.ReadAll(io.LimitReader(f, 4096))
		if err != nil {
			return "", usageErrorf("%s: %v", name, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	if p := os.Getenv(envRedisPassword); p != "" {
		return p, nil
	}
	if p := os.Getenv(envRedisCLIAuth); p != "" {
		c.usedCLIAuth = true
		return p, nil
	}
	return "", nil
}

// logger writes semrun's own lines to stderr, as --verbose, --quiet and
// --log-format say: warnings, --verbose lines, and the final error line.
type logger struct {
	sl *slog.Logger
}

// logger is the one place that decides the format of semrun's own lines.
// A --log-format that is not valid gives text: it is itself the error then.
func (c *commonOptions) logger(w io.Writer) *logger {
	level := slog.LevelWarn
	switch {
	case c.quiet:
		level = slog.LevelError
	case c.verbose:
		level = slog.LevelInfo
	}
	var h slog.Handler = &textHandler{w: w, level: level}
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	}
	return &logger{sl: slog.New(h).With(c.logAttrs...)}
}

// checkLogFormat refuses a --log-format other than text or json.
func (c *commonOptions) checkLogFormat() error {
	if c.logFormat != "text" && c.logFormat != "json" {
		return usageErrorf("%s: must be text or json", c.sources.show("log-format", c.logFormat))
	}
	return nil
}

// Warnf says something is off; --quiet silences it.
func (l *logger) Warnf(format string, args ...any) {
	l.sl.Warn(fmt.Sprintf(format, args...))
}

// Infof says what happens, with --verbose only.
func (l *logger) Infof(format string, args ...any) {
	l.sl.Info(fmt.Sprintf(format, args...))
}

// Final is the one line that says why semrun exits with status, which is
// not the command's own.
func (l *logger) Final(status int, msg string) {
	l.sl.Error(msg, "status", status)
}

// textHandler writes lines as semrun always has: "semrun: warning: ..."
// and "semrun: ...". The message says everything; attributes are for JSON.
type textHandler struct {
	w     io.Writer
	level slog.Level
}

func (h *textHandler) Enabled(_ context.Context, level slog.Level) bool { return level >= h.level }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	prefix := "semrun: "
	if r.Level == slog.LevelWarn {
		prefix = "semrun: warning: "
	}
	_, err := io.WriteString(h.w, prefix+r.Message+"\n") // one write: lines from two goroutines do not mix
	return err
}

func (h *textHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *textHandler) WithGroup(string) slog.Handler      { return h }
