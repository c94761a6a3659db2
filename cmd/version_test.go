package cmd

import (
	"runtime/debug"
	"testing"
)

// semrun version says which semrun this is however it was built: a
// release's stamp, a go install of a version, a build in a clone (its
// commit), or a build that recorded nothing, said so.
func TestVersionSaysWhichBuild(t *testing.T) {
	t.Parallel()
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: at}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name    string
		v, c, d string
		bi      *debug.BuildInfo
		want    string
	}{
		{"a release", "v1.2.3", "abc", "2026-12-01", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "semrun v1.2.3 commit abc built 2026-12-01"},
		{"go install @version", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "semrun v1.2.3"},
		{"go build in a clone", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261205150316-4311b327c393+dirty"}, Settings: vcs("4311b327c393", "2026-12-05T15:03:16Z", "true")},
			"semrun v0.0.0-20261205150316-4311b327c393+dirty commit 4311b327c393 built 2026-12-05T15:03:16Z"},
		{"an older Go in a clone", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("4311b327c393", "2026-12-05T15:03:16Z", "true")},
			"semrun (devel) commit 4311b327c393 with changes not committed built 2026-12-05T15:03:16Z"},
		{"go run", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"semrun (devel): built without version control information (go run, or -buildvcs=false), so its commit is unknown"},
		{"no build info", "", "", "", nil, "semrun (devel): built without version control information (go run, or -buildvcs=false), so its commit is unknown"},
	} {
		if got := versionOf(tc.v, tc.c, tc.d, tc.bi); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
