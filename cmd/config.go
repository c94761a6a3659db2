package cmd

import (
	"fmt"
	"io"
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
	"revoked-exit-code":   "SEMRUN_REVOKED_EXIT_CODE",
	"on-lost":             "SEMRUN_ON_LOST",
	"kill-after":          "SEMRUN_KILL_AFTER",
	"max-runtime":         "SEMRUN_MAX_RUNTIME",
	"warn-after":          "SEMRUN_WARN_AFTER",
	"min-hold":            "SEMRUN_MIN_HOLD",
	"min-hold-after":      "SEMRUN_MIN_HOLD_AFTER",
	"restart-fence":       "SEMRUN_RESTART_FENCE",
	"min-replicas":        "SEMRUN_MIN_REPLICAS",
	"label":               "SEMRUN_LABEL",
	"priority":            "SEMRUN_PRIORITY",
	"priority-age":        "SEMRUN_PRIORITY_AGE",
	"supersede":           "SEMRUN_SUPERSEDE",
	"local":               "SEMRUN_LOCAL",
	"lock-dir":            "SEMRUN_LOCK_DIR",
	"redis":               "SEMRUN_REDIS_URL",
	"prefix":              "SEMRUN_PREFIX",
	"connect-timeout":     "SEMRUN_CONNECT_TIMEOUT",
	"events":              "SEMRUN_EVENTS",
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

// origin is where a setting's value came from; a later origin is
// stronger, and wins: flag > environment > user file > system file >
// default.
type origin int

const (
	fromDefault origin = iota
	fromSystemFile
	fromUserFile // the user's file, or the --config file that replaces it
	fromEnv
	fromFlag
)

// source is where one flag's value came from.
type source struct {
	origin origin
	// variable is the variable's name, from the environment.
	variable string
	// file is the file's path, from a config file.
	file string
}

// sources records where each flag's value came from, so that an error can
// name what the user wrote: --permits, SEMRUN_PERMITS or a config file key.
type sources map[string]source

// origin is where flag's value came from.
func (s sources) origin(flag string) origin { return s[flag].origin }

// name is how a flag's setting is named in messages.
func (s sources) name(flag string) string {
	switch src := s[flag]; src.origin {
	case fromEnv:
		return src.variable
	case fromUserFile, fromSystemFile:
		return flag + " in " + src.file
	}
	return "--" + flag
}

// show names a flag's setting with its value, as the user wrote it:
// "--permits 0", "SEMRUN_PERMITS=0" or "permits 0 in FILE".
func (s sources) show(flag string, value any) string {
	switch src := s[flag]; src.origin {
	case fromEnv:
		return fmt.Sprintf("%s=%v", src.variable, value)
	case fromUserFile, fromSystemFile:
		return fmt.Sprintf("%s %v in %s", flag, value, src.file)
	}
	return fmt.Sprintf("--%s %v", flag, value)
}

// configFile is one config file that was read.
type configFile struct {
	path   string
	origin origin
	v      *viper.Viper
}

// settings are the values that the environment and the config files give,
// read once, before the command line is parsed, so that even a command
// line that does not parse is answered in the --log-format they choose.
type settings struct {
	getenv func(string) string
	// files are the config files read, the strongest first.
	files []configFile
	// err is why a config file could not be read: the commands that read
	// the settings fail with it.
	err error
	// unknown are the warnings about config file keys no command takes.
	unknown []string
	// jsonLines: semrun's own lines are JSON, as --log-format json says on
	// the command line, else in the environment or a config file. Any
	// other value than json or text gives text, and is itself an error
	// for the commands that read the settings.
	jsonLines bool
}

// readSettings reads the environment and the config files that apply to
// args, once: --config and --log-format are looked for in args before
// cobra parses them. root is the command tree, whose flags are the
// settings a config file may have.
func readSettings(root *cobra.Command, args []string, f *Factory) *settings {
	// The help flag and the completion command, which cobra adds as it
	// executes, take settings too: add them now, as it would.
	root.InitDefaultHelpFlag()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	s := &settings{getenv: f.getenv}
	if c, _, err := root.Find(args); err == nil && !needsConfig(c) {
		return s // version and the completions read no settings
	}
	config, logFormat, given := scanArgs(root, args)
	configFlag := source{origin: fromFlag}
	if !given["config"] {
		config, configFlag = s.getenv(envNames["config"]), source{origin: fromEnv, variable: envNames["config"]}
	}
	s.files, s.err = readConfigFiles(config, configFlag, f)
	s.unknown = unknownVariables(f.Environ, root)
	for _, file := range s.files {
		s.unknown = append(s.unknown, unknownSettings(root, file)...)
	}
	if !given["log-format"] {
		_, logFormat, _, _ = s.lookup("log-format")
	}
	s.jsonLines = logFormat == "json"
	return s
}

// scanArgs finds --config and --log-format in args as cobra will parse
// them, before it does: every flag of every command is known to the scan,
// so that a value that looks like a flag (-k --config) is read as the
// value it is. given says which of the two args set.
func scanArgs(root *cobra.Command, args []string) (config, logFormat string, given map[string]bool) {
	scan := pflag.NewFlagSet("settings", pflag.ContinueOnError)
	scan.ParseErrorsWhitelist.UnknownFlags = true // a subcommand's, or a typo: cobra says
	scan.SetOutput(io.Discard)
	scan.Usage = func() {}
	values := map[string]*scanned{}
	visitFlags(root, func(f *pflag.Flag) {
		if scan.Lookup(f.Name) != nil {
			return
		}
		short := f.Shorthand
		if short != "" && scan.ShorthandLookup(short) != nil {
			short = ""
		}
		values[f.Name] = &scanned{kind: f.Value.Type()}
		scan.AddFlag(&pflag.Flag{Name: f.Name, Shorthand: short, Value: values[f.Name], NoOptDefVal: f.NoOptDefVal})
	})
	_ = scan.Parse(args) // what does not parse is cobra's to say
	given = map[string]bool{"config": scan.Changed("config"), "log-format": scan.Changed("log-format")}
	return values["config"].text, values["log-format"].text, given
}

// scanned is a flag's value as scanArgs reads it: the text only.
type scanned struct{ kind, text string }

func (v *scanned) Set(text string) error { v.text = text; return nil }
func (v *scanned) String() string        { return v.text }
func (v *scanned) Type() string          { return v.kind }

// visitFlags calls fn with each flag of root and of every command under it;
// a flag two commands share comes once a command. Before the command line
// is parsed, a command's persistent flags are not among its Flags yet.
func visitFlags(root *cobra.Command, fn func(*pflag.Flag)) {
	all := []*cobra.Command{root}
	for i := 0; i < len(all); i++ {
		all = append(all, all[i].Commands()...)
		all[i].Flags().VisitAll(fn)
		all[i].PersistentFlags().VisitAll(fn)
	}
}

// lookup is flag's value from the environment or a config file, as read
// (a file's may be a list or a map) and as text, and where it came from;
// ok is false when none sets it.
func (s *settings) lookup(flag string) (raw any, text string, src source, ok bool) {
	if name, ok := envNames[flag]; ok {
		// As for viper, an empty variable is unset.
		if v := s.getenv(name); v != "" {
			return v, v, source{origin: fromEnv, variable: name}, true
		}
	}
	if flag == "config" {
		return nil, "", source{}, false // a file cannot name another
	}
	for _, file := range s.files {
		if file.v.IsSet(flag) {
			return file.v.Get(flag), file.v.GetString(flag), source{origin: file.origin, file: file.path}, true
		}
	}
	return nil, "", source{}, false
}

// apply fills every flag of cmd the user did not set on the command line
// from its SEMRUN_* variable, else the user's config file (or --config),
// else the system config file, so the rest of the code reads plain flag
// values, and records in src where each value came from.
func (s *settings) apply(cmd *cobra.Command, src sources) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			src[f.Name] = source{origin: fromFlag}
			return
		}
		raw, text, from, ok := s.lookup(f.Name)
		if !ok {
			return
		}
		src[f.Name] = from
		switch raw.(type) {
		case []any, map[string]any:
			errs = append(errs, usageErrorf("%s: a list or a map, where one value goes", src.name(f.Name)))
			return
		}
		if err := f.Value.Set(text); err != nil {
			errs = append(errs, usageErrorf("%s: %v", src.show(f.Name, text), err))
		}
	})
	if s.err != nil {
		return s.err
	}
	if len(errs) > 0 {
		return errs[0] // one line: the next shows once this one is mended
	}
	return nil
}

// unknownVariables says of each SEMRUN_* variable of environ that semrun
// does not read that it is ignored, and which one it may have meant: a
// typo (SEMRUN_PERMIT) would otherwise change nothing, in silence. The
// variables semrun gives its command are its own, not settings.
func unknownVariables(environ []string, root *cobra.Command) []string {
	// The flags that have no variable, by the name one would have.
	noVariable := map[string]string{}
	visitFlags(root, func(f *pflag.Flag) {
		if _, ok := envNames[f.Name]; !ok {
			noVariable["SEMRUN_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))] = f.Name
		}
	})
	known := []string{envRedisPassword}
	for _, name := range envNames {
		known = append(known, name)
	}
	var out []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		// As for the settings, an empty variable is unset.
		if value == "" || !strings.HasPrefix(name, "SEMRUN_") || slices.Contains(known, name) || childVariable(name) {
			continue
		}
		msg := fmt.Sprintf("%s: unknown variable, ignored", name)
		if flag, ok := noVariable[name]; ok {
			msg += fmt.Sprintf(" (--%s has no variable: give it on the command line or in a config file)", flag)
		} else if near := nearestName(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		out = append(out, msg)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
