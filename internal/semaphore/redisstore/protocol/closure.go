package protocol

import (
	"fmt"
	"strings"
	"sync"
)

// Redis runs lib.lua's top level at every call of a script: each local
// function it defines is made anew, whether the script calls it or not
// (a renewal paid for the hand-over's and the events' functions). So each
// script carries only the part of lib.lua it needs: the pieces (libPiece)
// that define what its own file uses, what those use, and so on, which
// libNeeds lists by name. The other pieces' lines are left blank, so that
// a line of lib.lua keeps its number in every script (Script.Wrap).
//
// libNeeds is kept by hand, not found at each start: reading lib.lua's
// words costs a run about 80µs before it can ask for a permit.
// TestLibNeedsAreWhatScriptsUse finds each script's needs from the
// sources and says what to write when they changed, and
// TestScriptsDefineWhatTheyCall compiles each script to check that it
// calls nothing it lacks.

// libPiece is one top-level statement of lib.lua, with the comment above
// it: its text, how many lines it takes, and the names it defines (none
// for a statement made for its effect, which every script keeps).
type libPiece struct {
	text    string
	lines   int
	defines []string
}

// libSplit is lib.lua in pieces, read once.
var libSplit = sync.OnceValues(func() ([]libPiece, error) { return libPieces(libLua) })

// libPieces splits lib into pieces: a piece starts at a line that starts
// in the first column (but "end", and comments, which go with the
// statement below them), and runs until the next; a local function runs to
// its "end" in the first column.
func libPieces(lib string) ([]libPiece, error) {
	var pieces []libPiece
	start, at, line := 0, 0, 1
	// nextLine moves at past its line.
	nextLine := func() {
		if i := strings.IndexByte(lib[at:], '\n'); i >= 0 {
			at += i + 1
		} else {
			at = len(lib)
		}
		line++
	}
	this := func() string {
		if i := strings.IndexByte(lib[at:], '\n'); i >= 0 {
			return lib[at : at+i]
		}
		return lib[at:]
	}
	for at < len(lib) {
		l := this()
		if l == "" || l[0] == ' ' || strings.HasPrefix(l, "--") || l == "end" {
			nextLine()
			continue
		}
		names, err := defined(l)
		if err != nil {
			return nil, fmt.Errorf("lib.lua:%d: %w", line, err)
		}
		nextLine()
		if strings.HasPrefix(l, "local function ") {
			first := line - 1
			for at < len(lib) && this() != "end" {
				if s := this(); s != "" && s[0] != ' ' && !strings.HasPrefix(s, "--") {
					at = len(lib) // another statement: this function ended on a line of its own
				} else {
					nextLine()
				}
			}
			if at == len(lib) {
				return nil, fmt.Errorf("lib.lua:%d: %q has no end in the first column", first, l)
			}
			nextLine()
		}
		for at < len(lib) && (lib[at] == '\n' || lib[at] == ' ') {
			nextLine()
		}
		text := lib[start:at]
		pieces = append(pieces, libPiece{text: text, lines: strings.Count(text, "\n"), defines: names})
		start = at
	}
	if start < len(lib) { // comments after the last statement
		pieces = append(pieces, libPiece{text: lib[start:], lines: strings.Count(lib[start:], "\n")})
	}
	return pieces, nil
}

// defined is what a statement in the first column defines: the names of
// "local function NAME(" or "local A, B = ...", none for any other.
func defined(l string) ([]string, error) {
	if name, ok := strings.CutPrefix(l, "local function "); ok {
		name, _, ok = strings.Cut(name, "(")
		if !ok || !isName(name) {
			return nil, fmt.Errorf("no name in %q", l)
		}
		return []string{name}, nil
	}
	names, ok := strings.CutPrefix(l, "local ")
	if !ok {
		return nil, nil
	}
	names, _, _ = strings.Cut(names, "=")
	var out []string
	for n := range strings.SplitSeq(names, ",") {
		n = strings.TrimSpace(n)
		if !isName(n) {
			return nil, fmt.Errorf("no name in %q", l)
		}
		out = append(out, n)
	}
	return out, nil
}

