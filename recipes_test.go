package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
)

// The recipes that a script runs as written keep their text in it as files
// under doc/: each must be a code block of docs/recipes.md, letter for
// letter, so that the recipe a user copies is the one the script ran.
func TestRecipesRunAsWritten(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("docs", "recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```[a-z]*\n(.*?)^```$").FindAllStringSubmatch(string(doc), -1) {
		blocks = append(blocks, m[1])
	}
	scripts, err := filepath.Glob(filepath.Join("testdata", "script", "recipes*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, script := range scripts {
		a, err := txtar.ParseFile(script)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range a.Files {
			if !strings.HasPrefix(f.Name, "doc/") {
				continue
			}
			found++
			if !slices.Contains(blocks, string(f.Data)) {
				t.Errorf("%s: %s is in no code block of docs/recipes.md: the recipe and what the script runs differ", script, f.Name)
			}
		}
	}
	if found == 0 {
		t.Errorf("no doc/ file in %s", strings.Join(scripts, ", "))
	}
}
