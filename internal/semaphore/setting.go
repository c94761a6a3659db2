package semaphore

import "fmt"

// A Setting is one of the settings of a request or of a store, by the name
// its package gives it. Messages meant for the user name settings only
// through Names, so that a store never spells a flag: the command line
// knows what the user typed.
type Setting string

// The settings of a request.
const (
	KeySetting          Setting = "key"
	PermitsSetting      Setting = "permits"
	WeightSetting       Setting = "weight"
	TTLSetting          Setting = "lease"
	RestartFenceSetting Setting = "restart fence"
	MinReplicasSetting  Setting = "min replicas"
	MaxRuntimeSetting   Setting = "max runtime"
	MinHoldSetting      Setting = "min hold"
	MinHoldAfterSetting Setting = "min hold after"
	LabelSetting        Setting = "label"
)

// Names tell how the user knows each setting.
type Names interface {
	// Name is how the user set s, or how one sets it when they did not:
	// on a command line, the flag, variable or config file key that did.
	Name(s Setting) string
	// Ways lists the ways to set s to value, for a fix: on a command line,
	// its flag and its variable; value is left out when empty.
	Ways(s Setting, value string) string
}

// OwnNames names each setting by its own name: for callers without a
// language of their own, and tests.
type OwnNames struct{}

// Name is s itself.
func (OwnNames) Name(s Setting) string { return string(s) }

// Ways is s, with value.
func (OwnNames) Ways(s Setting, value string) string {
	if value == "" {
		return string(s)
	}
	return string(s) + " " + value
}

// SettingError is the value of a setting that a request or a store
// refuses, before anything is held.
type SettingError struct {
	Setting Setting
	// Value is the value refused, as it may be shown; nil when Err shows
	// it (a URL, without its password).
	Value any
	Err   error
}

func (e *SettingError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("%s: %v", e.Setting, e.Err)
	}
	return fmt.Sprintf("%s %v: %v", e.Setting, e.Value, e.Err)
}

func (e *SettingError) Unwrap() error { return e.Err }
