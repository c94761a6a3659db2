package cmd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/semaphore"
)

// An event is one line, whatever a store read back: nothing in it can
// drive a terminal or start a line of its own, in text or in JSON.
func TestEventPrintedEscaped(t *testing.T) {
	t.Parallel()
	const evil = "\x1b]0;owned\a\x1b[2J\u202e\u2028\n\x9b31m\xff"
	exit := 1
	e := semaphore.Event{
		Time: time.Now(), Key: "k" + evil, Kind: semaphore.EventKind("grant" + evil), Holder: "H" + evil,
		HolderInfo: semaphore.HolderInfo{Host: "h" + evil, PID: 1, Command: "c" + evil, Label: "l" + evil},
		ExitStatus: &exit, Reason: "r" + evil,
	}
	var text strings.Builder
	if err := printEvent(&text, e); err != nil {
		t.Fatal(err)
	}
	var js strings.Builder
	if err := json.NewEncoder(printable.JSON(&js)).Encode(eventJSON{Event: e, Label: e.Label}); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"text": text.String(), "JSON": js.String()} {
		line := strings.TrimSuffix(out, "\n")
		if i := strings.IndexFunc(line, func(r rune) bool {
			return r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0 || r == 0x202e || r == 0x2028 || r == '\uFFFD' && what == "text"
		}); i >= 0 || strings.Contains(line, "\xff") {
			t.Errorf("%s: got %q, want every control character, separator and bidi control escaped", what, out)
		}
	}
}
