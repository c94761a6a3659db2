package cmd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/redisstore"
	"github.com/semrun/semrun/internal/settingfile"
)

// settingFlags are the flags that set the settings of requests and stores.
var settingFlags = map[semaphore.Setting]string{
	semaphore.KeySetting:             "key",
	semaphore.PermitsSetting:         "permits",
	semaphore.WeightSetting:          "weight",
	semaphore.TTLSetting:             "ttl",
	semaphore.RestartFenceSetting:    "restart-fence",
	semaphore.MinReplicasSetting:     "min-replicas",
	semaphore.MaxRuntimeSetting:      "max-runtime",
	semaphore.MinHoldSetting:         "min-hold",
	semaphore.MinHoldAfterSetting:    "min-hold-after",
	semaphore.ReasonSetting:          "reason",
	semaphore.PauseSetting:           "for",
	semaphore.LabelSetting:           "label",
	semaphore.PrioritySetting:        "priority",
	semaphore.PriorityAgeSetting:     "priority-age",
	semaphore.SupersedeSetting:       "supersede",
	localstore.DirSetting:            "lock-dir",
	redisstore.URLSetting:            "redis",
	redisstore.PrefixSetting:         "prefix",
	redisstore.ClusterSetting:        "cluster",
	redisstore.SentinelMasterSetting: "sentinel-master",
	redisstore.TLSCASetting:          "tls-ca",
	redisstore.TLSCertSetting:        "tls-cert",
	redisstore.TLSKeySetting:         "tls-key",
	redisstore.TLSServerNameSetting:  "tls-server-name",
	redisstore.TLSInsecureSetting:    "tls-insecure",
	redisstore.ConnectTimeoutSetting: "connect-timeout",
}

// names name settings in the stores' messages the way the user set them:
// the one place that does is sources.
type names struct {
	src   sources
	flags *pflag.FlagSet
}

var _ semaphore.Names = names{}

// Name is how the user set s: --tls-ca, SEMRUN_TLS_CA or tls-ca in FILE;
// the flag when they did not.
func (n names) Name(s semaphore.Setting) string {
	if s == redisstore.PasswordSetting {
		return n.Ways(s, "")
	}
	flag, ok := settingFlags[s]
	if !ok {
		return string(s)
	}
	return n.src.name(flag)
}

// Ways is the flag and the variable that set s: "--redis (SEMRUN_REDIS_URL)",
// "--cluster (SEMRUN_CLUSTER=true)".
func (n names) Ways(s semaphore.Setting, value string) string {
	if s == redisstore.PasswordSetting {
		// The URL's aside, which the store knows of.
		return "--redis-password-file, " + envRedisPassword + " or " + envRedisCLIAuth
	}
	flag, ok := settingFlags[s]
	if !ok {
		return string(s)
	}
	way := "--" + flag
	if value != "" && !n.isBool(flag) {
		way += " " + value
	}
	if env, ok := envNames[flag]; ok {
		if value != "" {
			env += "=" + value
		}
		way += " (" + env + ")"
	}
	return way
}

// isBool tells a flag that takes no value: --cluster, not --cluster true.
func (n names) isBool(flag string) bool {
	if n.flags == nil {
		return false
	}
	f := n.flags.Lookup(flag)
	return f != nil && f.Value.Type() == "bool"
}

// refused is err, a setting a request or a store refused, in the user's
// words: "--permits 0", "SEMRUN_PERMITS=0" or "permits 0 in FILE", and why.
// Any other error of a store's constructor is bad input too.
func (c *commonOptions) refused(err error) error {
	var se *semaphore.SettingError
	var usage *usageError
	switch {
	case errors.As(err, &usage):
		return err
	case !errors.As(err, &se):
		return &usageError{err}
	}
	flag, ok := settingFlags[se.Setting]
	switch {
	case !ok:
		return &usageError{err}
	case se.Value == nil:
		return &usageError{&shownSetting{fmt.Sprintf("%s: %v", c.src.name(flag), se.Err), se}}
	}
	if _, ok := se.Value.(bool); ok && c.src.origin(flag) == fromFlag {
		// --supersede, as given: a flag that takes no value.
		return &usageError{&shownSetting{fmt.Sprintf("%s: %v", c.src.name(flag), se.Err), se}}
	}
	return &usageError{&shownSetting{fmt.Sprintf("%s: %v", c.src.show(flag, se.Value), se.Err), se}}
}

// shownSetting is a *semaphore.SettingError in the user's words.
type shownSetting struct {
	msg string
	se  *semaphore.SettingError
}

func (e *shownSetting) Error() string { return e.msg }
func (e *shownSetting) Unwrap() error { return e.se }

// runAsks are what a run would ask of the store, which doctor checks it
// can give: the restart fence it warns of, and the min replicas that must
// be a majority of the master's replicas. Zero for a run and status: a
// run's own requests ask.
type runAsks struct {
	fence       time.Duration
	minReplicas int
}

