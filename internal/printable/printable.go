// Package printable makes text that came from elsewhere (a command name,
// a host, a lock file, a server's error) safe to print on a terminal: it
// escapes what could move the cursor, clear the screen, set a title, start
// a new line that looks like one of semrun's, or reorder text.
package printable

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String is s with control characters (C0, DEL, C1), line and paragraph
// separators, bidirectional controls and bytes that are not UTF-8 escaped
// as Go writes them in a string: \x1b, \u2028, \xff. A backslash is left
// as it is. s is returned as it is when it has nothing to escape.
func String(s string) string {
	i := strings.IndexFunc(s, escaped)
	if i < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && escaped(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case escaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func escaped(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, 0x80 <= r && r < 0xa0: // C0, DEL, C1
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case 0x202a <= r && r <= 0x202e, 0x2066 <= r && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c: // bidi
		return true
	}
	return false
}

// JSON is w for JSON that encoding/json (or log/slog) writes: it escapes
// what they leave raw in strings and a terminal acts on, DEL, C1 controls
// and bidirectional controls, as \u escapes, which mean the same to
// whatever reads the JSON. What they write needs no other care: they
// escape C0 controls and the line separators, and make bytes that are not
// UTF-8 U+FFFD. Each Write must hold whole runes, as theirs do.
func JSON(w io.Writer) io.Writer { return jsonWriter{w} }

type jsonWriter struct{ w io.Writer }

func (j jsonWriter) Write(p []byte) (int, error) {
	if !bytes.ContainsFunc(p, jsonEscaped) {
		return j.w.Write(p)
	}
	b := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if jsonEscaped(r) {
			b = fmt.Appendf(b, `\u%04x`, r)
		} else {
			b = append(b, p[i:i+size]...)
		}
		i += size
	}
	if _, err := j.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonEscaped tells the runes JSON escapes: those escaped prints too, but
// for C0 controls, which encoding/json never leaves raw in a string, and
// which outside one are its own newlines and indentation.
func jsonEscaped(r rune) bool { return r >= 0x7f && r != utf8.RuneError && escaped(r) }
