//go:build unix

package localstore_test

import (
	"os"
	"os/user"
	"strconv"
	"testing"
)

// nobody is how messages name uid 65534, the owner tests give away to.
var nobody = func() string {
	if u, err := user.LookupId("65534"); err == nil {
		return "user " + u.Username
	}
	return "uid 65534"
}()

// needRoot skips a test that acts as two users, or fails it in CI, which
// runs as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("needs root, and CI runs as root")
	}
	t.Skip("needs root to act as two users")
}

// nameOf is how messages name uid.
func nameOf(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
