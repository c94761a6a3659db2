// Package cmd is semrun's command line: flags, configuration, and the one
// place where outcomes become exit statuses.
package cmd

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
)

// storeValues are the flag values of the commands that talk to a store.
type storeValues struct {
	local          bool
	lockDir        string
	redisURL       string
	cluster        bool
	sentinel       string // the master's name
	tls            redisstore.TLSOptions
	passwordFile   string
	prefix         string
	connectTimeout time.Duration
	// events: write the events of this process's calls in the keys'
	// logs (semrun events).
	events bool
}

// outputValues are the flag values of what semrun says, which every
// command that reads the settings has.
type outputValues struct {
	// config is --config's value as cobra sets it; readSettings has read
	// it, and the file, before.
	config         string
	verbose, quiet bool
	logFormat      string
}

// commonOptions are what the commands of one semrun share: the flag values
// of the store and of the output, the settings they came from, and the
// process it runs in.
type commonOptions struct {
	storeValues
	outputValues
	f *Factory
	// settings are the environment's and config files', read before the
	// command line is parsed.
	settings *settings
	// src says where each flag's value came from, once the settings apply.
	src sources
	// flags are the command's flags, once it runs.
	flags *pflag.FlagSet
	// logAttrs go with every line in JSON, once known (the key).
	logAttrs []any
	// secrets is what opening the store learnt about secrets.
	secrets secretUse
	// args are semrun's arguments, which acquire hands its keeper.
	args []string
	// keeper is what acquire told this process, its keeper; nil elsewhere.
	keeper *keeperMessage
}

// secretUse is where the secrets a store was opened with came from.
type secretUse struct {
	// urlInArgs: --redis was given on the command line, where others see it.
	urlInArgs bool
	// usedCLIAuth: the password came from REDISCLI_AUTH, which the child
	// then does not get.
	usedCLIAuth bool
	// held: semrun read a Redis password from a file or a variable.
	held bool
}

// Main runs semrun in this process, with its arguments, and returns its
// exit status.
func Main() int {
	return Run(context.Background(), os.Args[1:], System())
}

// Run runs semrun with args in f and returns its exit status. When the
// child was killed by a signal, Run makes semrun die of the same signal,
// and returns 128+N only where that is not possible.
func Run(ctx context.Context, args []string, f *Factory) int {
	runner.KeepWritesFromKilling()
	protectSecretsInEnvironment(f)
	common := &commonOptions{f: f, src: sources{}}
	if len(args) == 1 && args[0] == keeperArg {
		msg, err := readKeeperMessage()
		if err != nil {
			fmt.Fprintln(f.Streams.ErrOut, "semrun:", err)
			return exitFailure
		}
		common.keeper, args = msg, msg.Args
	}
	common.args = args
	root := newCmdRoot(common)
	if len(args) == 0 {
		// semrun alone: someone trying it out, who wants the usage, not
		// one line about what is missing.
		fmt.Fprint(f.Streams.ErrOut, root.UsageString())
		return exitFailure
	}
	common.settings = readSettings(root, args, f)
	err := oneDashLongFlag(root, args)
	if err == nil {
		root.SetArgs(args)
		_, err = root.ExecuteContextC(ctx)
	}
	code, sig, msg := exitStatus(err)
	if msg != "" {
		common.logger(f.Streams.ErrOut).Final(code, msg)
	}
	if common.keeper != nil {
		// A keeper's stderr is the null device: acquire says why it failed.
		common.keeper.Say(msg)
	}
	if sig != 0 {
		runner.DieOf(sig)
	}
	return code
}

// NewCmdRoot builds the semrun command in f: run a command under a
// permit, with status, doctor, version and completion as subcommands.
func NewCmdRoot(f *Factory) *cobra.Command {
	return newCmdRoot(&commonOptions{f: f, src: sources{}, settings: &settings{getenv: f.getenv}})
}

// newCmdRoot is NewCmdRoot with the options Run reads after the command.
func newCmdRoot(common *commonOptions) *cobra.Command {
	s := common.f.Streams
	root := newCmdRun(common)
	pf := root.PersistentFlags()
	pf.BoolVar(&common.local, "local", false, "keep the permits on this host, as file locks, instead of in Redis")
	pf.StringVar(&common.lockDir, "lock-dir", "", "with --local: the lock directory (default "+localstore.SystemDir+" for root and where root shares it, else /run/lock/semrun-UID)")
	if runtime.GOOS == "windows" {
		// There is no local store there: --local is refused, not offered.
		_ = pf.MarkHidden("local")
		_ = pf.MarkHidden("lock-dir")
	}
	pf.StringVar(&common.redisURL, "redis", common.f.DefaultRedisURL, "Redis URL where the permits live (redis://, rediss://, unix://)")
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
	pf.BoolVar(&common.events, "events", true, "log this call's grant, release or busy answer in the key's events (semrun events); counters are kept either way")
	pf.StringVar(&common.config, "config", "", "config file (YAML), instead of ~/.config/semrun/config.yaml; "+common.f.SystemConfigFile+" still applies under it")
	pf.BoolVarP(&common.verbose, "verbose", "v", false, "say what happens on stderr")
	pf.BoolVarP(&common.quiet, "quiet", "q", false, "say nothing but errors")
	pf.StringVar(&common.logFormat, "log-format", "text", "format of semrun's own lines on stderr: text or json (one object a line)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if !needsConfig(cmd) {
			return nil
		}
		if err := common.settings.apply(cmd, common.src); err != nil {
			return err
		}
		if err := common.checkLogFormat(); err != nil {
			return err
		}
		log := common.logger(s.ErrOut)
		for _, w := range common.settings.unknown {
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
	root.AddCommand(newCmdAcquire(common), newCmdRelease(common), newCmdStatus(common), newCmdEvents(common), newCmdKey(common), newCmdMetrics(common), newCmdDoctor(common), newCmdVersion())
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
		switch local, redis := c.src.origin("local"), c.src.origin("redis"); {
		case redis > local:
			c.local = false
		case redis == local:
			return usageErrorf("%s and %s: choose one", c.src.name("local"), c.src.name("redis"))
		}
	}
	if !c.local && flags.Changed("lock-dir") {
		return usageErrorf("--lock-dir %s: only with --local", c.lockDir)
	}
	c.secrets.urlInArgs = c.src.origin("redis") == fromFlag
	c.flags = flags
	if c.connectTimeout <= 0 {
		return usageErrorf("%s: must be positive", c.src.show("connect-timeout", c.connectTimeout))
	}
	if c.verbose && c.quiet {
		return usageErrorf("--verbose and --quiet: choose one")
	}
	return nil
}
