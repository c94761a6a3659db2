package cmd

import (
	"strings"
	"testing"
)

// The default label is the CI job's address as its environment names it,
// never a secret in it, and nothing rather than something doubtful.
func TestCILabel(t *testing.T) {
	t.Parallel()
	github := []string{"GITHUB_ACTIONS=true", "GITHUB_SERVER_URL=https://github.com", "GITHUB_REPOSITORY=acme/web", "GITHUB_RUN_ID=123456"}
	long := "https://ci.example/" + strings.Repeat("x", 200)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"none", nil, ""},
		{"a CI that names no job", []string{"CI=true"}, ""},
		{"GitHub Actions", github, "https://github.com/acme/web/actions/runs/123456"},
		{"GitHub Enterprise, a slash after the server", []string{"GITHUB_ACTIONS=true", "GITHUB_SERVER_URL=https://ghe.example/", "GITHUB_REPOSITORY=a/b", "GITHUB_RUN_ID=7"}, "https://ghe.example/a/b/actions/runs/7"},
		{"GitHub variables without GITHUB_ACTIONS", github[1:], ""},
		{"GitHub without a run id", github[:3], ""},
		{"GitHub with a run id that is not one", append(github[:3:3], "GITHUB_RUN_ID=1/../x"), ""},
		{"GitLab", []string{"CI_JOB_URL=https://gitlab.example/g/p/-/jobs/42"}, "https://gitlab.example/g/p/-/jobs/42"},
		{"GitHub first", append([]string{"CI_JOB_URL=https://gitlab.example/j/1"}, github...), "https://github.com/acme/web/actions/runs/123456"},
		{"GitLab when GitHub's are not whole", append([]string{"CI_JOB_URL=https://gitlab.example/j/1"}, github[:3]...), "https://gitlab.example/j/1"},
		{"Buildkite, its job", []string{"BUILDKITE_BUILD_URL=https://buildkite.com/acme/web/builds/9", "BUILDKITE_JOB_ID=0190b6e4-6d7c-4a52-9d6b-2a5e0f1c3e11"}, "https://buildkite.com/acme/web/builds/9#0190b6e4-6d7c-4a52-9d6b-2a5e0f1c3e11"},
		{"Buildkite, no job", []string{"BUILDKITE_BUILD_URL=https://buildkite.com/acme/web/builds/9"}, "https://buildkite.com/acme/web/builds/9"},
		{"Buildkite, a job id that is not one", []string{"BUILDKITE_BUILD_URL=https://buildkite.com/a/b/builds/9", "BUILDKITE_JOB_ID=x y"}, "https://buildkite.com/a/b/builds/9"},
		{"Jenkins", []string{"JENKINS_URL=https://jenkins.example/", "BUILD_URL=https://jenkins.example/job/web/15/"}, "https://jenkins.example/job/web/15/"},
		{"BUILD_URL without Jenkins", []string{"BUILD_URL=https://other.example/15"}, ""},
		{"userinfo dropped", []string{"CI_JOB_URL=https://user:s3cret@gitlab.example/j/1"}, "https://gitlab.example/j/1"},
		{"a user alone dropped", []string{"JENKINS_URL=x", "BUILD_URL=http://bot@jenkins.example/job/a/1/"}, "http://jenkins.example/job/a/1/"},
		{"GitHub server's userinfo dropped", []string{"GITHUB_ACTIONS=true", "GITHUB_SERVER_URL=https://x:tok@ghe.example", "GITHUB_REPOSITORY=a/b", "GITHUB_RUN_ID=7"}, "https://ghe.example/a/b/actions/runs/7"},
		{"query and fragment dropped", []string{"CI_JOB_URL=https://gitlab.example/j/1?private_token=s3cret#frag"}, "https://gitlab.example/j/1"},
		{"not http", []string{"CI_JOB_URL=ftp://gitlab.example/j/1"}, ""},
		{"no host", []string{"CI_JOB_URL=https:///j/1"}, ""},
		{"not a URL", []string{"CI_JOB_URL=job 42"}, ""},
		{"a control character", []string{"CI_JOB_URL=https://gitlab.example/j/1\x1b[2J"}, ""},
		{"too long", []string{"CI_JOB_URL=" + long}, ""},
		{"too long once its userinfo is gone is fine", []string{"CI_JOB_URL=https://" + strings.Repeat("u", 300) + "@gitlab.example/j/1"}, "https://gitlab.example/j/1"},
	} {
		f := &Factory{Environ: tc.env}
		if got := ciLabel(f.getenv); got != tc.want {
			t.Errorf("%s: ciLabel: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
