//go:build unix

package action_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// actionYAML is what the runner reads of action.yml.
type actionYAML struct {
	Inputs map[string]struct {
		Description string
		Default     *string
	} `yaml:"inputs"`
	Outputs map[string]struct{ Description string } `yaml:"outputs"`
	Runs    struct {
		Using, Main, Post string
		PostIf            string `yaml:"post-if"`
	} `yaml:"runs"`
}

func readActionYAML(t *testing.T) actionYAML {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "action.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var a actionYAML
	if err := yaml.Unmarshal(b, &a); err != nil {
		t.Fatalf("action.yml: %v", err)
	}
	return a
}

func recipes(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestActionYAMLIsWhatTheDocsSay: action.yml runs the scripts these tests
// run, on node 20, with a main and a post step; each input and output is
// in the docs' tables, and the docs name no other.
func TestActionYAMLIsWhatTheDocsSay(t *testing.T) {
	t.Parallel()
	a := readActionYAML(t)
	if a.Runs.Using != "node20" || a.Runs.Main != "action/main.js" || a.Runs.Post != "action/post.js" || a.Runs.PostIf != "always()" {
		t.Errorf("action.yml runs %+v, want node20 with action/main.js, and action/post.js always", a.Runs)
	}
	doc := recipes(t)
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(doc[strings.Index(doc, "| input | meaning |"):], -1) {
		documented = append(documented, m[1])
	}
	for name, in := range a.Inputs {
		if in.Description == "" {
			t.Errorf("action.yml: input %s has no description", name)
		}
		if !slices.Contains(documented, name) {
			t.Errorf("input %s is not in docs/recipes.md's table of inputs", name)
		}
	}
	for _, name := range documented {
		if _, ok := a.Inputs[name]; !ok {
			t.Errorf("docs/recipes.md's table names input %s, which action.yml has not", name)
		}
	}
	for name := range a.Outputs {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("output %s is not in docs/recipes.md", name)
		}
	}
}

// workflow is what the recipe's job says.
type workflow struct {
	Jobs map[string]struct {
		Steps []struct {
			Uses string            `yaml:"uses"`
			With map[string]string `yaml:"with"`
			Run  string            `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestRecipeRunsAsWritten runs the job of docs/recipes.md that uses the
// action, step by step, as the runner would (the secret set to the test's
// Redis; actions/checkout does nothing here): both steps run under the
// hold, with its token, and the post step gives the permit back.
func TestRecipeRunsAsWritten(t *testing.T) {
	t.Parallel()
	doc := recipes(t)
	var wf workflow
	for _, m := range regexp.MustCompile("(?ms)^```yaml\n(.*?)^```$").FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[1], "uses: semrun/semrun@") {
			if err := yaml.Unmarshal([]byte(m[1]), &wf); err != nil {
				t.Fatalf("docs/recipes.md: the action's job: %v", err)
			}
			break
		}
	}
	if len(wf.Jobs) != 1 {
		t.Fatalf("docs/recipes.md: no job that uses the action")
	}
	srv := startRedis(t)
	j := newJob(t, srv.URL(), true)
	inputs := defaultInputs(readActionYAML(t))
	for _, name := range []string{"migrate.sh", "integration-tests.sh"} {
		script := "#!/bin/sh\necho \"$0 $SEMRUN_HELD_KEY $SEMRUN_FENCING_TOKEN\" >> steps.log\n"
		if err := os.WriteFile(filepath.Join(j.dir, "work", name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secrets := strings.NewReplacer("${{ secrets.SEMRUN_REDIS_URL }}", srv.URL())
	var main stepResult
	for _, job := range wf.Jobs {
		for _, step := range job.Steps {
			switch {
			case strings.HasPrefix(step.Uses, "actions/checkout@"):
			case strings.HasPrefix(step.Uses, "semrun/semrun@"):
				for k, v := range step.With {
					inputs[k] = secrets.Replace(v)
				}
				main = j.hold(inputs, nil)
			case step.Run != "":
				if res := j.run(step.Run, nil); res.code != 0 {
					t.Fatalf("step %q: %v", step.Run, res)
				}
			default:
				t.Fatalf("a step this test cannot run: %+v", step)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(j.dir, "work", "steps.log"))
	if err != nil {
		t.Fatal(err)
	}
	token := main.outputs["token"]
	want := "./migrate.sh staging " + token + "\n./integration-tests.sh staging " + token + "\n"
	if token == "" || string(b) != want {
		t.Errorf("the steps wrote %q, want %q", b, want)
	}
	if post := j.action("post.js", inputs, nil, main.state); post.code != 0 || !strings.Contains(post.stdout, "gave the permit") {
		t.Errorf("post: %v", post)
	}
	if st := j.status("staging"); st.Held != 0 {
		t.Errorf("status after post: want nothing held: %+v", st)
	}
}

// defaultInputs are the inputs the runner gives for those a step leaves
// out: their defaults in action.yml.
func defaultInputs(a actionYAML) map[string]string {
	got := map[string]string{}
	for name, in := range a.Inputs {
		if in.Default != nil {
			got[name] = *in.Default
		}
	}
	return got
}
