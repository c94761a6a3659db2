// Package printable makes text that came from elsewhere (a command name,
// a host, a lock file, a server's error) safe to print on a terminal: it
// escapes what could move the cursor, clear the screen, set a title, start
// a new line that looks like one of semrun's, or reorder text.
package printable

import (
	"fmt"
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