// isName tells a Lua name.
func isName(s string) bool {
	if s == "" || isDigit(s[0]) {
		return false
	}
	for i := range len(s) {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNameByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isDigit(c)
}

// libFor is lib.lua as the script named name needs it (libNeeds): the
// pieces that define a name it needs, and those that define none; the
// other pieces' lines blank.
func libFor(name string) (string, error) {
	pieces, err := libSplit()
	if err != nil {
		return "", err
	}
	list, ok := libNeeds[name]
	if !ok {
		return "", fmt.Errorf("%s: not in libNeeds", name)
	}
	needs := map[string]bool{}
	for n := range strings.FieldsSeq(list) {
		needs[n] = true
	}
	var b strings.Builder
	b.Grow(len(libLua))
	for _, p := range pieces {
		keep := len(p.defines) == 0
		for _, n := range p.defines {
			keep = keep || needs[n]
		}
		if keep {
			b.WriteString(p.text)
		} else {
			b.WriteString(strings.Repeat("\n", p.lines))
		}
	}
	return b.String(), nil
}

// libNeeds is what each script needs of lib.lua, by the names of its
// pieces (see TestLibNeedsAreWhatScriptsUse).
var libNeeds = map[string]string{
	"acquire.lua": "COUNTERS args argsRead bad capacity claimed cool coolUntil coolsUntil counted dropWaiter dropped earliest event eventsKey fence fenceAsked fenceChecked fenceLeft fenceRead fenced field freeSlots fresh grant handed handoff holderEvent holderRecord holdersKey holdsSlot inLine infoKey keepalive leasesKey lost manyCaller member metaOf newLog now num place policy policyKey policyRead publicID pushed queueKey quiet readHolder readWaiter rebase record recordTerms remember removeHolder reply restartedAt silence slotList slotNames statsKey sweep t takeSlots terms tokenKey turnRecord used waiterRecord waitersKey waiting wakeIn wakekey wrongType",
	"renew.lua":   "args argsRead claimed cool coolUntil coolsUntil fence fenceAsked fenceLeft fenceRead field holdersKey inLine infoKey keepalive leasesKey member now num policyKey publicID pushed queueKey readHolder rebase recordTerms remember reply revokedMark silence slotList t terms tokenKey waitersKey waiting",
	"release.lua": "COUNTERS args argsRead bad capacity claimed cool coolUntil coolsUntil counted dropWaiter dropped event eventsKey fence fenceAsked fenceChecked fenceLeft fenceRead fenced field freeSlots fresh grant handed handoff holderEvent holderRecord holdersKey holdsSlot inLine infoKey keepalive leasesKey lost manyCaller member metaOf newLog now num policy policyKey policyRead publicID pushed queueKey quiet readHolder readWaiter rebase record released removeHolder reply restartedAt silence slotList slotNames statsKey sweep t takeSlots terms tokenKey turnRecord used waitersKey waiting wakekey wrongType",
	"status.lua":  "args argsRead bad capacity dropped eventsKey fence fenceAsked fenceChecked fenceLeft fencePeek fenceRead fenced field holdersKey inLine infoKey leasesKey now num policy policyKey policyRead publicID pushed queueKey readHolder readWaiter reply restartedAt silence slotList statsKey t tokenKey used waitersKey waiting",
	"watch.lua":   "args argsRead field holdersKey infoKey leasesKey now num queueKey reply t tokenKey waitersKey wakekey",
	"hold.lua":    "COUNTERS args argsRead bad capacity claimed cool coolUntil coolsUntil counted dropWaiter dropped event eventsKey fence fenceAsked fenceChecked fenceLeft fenceRead fenced field freeSlots fresh grant handed handoff holderEvent holderRecord holdersKey holdsSlot inLine infoKey keepalive leasesKey lost manyCaller member metaOf newLog now num policy policyKey policyRead publicID pushed queueKey quiet readHolder readWaiter rebase record recordTerms released remember removeHolder reply restartedAt revokedMark silence slotList slotNames statsKey sweep t takeSlots terms tokenKey turnRecord used waitersKey waiting wakekey wrongType",
	"key.lua":     "COUNTERS args argsRead bad capacity claimed cool coolUntil coolsUntil counted dropWaiter dropped event eventsKey fence fenceAsked fenceChecked fenceLeft fenceRead fenced field freeSlots fresh grant handed handoff holderEvent holderRecord holdersKey holdsSlot inLine infoKey keepalive leasesKey lost manyCaller metaOf newLog now num policy policyKey policyRead publicID pushed queueKey quiet readHolder readWaiter rebase record removeHolder reply restartedAt silence slotList slotNames statsKey sweep t takeSlots terms tokenKey turnRecord used waitersKey waiting wakekey wrongType",
	"many.lua":    "COUNTERS args argsRead bad capacity claimed cool coolUntil coolsUntil counted dropWaiter dropped earliest event eventsKey fence fenceAsked fenceChecked fenceLeft fenceRead fenced field freeSlots fresh grant handed handoff holderEvent holderRecord holdersKey holdsSlot inLine infoKey keepalive leasesKey lost manyCaller member metaOf newLog now num place policy policyKey policyRead publicID pushed queueKey quiet readHolder readWaiter rebase record recordTerms remember removeHolder reply restartedAt silence slotList slotNames statsKey sweep t takeSlots terms tokenKey turnRecord used waiterRecord waitersKey waiting wakeIn wakekey wrongType",
}
