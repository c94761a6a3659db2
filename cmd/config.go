package cmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// envNames maps each flag that the environment may set to its variable.
// Flags missing here (--no-wait, --verbose, --quiet) come from flags and
// config files only.
var envNames = map[string]string{
	"key":                 "SEMRUN_KEY",
	"permits":             "SEMRUN_PERMITS",
	"weight":              "SEMRUN_WEIGHT",
	"ttl":                 "SEMRUN_TTL",
	"timeout":             "SEMRUN_TIMEOUT",
	"busy-exit-code":      "SEMRUN_BUSY_EXIT_CODE",
	"lost-exit-code":      "SEMRUN_LOST_EXIT_CODE",
	"on-lost":             "SEMRUN_ON_LOST",
	"kill-after":          "SEMRUN_KILL_AFTER",
	"restart-fence":       "SEMRUN_RESTART_FENCE",
	"min-replicas":        "SEMRUN_MIN_REPLICAS",
	"local":               "SEMRUN_LOCAL",
	"lock-dir":            "SEMRUN_LOCK_DIR",
	"redis":               "SEMRUN_REDIS_URL",
	"prefix":              "SEMRUN_PREFIX",
	"connect-timeout":     "SEMRUN_CONNECT_TIMEOUT",
	"cluster":             "SEMRUN_CLUSTER",
	"sentinel-master":     "SEMRUN_SENTINEL_MASTER",
	"tls-ca":              "SEMRUN_TLS_CA",
	"tls-cert":            "SEMRUN_TLS_CERT",
	"tls-key":             "SEMRUN_TLS_KEY",
	"tls-server-name":     "SEMRUN_TLS_SERVER_NAME",
	"tls-insecure":        "SEMRUN_TLS_INSECURE",
	"redis-password-file": "SEMRUN_REDIS_PASSWORD_FILE",
	"config":              "SEMRUN_CONFIG",
}

// sources records where each flag's value came from, so that an error can
// name what the user wrote: --permits, SEMRUN_PERMITS or a config file key.
type sources map[string]string

// name is how a flag's setting is named in messages.
func (s sources) name(flag string) string {
	if n, ok := s[flag]; ok {
		return n
	}
	return "--" + flag
}

// show names a flag's setting with its value, as the user wrote it:
// "--permits 0", "SEMRUN_PERMITS=0" or "permits 0 in FILE".
func (s sources) show(flag string, value any) string {
	n, ok := s[flag]
	switch {
	case !ok:
		return fmt.Sprintf("--%s %v", flag, value)
	case strings.HasPrefix(n, "SEMRUN_"):
		return fmt.Sprintf("%s=%v", n, value)
	}
	return fmt.Sprintf("%s %v in %s", flag, value, strings.TrimPrefix(n, flag+" in "))
}

// rank tells how strongly a flag was set: 3 on the command line, 2 in the
// environment, 1 in a config file, 0 not at all.
func (s sources) rank(flags *pflag.FlagSet, flag string) int {
	n, ok := s[flag]
	switch {
	case flags.Changed(flag) && !ok:
		return 3
	case !ok:
		return 0
	case strings.HasPrefix(n, "SEMRUN_"):
		return 2
	}
	return 1
}

// applyConfig fills every flag the user did not set from, in turn, its
// SEMRUN_* variable and the config file, so the rest of the code reads
// plain flag values: flag > environment > config file > default.
func applyConfig(cmd *cobra.Command, src sources) error {
	flags := cmd.Flags()
	v := viper.New()
	for flag, env := range envNames {
		if flags.Lookup(flag) != nil {
			_ = v.BindEnv(flag, env)
		}
	}
	// The config file's own location may come from the environment.
	if f := flags.Lookup("config"); f != nil && !f.Changed {
		if path := os.Getenv(envNames["config"]); path != "" {
			if err := f.Value.Set(path); err != nil {
				return err
			}
			src["config"] = envNames["config"]
		}
	}
	file, err := readConfigFile(v, flags)
	if err != nil {
		return err
	}
	var errs []error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || !v.IsSet(f.Name) {
			return
		}
		src[f.Name] = fmt.Sprintf("%s in %s", f.Name, file)
		if env, ok := envNames[f.Name]; ok && os.Getenv(env) != "" { // as for viper, an empty variable is unset
			src[f.Name] = env
		}
		if err := f.Value.Set(v.GetString(f.Name)); err != nil {
			errs = append(errs, usageErrorf("%s: %v", src.show(f.Name, v.GetString(f.Name)), err))
		}
	})
	return errors.Join(errs...)
}

// readConfigFile reads --config when given, else the user's config file if
// there is one. It returns the file's name for messages.
func readConfigFile(v *viper.Viper, flags *pflag.FlagSet) (string, error) {
	path, explicit := "", false
	if f := flags.Lookup("config"); f != nil && f.Value.String() != "" {
		path, explicit = f.Value.String(), true
	} else if dir, err := os.UserConfigDir(); err == nil {
		path = filepath.Join(dir, "semrun", "config.yaml")
	}
	if path == "" {
		return "", nil
	}
	if _, err := os.Stat(path); err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		return "", usageErrorf("--config %s: %v", path, err)
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return "", usageErrorf("--config %s: %v", path, err)
	}
	return path, nil
}
