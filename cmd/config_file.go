package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/semrun/semrun/internal/settingfile"
)

// readConfigFiles reads the config files that exist, the strongest first:
// the --config file (config, set as src says) or else the user's, then
// the system's. --config replaces only the user's file: the system file
// is the host's, and says for every job on it where the fleet's permits
// live.
func readConfigFiles(config string, src source, f *Factory) ([]configFile, error) {
	type candidate struct {
		path, shown string
		origin      origin
		mustExist   bool // one named with --config
	}
	var candidates []candidate
	if config != "" {
		candidates = append(candidates, candidate{config, sources{"config": src}.show("config", config), fromUserFile, true})
	} else if path := userConfigFile(f); path != "" {
		candidates = append(candidates, candidate{path, "config file " + path, fromUserFile, false})
	}
	if f.SystemConfigFile != "" {
		candidates = append(candidates, candidate{f.SystemConfigFile, "config file " + f.SystemConfigFile, fromSystemFile, false})
	}
	var files []configFile
	for _, c := range candidates {
		v, err := readConfigFile(c.path, c.mustExist)
		if err != nil {
			return nil, usageErrorf("%s: %v", c.shown, err)
		}
		if v != nil {
			files = append(files, configFile{c.path, c.origin, v})
		}
	}
	return files, nil
}

// userConfigFile is semrun/config.yaml in $XDG_CONFIG_HOME, else in
// ~/.config, on macOS too: that is where command-line tools keep their
// files, not ~/Library/Application Support. Empty without a home.
func userConfigFile(f *Factory) string {
	// The XDG spec says a relative path is to be ignored.
	if dir := f.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "semrun", "config.yaml")
	}
	home := f.homeDir()
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "semrun", "config.yaml")
}

// readConfigFile reads one YAML config file; nil when it does not exist and
// need not. The error names no file: the caller says which it was.
func readConfigFile(path string, mustExist bool) (*viper.Viper, error) {
	b, _, err := settingfile.Read(path, maxConfigFile)
	if err != nil {
		if !mustExist && errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err // settingfile's errors name no file
	}
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
		return nil, oneLine(parseError(err))
	}
	return v, nil
}

// unknownSettings says of each key of f that no command of semrun takes
// that it is ignored, and which setting it may have meant: a typo there
// would otherwise change nothing, in silence.
func unknownSettings(root *cobra.Command, f configFile) []string {
	known := map[string]bool{}
	var shown []string
	visitFlags(root, func(fl *pflag.Flag) {
		if !known[fl.Name] && !fl.Hidden {
			shown = append(shown, fl.Name)
		}
		known[fl.Name] = true
	})
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

// parseError drops viper's "While parsing config" around a YAML error:
// the caller names the file.
func parseError(err error) error {
	var parseErr viper.ConfigParseError
	if errors.As(err, &parseErr) && errors.Unwrap(parseErr) != nil {
		return errors.Unwrap(parseErr)
	}
	return err
}
