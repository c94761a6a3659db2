// Package cmd is semrun's command line: flags, configuration, and the one
// place where outcomes become exit statuses.
package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
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
	local          bool
	lockDir        string
	redisURL       string
	prefix         string
	connectTimeout time.Duration
	config         string
	verbose, quiet bool
	sources        sources
}

// Main runs semrun with the process's arguments and returns its exit status.
func Main() int {
	return Run(context.Background(), os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// Run runs semrun with args and returns its exit status. When the child was
// killed by a signal, Run makes semrun die of the same signal, and returns
// 128+N only where that is not possible.
func Run(ctx context.Context, args []string, s Streams) int {
	root := NewCmdRoot(s)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	code, sig, msg := exitStatus(err)
	if msg != "" {
		fmt.Fprintf(s.Err, "semrun: %s\n", msg)
	}
	if sig != 0 {
		runner.DieOf(sig)
	}
	return code
}

// NewCmdRoot builds the semrun command: run a command under a permit, with
// status, version and completion as subcommands.
func NewCmdRoot(s Streams) *cobra.Command {
	common := &commonOptions{sources: sources{}}
	root := newCmdRun(s, common)
	pf := root.PersistentFlags()
	pf.BoolVar(&common.local, "local", false, "keep the permits on this host, as file locks, instead of in Redis")
	pf.StringVar(&common.lockDir, "lock-dir", "", "with --local: the lock directory (default "+semaphore.SystemLockDir+" for root and where root shares it, else /run/lock/semrun-UID)")
	pf.StringVar(&common.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL where the permits live (redis://, rediss://, unix://)")
	pf.StringVar(&common.prefix, "prefix", "semrun:", "namespace of semrun's keys in the store")
	pf.DurationVar(&common.connectTimeout, "connect-timeout", 10*time.Second, "give up on an unreachable store after this")
	pf.StringVar(&common.config, "config", "", "config file (YAML; default: the user's semrun/config.yaml)")
	pf.BoolVarP(&common.verbose, "verbose", "v", false, "say what happens on stderr")
	pf.BoolVarP(&common.quiet, "quiet", "q", false, "say nothing but errors")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return applyConfig(cmd, common.sources)
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.AddCommand(newCmdStatus(common), newCmdVersion())
	return root
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
		if c.lockDir == "" && c.sources.rank(flags, "lock-dir") > 0 {
			return usageErrorf("%s: must not be empty", c.sources.name("lock-dir"))
		}
	} else if _, _, err := semaphore.ParseRedisURL(c.redisURL); err != nil {
		return usageErrorf("%s: %v", c.sources.name("redis"), err)
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

// openStore opens the store the settings chose: the host's lock directory
// with --local, else Redis. Nothing past this point knows which it is.
func (c *commonOptions) openStore(warnf func(string, ...any)) (semaphore.Store, error) {
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
	s, err := semaphore.NewRedis(semaphore.RedisOptions{
		URL: c.redisURL, Prefix: c.prefix, ConnectTimeout: c.connectTimeout, Warnf: warnf,
	})
	if err != nil {
		return nil, usageErrorf("%s: %v", c.sources.name("redis"), err)
	}
	return s, nil
}

// logger writes semrun's own lines to stderr, as --verbose and --quiet say.
type logger struct {
	w              io.Writer
	verbose, quiet bool
}

func (c *commonOptions) logger(w io.Writer) *logger {
	return &logger{w: w, verbose: c.verbose, quiet: c.quiet}
}

// Warnf says something is off; --quiet silences it.
func (l *logger) Warnf(format string, args ...any) {
	if !l.quiet {
		fmt.Fprintf(l.w, "semrun: warning: "+format+"\n", args...)
	}
}

// Infof says what happens, with --verbose only.
func (l *logger) Infof(format string, args ...any) {
	if l.verbose {
		fmt.Fprintf(l.w, "semrun: "+format+"\n", args...)
	}
}
