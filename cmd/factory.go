package cmd

import (
	"os"
	"runtime"
	"strings"
)

// Factory is all that semrun takes from the process it runs in: its
// streams, its environment, and where it looks for what nothing names.
// Main builds it from the process (System); tests build their own, so
// that no package variable changes under them and they run in parallel.
type Factory struct {
	Streams *IOStreams
	// Environ is the environment, as os.Environ gives it: semrun's
	// settings and passwords come from it, and the command gets it.
	Environ []string
	// SystemConfigFile is the host's config file, under every user's;
	// none when empty.
	SystemConfigFile string
	// DefaultRedisURL is where semrun looks for Redis when nothing names one.
	DefaultRedisURL string
	// ReapOrphans says that the process starts no child but the command:
	// every other child it has is one the command left behind, reaped as
	// it ends (runner.Spec.ReapOrphans). Tests that run semrun beside
	// children of their own (redis-server) leave it false.
	ReapOrphans bool
	// Self is the executable semrun acquire starts its keeper from;
	// empty: semrun's own.
	Self string
}

// System is the process's streams and environment, and the host's
// config file and default Redis.
func System() *Factory {
	return &Factory{
		Streams:          SystemStreams(),
		Environ:          os.Environ(),
		SystemConfigFile: "/etc/semrun/config.yaml",
		DefaultRedisURL:  "redis://127.0.0.1:6379/0",
		ReapOrphans:      true,
	}
}

// getenv is the value of the variable name, empty when it is not set; of
// two, the first counts, as for os.Getenv.
func (f *Factory) getenv(name string) string {
	for _, kv := range f.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// homeDir is the user's home directory as os.UserHomeDir finds it, read
// from this environment; empty when it names none.
func (f *Factory) homeDir() string {
	switch runtime.GOOS {
	case "windows":
		return f.getenv("USERPROFILE")
	case "plan9":
		return f.getenv("home")
	}
	return f.getenv("HOME")
}
