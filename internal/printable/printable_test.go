package printable_test

import (
	"encoding/json"
	"strings"
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

func TestJSON(t *testing.T) {
	var b strings.Builder
	in := map[string]string{"command": "rtl\u202eevil\u2066 c1\u009b[31m del\x7f \x1b esc", "host": "héllo ✓"}
	if err := json.NewEncoder(printable.JSON(&b)).Encode(in); err != nil {
		t.Fatal(err)
	}
	want := `{"command":"rtl\u202eevil\u2066 c1\u009b[31m del\u007f \u001b esc","host":"héllo ✓"}` + "\n"
	if b.String() != want {
		t.Errorf("JSON: got %q, want %q", b.String(), want)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil || back["command"] != in["command"] {
		t.Errorf("JSON read back: got %q (%v), want %q", back["command"], err, in["command"])
	}
}
