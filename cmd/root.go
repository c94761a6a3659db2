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
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
)

// commonOptions are the settings every command that talks to a store has.
type commonOptions struct {
	local        bool
	lockDir      string
	redisURL     string
	cluster      bool
	sentinel     string // the master's name
	tls          redisstore.TLSOptions
	passwordFile string
	// urlInArgs: --redis was given on the command line, where others see it.
	urlInArgs bool
	// usedCLIAuth: the password came from REDISCLI_AUTH, which the child
	// then does not get.
	usedCLIAuth bool
	// heldSecret: semrun read a Redis password from a file or a variable.
	heldSecret     bool
	prefix         string
	connectTimeout time.Duration
	config         string
	verbose, quiet bool
	logFormat      string
	sources        sources
	// flags are the command's flags, once it runs.
	flags *pflag.FlagSet
	// configured: applyConfig ran, so logFormat is the settings' own.
	configured bool
	// stderr is where semrun's own lines go.
	stderr io.Writer
	// logAttrs go with every line in JSON, once known (the key).
	logAttrs []any
	// configFiles are the config files read, for --verbose.
	configFiles []string
	// onTerminal: stderr is a terminal, where someone watches.
	onTerminal bool
	// restartFence is the fence doctor checks the server's uptime against.
	restartFence time.Duration
	// unknownSettings are the warnings about config file keys no command
	// takes, said once the settings are read.
	unknownSettings []string
}

// DefaultRedisURL is where semrun looks for Redis when nothing names one.
// It is a variable only so that tests can point it where nothing listens.
var DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Main runs semrun with the process's arguments and returns its exit status.
func Main() int {
	return Run(context.Background(), os.Args[1:], System())
}

// Run runs semrun with args and returns its exit status. When the child was
// killed by a signal, Run makes semrun die of the same signal, and returns
// 128+N only where that is not possible.
func Run(ctx context.Context, args []string, s *IOStreams) int {
	runner.KeepWritesFromKilling()
	protectSecretsInEnvironment()
	common := &commonOptions{sources: sources{}}
	root := newCmdRoot(s, common)
	if len(args) == 0 {
		// semrun alone: someone trying it out, who wants the usage, not
		// one line about what is missing.
		fmt.Fprint(s.ErrOut, root.UsageString())
		return exitFailure
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	code, sig, msg := exitStatus(err)
	if msg != "" {
		if !common.configured && cmd != nil {
			// The command line failed before the settings were read (an
			// unknown flag, no command): read them now, for --log-format.
			_ = applyConfig(cmd, common)
		}
		common.logger(s.ErrOut).Final(code, msg)
	}
	if sig != 0 {
		runner.DieOf(sig)
	}
	return code
}

// NewCmdRoot builds the semrun command: run a command under a permit, with
// status, version and completion as subcommands.
func NewCmdRoot(s *IOStreams) *cobra.Command {
	return newCmdRoot(s, &commonOptions{sources: sources{}})
}

// newCmdRoot is NewCmdRoot with the settings Run reads after the command.
func newCmdRoot(s *IOStreams, common *commonOptions) *cobra.Command {
	common.stderr = s.ErrOut
	common.onTerminal = s.ErrTerminal != nil
	root := newCmdRun(s, common)
	pf := root.PersistentFlags()
	pf.BoolVar(&common.local, "local", false, "keep the permits on this host, as file locks, instead of in Redis")
	pf.StringVar(&common.lockDir, "lock-dir", "", "with --local: the lock directory (default "+localstore.SystemDir+" for root and where root shares it, else /run/lock/semrun-UID)")
	if runtime.GOOS == "windows" {
		// There is no local store there: --local is refused, not offered.
		_ = pf.MarkHidden("local")
		_ = pf.MarkHidden("lock-dir")
	}
	pf.StringVar(&common.redisURL, "redis", DefaultRedisURL, "Redis URL where the permits live (redis://, rediss://, unix://)")
	pf.BoolVar(&common.cluster, "cluster", false, "Redis Cluster: --redis is a seed node (more with ?addr=host:port&addr=...)")
	pf.StringVar(&common.sentinel, "sentinel-master", "", "Redis Sentinel: --redis is a sentinel (more with ?addr=...), its user and password the sentinels'; this names the master")
	pf.StringVar(&common.tls.CAFile, "tls-ca", "", "with rediss://: PEM file of the CAs that may sign Redis's certificate (default: the system's)")
	pf.StringVar(&common.tls.CertFile, "tls-cert", "", "with rediss://: client certificate (PEM), for a Redis that asks for one")
	pf.StringVar(&common.tls.KeyFile, "tls-key", "", "with rediss://: the client certificate's key (PEM)")
	pf.StringVar(&common.tls.ServerName, "tls-server-name", "", "with rediss://: the name Redis's certificate must have (default: the URL's host)")
	pf.BoolVar(&common.tls.Insecure, "tls-insecure", false, "with rediss://: do not verify Redis's certificate (warns)")
	pf.StringVar(&common.passwordFile, "redis-password-file", "", "read the Redis password from this file (readable by its owner only), when the URL has none")
	pf.StringVar(&common.prefix, "prefix", "semrun:", "namespace of semrun's keys in the store")
	pf.Var(newDuration(&common.connectTimeout, 10*time.Second), "connect-timeout", "give up on an unreachable store after this")
	pf.StringVar(&common.config, "config", "", "config file (YAML), instead of ~/.config/semrun/config.yaml; "+SystemConfigFile+" still applies under it")
	pf.BoolVarP(&common.verbose, "verbose", "v", false, "say what happens on stderr")
	pf.BoolVarP(&common.quiet, "quiet", "q", false, "say nothing but errors")
	pf.StringVar(&common.logFormat, "log-format", "text", "format of semrun's own lines on stderr: text or json (one object a line)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !needsConfig(cmd) {
			return nil
		}
		if err := applyConfig(cmd, common); err != nil {
			return err
		}
		log := common.logger(common.stderr)
		for _, w := range common.unknownSettings {
			log.Warnf("%s", w)
		}
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{flagError(c, err)} })
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SuggestionsMinimumDistance = 2 // "stauts" -> status
	root.SetUsageFunc(usage)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.ErrOut)
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

// validate checks the settings of commands that talk to a store that the
// store does not own, and decides which store that is.
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
	c.urlInArgs = c.sources.rank(flags, "redis") == rankFlag
	c.flags = flags
	if c.connectTimeout <= 0 {
		return usageErrorf("%s: must be positive", c.sources.show("connect-timeout", c.connectTimeout))
	}
	if c.verbose && c.quiet {
		return usageErrorf("--verbose and --quiet: choose one")
	}
	return nil
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
	// What came from elsewhere (a server's error, a file's name) must not
	// drive the terminal, nor fake a line. One write: lines from two
	// goroutines do not mix.
	_, err := io.WriteString(h.w, prefix+printable.String(r.Message)+"\n")
	return err
}

func (h *textHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *textHandler) WithGroup(string) slog.Handler      { return h }
