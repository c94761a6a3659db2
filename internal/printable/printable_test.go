package printable_test

import (
	"testing"

	"github.com/semrun/semrun/internal/printable"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"pdf-render.sh":             "pdf-render.sh",
		"héllo wörld ✓":             "héllo wörld ✓",
		"x\x1b[2J\x1b]0;PWNED\ay":   `x\x1b[2J\x1b]0;PWNED\x07y`,
		"a\nkey \"k\": 0 held":      `a\x0akey "k": 0 held`,
		"tab\there\r":               `tab\x09here\x0d`,
		"del\x7f c1\u009b[31m":      `del\x7f c1\u009b[31m`,
		"rtl\u202eevil\u2066\u2028": `rtl\u202eevil\u2066\u2028`,
		"bad utf8 \xff\xfe":         `bad utf8 \xff\xfe`,
		`back\slash stays`:          `back\slash stays`,
		"":                          "",
	} {
		if got := printable.String(in); got != want {
			t.Errorf("String(%q): got %q, want %q", in, got, want)
		}
	}
}
