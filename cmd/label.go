package cmd

import (
	"net/url"
	"strings"

	"github.com/semrun/semrun/internal/semaphore"
)

// label is the label status shows for this caller: --label's when set
// anywhere, empty being none; else the address of the CI job it runs in.
func (o *waitOptions) label() string {
	if o.set("label") {
		return o.labelText // checked with the request
	}
	return ciLabel(o.f.getenv)
}

// ciLabel is the address of the CI job semrun runs in, as the
// environment names it (GitHub Actions, GitLab CI, Buildkite, Jenkins);
// empty when it names none. It is a default: an address that is not a
// plausible one is no label, never a failed run.
func ciLabel(getenv func(string) string) string {
	if getenv("GITHUB_ACTIONS") == "true" {
		server, repo, run := getenv("GITHUB_SERVER_URL"), getenv("GITHUB_REPOSITORY"), getenv("GITHUB_RUN_ID")
		if server != "" && repo != "" && isDigits(run) {
			return jobURL(strings.TrimSuffix(server, "/")+"/"+repo+"/actions/runs/"+run, "")
		}
	}
	if u := getenv("CI_JOB_URL"); u != "" { // GitLab
		return jobURL(u, "")
	}
	if u := getenv("BUILDKITE_BUILD_URL"); u != "" {
		// Buildkite's page of a build shows one of its jobs at #<job id>.
		return jobURL(u, getenv("BUILDKITE_JOB_ID"))
	}
	// BUILD_URL alone is too common a name to be Jenkins's; Jenkins sets
	// both or neither (they need its root URL configured).
	if u := getenv("BUILD_URL"); u != "" && getenv("JENKINS_URL") != "" {
		return jobURL(u, "")
	}
	return ""
}

// jobURL is raw, an http(s) URL from the environment, as a label: with
// job as its fragment when that is an id (letters, digits, dashes), and
// without its userinfo, query or own fragment, which a job's address
// needs not and which may hold a secret (user:token@, ?private_token=),
// shown to whoever can read the store. Empty for a URL that is not a
// plausible one, or too long.
func jobURL(raw, job string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	if isID(job) {
		u.Fragment = job
	}
	s := u.String()
	if s == "" || semaphore.CheckLabel(s) != nil {
		return ""
	}
	return s
}

// isDigits tells a run id: 1 to 20 digits.
func isDigits(s string) bool {
	return s != "" && len(s) <= 20 && strings.Trim(s, "0123456789") == ""
}

// isID tells a job id: 1 to 64 letters, digits and dashes (a UUID).
func isID(s string) bool {
	return s != "" && len(s) <= 64 && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
	}) < 0
}
