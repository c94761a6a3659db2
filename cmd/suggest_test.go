package cmd

import "testing"

func TestNearestName(t *testing.T) {
	t.Parallel()
	names := []string{"permits", "ttl", "tls-ca", "verbose", "status"}
	for _, tc := range []struct{ typed, want string }{
		{"permit", "permits"}, {"stauts", "status"}, {"verbos", "verbose"},
		{"tls.ca", "tls-ca"}, {"no-such-setting", ""}, {"", ""},
	} {
		if got := nearestName(tc.typed, names); got != tc.want {
			t.Errorf("nearestName(%q): got %q, want %q", tc.typed, got, tc.want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting): got %d, want 3", d)
	}
}