// openStore opens the store the settings chose: the host's lock directory
// with --local, else Redis. It is the one place that names a store; the
// store checks the settings it owns. doctor is what doctor checks for.
func (c *commonOptions) openStore(log *logger, doctor runAsks) (semaphore.Store, error) {
	n := names{src: c.src, flags: c.flags}
	if c.local {
		return c.openLocal(log.Warnf, n)
	}
	password, readPassword := c.passwordSource()
	o := redisstore.Options{
		URL: c.redisURL, Prefix: c.prefix, ConnectTimeout: c.connectTimeout, Warnf: log.Warnf, Infof: log.Infof,
		TLS: c.tls, Password: readPassword, Cluster: c.cluster, SentinelMaster: c.sentinel, Names: n,
		Unnamed: c.src.origin("redis") == fromDefault, RestartFence: doctor.fence, MinReplicas: doctor.minReplicas,
		NoEvents: !c.events,
		// -q silences what -v would say.
		Verbose: c.verbose && !c.quiet,
	}
	if c.f.Streams.ErrTerminal != nil && !c.quiet {
		// Someone watches: a named Redis that does not answer is retried
		// for the connect timeout, and they hear of it at once.
		o.Retrying = func(addr string, err error) {
			log.Warnf("%s: %v; retrying for up to %v (%s)", addr, err, c.connectTimeout, c.src.name("connect-timeout"))
		}
	}
	s, err := redisstore.New(o)
	if err != nil {
		return nil, c.refused(err)
	}
	if s.PasswordAsked() && password != (passwordSource{}) {
		c.secrets.held = true
		c.secrets.usedCLIAuth = password.variable == envRedisCLIAuth
	}
	if c.secrets.held || s.PasswordInURL() || c.tls.KeyFile != "" {
		runner.ProtectSecrets()
	}
	if c.tls.Insecure {
		log.Warnf("%s: Redis's certificate is not verified: anyone between here and Redis can read and change what semrun sends", c.src.name("tls-insecure"))
	}
	if c.secrets.urlInArgs && s.PasswordInURL() {
		log.Warnf("--redis: a password on the command line can be seen by other users (ps); use --redis-password-file or SEMRUN_REDIS_PASSWORD")
	}
	return s, nil
}

// withStore is how a command that talks to a store starts: it checks the
// settings, then the command's own (check, when not nil), before it opens
// the store the settings chose; do runs with it, and it is closed after.
func (c *commonOptions) withStore(cmd *cobra.Command, check func() error, do func(store semaphore.Store, log *logger) error) error {
	if err := c.validate(cmd); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	log := c.logger(cmd.ErrOrStderr())
	store, err := c.openStore(log, runAsks{})
	if err != nil {
		return err
	}
	defer store.Close()
	return do(store, log)
}

// secretVariables are the variables that may hold a secret of semrun's.
var secretVariables = []string{envRedisPassword, envRedisCLIAuth, envNames["redis"]}

// protectSecretsInEnvironment protects semrun's environment (see
// runner.ProtectSecrets) when it holds a secret: a password, or a URL with one.
func protectSecretsInEnvironment(f *Factory) {
	for _, v := range secretVariables {
		if val := f.getenv(v); val != "" && (v != envNames["redis"] || strings.Contains(val, "@")) {
			runner.ProtectSecrets()
			return
		}
	}
}

// maxPasswordFile bounds a password file.
const maxPasswordFile = 4096

// Where a password may come from besides the URL, in this order.
const (
	envRedisPassword = "SEMRUN_REDIS_PASSWORD"
	envRedisCLIAuth  = "REDISCLI_AUTH" // redis-cli's
)

// passwordSource is where the Redis password comes from when the URL
// carries none: --redis-password-file, else SEMRUN_REDIS_PASSWORD, else
// REDISCLI_AUTH; empty for none.
type passwordSource struct {
	file     string
	variable string
}

// passwordSource is where the password would come from, and read, which
// reads it from there (empty when none is set). A file others can read is
// refused: the password would not be secret. Reading changes nothing:
// what the store took is asked of the store.
func (c *commonOptions) passwordSource() (passwordSource, func() (string, error)) {
	switch {
	case c.passwordFile != "":
		return passwordSource{file: c.passwordFile}, func() (string, error) {
			b, err := settingfile.Secret(c.passwordFile, maxPasswordFile)
			if err != nil {
				return "", usageErrorf("%s %s: %v", c.src.name("redis-password-file"), c.passwordFile, err)
			}
			return strings.TrimRight(string(b), "\r\n"), nil
		}
	case c.f.getenv(envRedisPassword) != "":
		return passwordSource{variable: envRedisPassword}, func() (string, error) { return c.f.getenv(envRedisPassword), nil }
	case c.f.getenv(envRedisCLIAuth) != "":
		return passwordSource{variable: envRedisCLIAuth}, func() (string, error) { return c.f.getenv(envRedisCLIAuth), nil }
	}
	return passwordSource{}, func() (string, error) { return "", nil }
}
