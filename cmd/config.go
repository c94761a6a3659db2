package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
	"log-format":          "SEMRUN_LOG_FORMAT",
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

// How strongly a setting was made; a stronger one wins.
const (
	rankDefault = iota
	rankSystemFile
	rankUserFile // the user's file, or the --config file that replaces it
	rankEnv
	rankFlag
)

// rank tells how strongly a flag was set: on the command line, in the
// environment, in the user's (or --config) file, in the system file, or
// not at all.
func (s sources) rank(flags *pflag.FlagSet, flag string) int {
	n, ok := s[flag]
	switch {
	case flags.Changed(flag) && !ok:
		return rankFlag
	case !ok:
		return rankDefault
	case strings.HasPrefix(n, "SEMRUN_"):
		return rankEnv
	case n == flag+" in "+SystemConfigFile:
		return rankSystemFile
	}
	return rankUserFile
}

// SystemConfigFile is the host's config file, under every user's; none
// when empty. It is a variable only so that tests can point it elsewhere.
var SystemConfigFile = "/etc/semrun/config.yaml"

// configFile is one config file that was read.
type configFile struct {
	path string
	v    *viper.Viper
}

// applyConfig fills every flag the user did not set from, in turn, its
// SEMRUN_* variable, the user's config file (or --config) and the system
// config file, so the rest of the code reads plain flag values:
// flag > environment > user file > system file > default. It also checks
// --log-format, which may come from any of these.
func applyConfig(cmd *cobra.Command, c *commonOptions) error {
	c.configured = true
	src := c.sources
	flags := cmd.Flags()
	env := viper.New()
	for flag, name := range envNames {
		if flags.Lookup(flag) != nil {
			_ = env.BindEnv(flag, name) // as for viper, an empty variable is unset
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
	// A file that cannot be read still lets the environment say how to
	// report that (--log-format).
	files, fileErr := readConfigFiles(flags, src)
	for _, f := range files {
		c.configFiles = append(c.configFiles, f.path)
		c.unknownSettings = append(c.unknownSettings, unknownSettings(cmd, f)...)
	}
	var errs []error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" {
			return
		}
		var from *viper.Viper
		if env.IsSet(f.Name) {
			from, src[f.Name] = env, envNames[f.Name]
		} else {
			for _, file := range files {
				if file.v.IsSet(f.Name) {
					from, src[f.Name] = file.v, fmt.Sprintf("%s in %s", f.Name, file.path)
					break
				}
			}
		}
		if from == nil {
			return
		}
		switch from.Get(f.Name).(type) {
		case []any, map[string]any:
			errs = append(errs, usageErrorf("%s: a list or a map, where one value goes", src.name(f.Name)))
			return
		}
		if err := f.Value.Set(from.GetString(f.Name)); err != nil {
			errs = append(errs, usageErrorf("%s: %v", src.show(f.Name, from.GetString(f.Name)), err))
		}
	})
	if flags.Lookup("log-format") != nil {
		if err := c.checkLogFormat(); err != nil {
			errs = append(errs, err)
		}
	}
	if fileErr != nil {
		return fileErr
	}
	if len(errs) > 0 {
		return errs[0] // one line: the next shows once this one is mended
	}
	return nil
}

// readConfigFiles reads the config files that exist, the strongest first:
// the --config file or else the user's, then the system's. --config
// replaces only the user's file: the system file is the host's, and says
// for every job on it where the fleet's permits live.
func readConfigFiles(flags *pflag.FlagSet, src sources) ([]configFile, error) {
	type candidate struct {
		path, shown string
		mustExist   bool // one named with --config
	}
	var candidates []candidate
	if f := flags.Lookup("config"); f != nil && f.Value.String() != "" {
		candidates = append(candidates, candidate{f.Value.String(), src.show("config", f.Value.String()), true})
	} else if path := userConfigFile(); path != "" {
		candidates = append(candidates, candidate{path, "config file " + path, false})
	}
	if SystemConfigFile != "" {
		candidates = append(candidates, candidate{SystemConfigFile, "config file " + SystemConfigFile, false})
	}
	var files []configFile
	for _, c := range candidates {
		v, err := readConfigFile(c.path, c.mustExist)
		if err != nil {
			return nil, usageErrorf("%s: %v", c.shown, err)
		}
		if v != nil {
			files = append(files, configFile{c.path, v})
		}
	}
	return files, nil
}

// userConfigFile is semrun/config.yaml in $XDG_CONFIG_HOME, else in
// ~/.config, on macOS too: that is where command-line tools keep their
// files, not ~/Library/Application Support. Empty without a home.
func userConfigFile() string {
	// The XDG spec says a relative path is to be ignored.
	if dir := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "semrun", "config.yaml")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "semrun", "config.yaml")
}

// readConfigFile reads one YAML config file; nil when it does not exist and
// need not. The error names no file: the caller says which it was.
func readConfigFile(path string, mustExist bool) (*viper.Viper, error) {
	b, _, err := readSmallFile(path, maxConfigFile)
	if err != nil {
		if !mustExist && errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, bare(err)
	}
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
		return nil, oneLine(bare(err))
	}
	return v, nil
}

// unknownSettings says of each key of f that no command of semrun takes
// that it is ignored, and which setting it may have meant: a typo there
// would otherwise change nothing, in silence.
func unknownSettings(cmd *cobra.Command, f configFile) []string {
	known := map[string]bool{}
	var shown []string
	all := []*cobra.Command{cmd.Root()}
	for i := 0; i < len(all); i++ {
		all = append(all, all[i].Commands()...)
		all[i].Flags().VisitAll(func(fl *pflag.Flag) {
			if !known[fl.Name] && !fl.Hidden {
				shown = append(shown, fl.Name)
			}
			known[fl.Name] = true
		})
	}
	var out []string
	for _, key := range f.v.AllKeys() {
		if known[key] {
			continue
		}
		msg := fmt.Sprintf("%s: unknown setting %q, ignored", f.path, key)
		if near := nearestName(key, shown); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		out = append(out, msg)
	}
	slices.Sort(out)
	return out
}

// maxConfigFile bounds a config file: a few settings take a few hundred
// bytes.
const maxConfigFile = 1 << 20

// bare drops what would repeat the file's name around an error: the
// operation and path of an *fs.PathError, viper's "While parsing config".
func bare(err error) error {
	var pathErr *fs.PathError
	var parseErr viper.ConfigParseError
	switch {
	case errors.As(err, &pathErr):
		return pathErr.Err
	case errors.As(err, &parseErr) && errors.Unwrap(parseErr) != nil:
		return errors.Unwrap(parseErr)
	}
	return err
}
