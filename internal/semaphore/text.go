package semaphore

import (
	"fmt"
	"unicode/utf8"
)

// Clip is s, text a store read back, cut to at most max bytes on a rune
// boundary, and saying how much was left out: a reason or a why that
// anyone who can write the store may have made as long as they liked
// stays one short line.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes more)", s[:cut], len(s)-cut)
}
