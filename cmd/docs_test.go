package cmd

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/semrun/semrun/internal/semaphore"
)

// The flag table of docs/configuration.md lists every flag a run takes,
// with the variable that sets it, and nothing else: a flag added, renamed
// or dropped fails here until the docs say so.
func TestDocsFlagTableMatchesTheFlags(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (`-.*?) \\| (.*?) \\|")
	flagName := regexp.MustCompile("`(?:-[a-z], )?--([a-z-]+)`")
	envName := regexp.MustCompile("`(SEMRUN_[A-Z_]+)`")
	documented := map[string]string{} // flag -> its variable as the table names it
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		flags := flagName.FindAllStringSubmatch(m[1], -1)
		envs := envName.FindAllStringSubmatch(m[2], -1)
		for i, f := range flags {
			env := ""
			if i < len(envs) {
				env = envs[i][1]
			}
			documented[f[1]] = env
		}
	}
	var got []string
	root := NewCmdRoot(System())
	all := pflag.NewFlagSet("semrun", pflag.ContinueOnError)
	all.AddFlagSet(root.Flags())
	all.AddFlagSet(root.PersistentFlags())
	all.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		got = append(got, f.Name)
		env, ok := documented[f.Name]
		switch {
		case !ok:
			t.Errorf("--%s is missing from the flag table of docs/configuration.md", f.Name)
		case env != envNames[f.Name]:
			t.Errorf("--%s: the table says variable %q, the flag is set by %q", f.Name, env, envNames[f.Name])
		}
	})
	for name := range documented {
		if !slices.Contains(got, name) {
			t.Errorf("docs/configuration.md lists --%s, which semrun has no more", name)
		}
	}
	if len(documented) < 20 {
		t.Errorf("read %d flags off the table: %s", len(documented), strings.Join(got, " "))
	}
}

// --help lists every flag a run takes, in its groups, with the variables
// and the exit statuses; version's lists no store flag, status's no run
// flag.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	root := NewCmdRoot(System())
	help := root.UsageString()
	all := pflag.NewFlagSet("semrun", pflag.ContinueOnError)
	all.AddFlagSet(root.Flags())
	all.AddFlagSet(root.PersistentFlags())
	all.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !strings.Contains(help, "--"+f.Name+" ") {
			t.Errorf("--help does not list --%s", f.Name)
		}
	})
	for _, want := range []string{"\nStore (Redis by default, or --local):\n", "\nTLS and passwords:\n", "SEMRUN_REDIS_URL", "Exit status: "} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, c := range root.Commands() {
		sub := c.UsageString()
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(sub, "--"+f.Name+" ") {
				t.Errorf("%s --help does not list its own --%s", c.Name(), f.Name)
			}
		})
		switch c.Name() {
		case "version":
			if strings.Contains(sub, "--redis") {
				t.Errorf("version --help lists the store's flags:\n%s", sub)
			}
		case "status", "doctor":
			if !strings.Contains(sub, "--redis ") || strings.Contains(sub, "--permits") {
				t.Errorf("%s --help: want the store's flags and no run flag:\n%s", c.Name(), sub)
			}
		}
	}
}

// status --json's fields are each named in docs/commands.md, where its
// example and field table are: a field added to the output fails here
// until the docs say what it is.
func TestDocsNameEveryStatusField(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var visit func(typ reflect.Type)
	visit = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ.PkgPath() != reflect.TypeFor[semaphore.KeyStatus]().PkgPath() {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name != "" && !strings.Contains(string(doc), `"`+name+`"`) && !strings.Contains(string(doc), "`"+name+"`") &&
				!strings.Contains(string(doc), "]."+name+"`") {
				t.Errorf("status --json's %s.%s (%q) is not named in docs/commands.md", typ.Name(), f.Name, name)
			}
			if name != "counts" { // the counters are docs/watching.md's
				visit(f.Type)
			}
		}
	}
	visit(reflect.TypeFor[semaphore.KeyStatus]())
}
