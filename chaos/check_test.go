//go:build linux

package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// overlap is an instant at which more than N children of a key ran.
type overlap struct {
	key     string
	at      int64 // the start that made one too many
	running []kid // every child running then, the newcomer last
}

// overlaps sweeps each key's children in time order and returns every
// start that made more than n permits held at once, each child holding its
// weight. A child that has not ended runs for ever. At equal times an end
// comes before a start.
func overlaps(kids []kid, n int) []overlap {
	return overlapsOf(kids, func(string) int { return n })
}

// overlapsOf is overlaps with each key's own N.
func overlapsOf(kids []kid, permits func(key string) int) []overlap {
	type event struct {
		at    int64
		start bool
		k     int // index in kids
	}
	byKey := map[string][]event{}
	for i, k := range kids {
		end := k.end
		if end == 0 {
			end = 1<<63 - 1
		}
		byKey[k.key] = append(byKey[k.key], event{k.start, true, i}, event{end, false, i})
	}
	var out []overlap
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		evs := byKey[key]
		slices.SortFunc(evs, func(a, b event) int {
			if c := cmp.Compare(a.at, b.at); c != 0 {
				return c
			}
			if a.start == b.start {
				return 0
			}
			if a.start {
				return 1
			}
			return -1
		})
		running, held := map[int]bool{}, 0
		for _, e := range evs {
			if !e.start {
				delete(running, e.k)
				held -= kids[e.k].permits()
				continue
			}
			running[e.k] = true
			if held += kids[e.k].permits(); held <= permits(key) {
				continue
			}
			o := overlap{key: key, at: e.at}
			for _, i := range slices.Sorted(maps.Keys(running)) {
				if i != e.k {
					o.running = append(o.running, kids[i])
				}
			}
			slices.SortFunc(o.running, func(a, b kid) int { return cmp.Compare(a.start, b.start) })
			o.running = append(o.running, kids[e.k])
			out = append(out, o)
		}
	}
	return out
}

// permits is how many permits of its key k holds: its weight.
func (k kid) permits() int { return max(k.weight, 1) }

// maxSlots is the largest capacity whose permits are numbered
// (semantics, section 13): a grant of a larger key holds no slot.
const maxSlots = 1024

// slotsTold says what is wrong with the slots a child was told, as it
// told them, "" when nothing: on a key of at most maxSlots permits,
// SEMRUN_SLOTS and SEMRUN_SLOT, the first of them; with several keys,
// SEMRUN_KEY_SLOTS too, a line per key of SEMRUN_FENCING_TOKENS that
// numbers slots, in its order, the first key's slots SEMRUN_SLOTS'. On a
// larger key, none of them. How many, and which, slotFaults judges, per key.
func slotsTold(k kid, permits func(key string) int) string {
	keys := []string{k.key}
	if len(k.tokens) > 1 {
		keys = keys[:0]
		for _, kt := range k.tokens {
			keys = append(keys, kt.key)
		}
	}
	numbered := false
	for _, key := range keys {
		numbered = numbered || permits(key) <= maxSlots
	}
	switch {
	case !numbered && k.slotted:
		return fmt.Sprintf("told slots (SEMRUN_SLOTS %v, SEMRUN_SLOT set %v, SEMRUN_KEY_SLOTS %v) on keys of more than %d permits, which number none", k.slots, k.slotSet, k.keySlots, maxSlots)
	case !numbered:
		return ""
	case !k.slotted:
		return "told no slot (no SEMRUN_SLOT, SEMRUN_SLOTS or SEMRUN_KEY_SLOTS)"
	case len(keys) > 1 && !k.keySlotsSet:
		return fmt.Sprintf("no SEMRUN_KEY_SLOTS with several keys %q", keys)
	case permits(keys[0]) > maxSlots:
		if k.slots != nil || k.slotSet {
			return fmt.Sprintf("SEMRUN_SLOTS %v (SEMRUN_SLOT set %v) for %q, of %d permits, which numbers none", k.slots, k.slotSet, keys[0], permits(keys[0]))
		}
	case k.slots == nil:
		return "no SEMRUN_SLOTS"
	case !k.slotSet:
		return fmt.Sprintf("SEMRUN_SLOTS %v, and no SEMRUN_SLOT", k.slots)
	case k.slot != k.slots[0]:
		return fmt.Sprintf("SEMRUN_SLOT %d is not the first of SEMRUN_SLOTS %v", k.slot, k.slots)
	}
	if why := namesTold(k); why != "" {
		return why
	}
	if !k.keySlotsSet {
		return ""
	}
	var listed []string
	for _, ks := range k.keySlots {
		listed = append(listed, ks.key)
	}
	if want := slices.DeleteFunc(slices.Clone(keys), func(key string) bool { return permits(key) > maxSlots }); !slices.Equal(listed, want) {
		return fmt.Sprintf("SEMRUN_KEY_SLOTS lists keys %q, want %q, as SEMRUN_FENCING_TOKENS, less those of more than %d permits", listed, want, maxSlots)
	}
	if first := k.keySlots[0].slots; permits(keys[0]) <= maxSlots && !slices.Equal(first, k.slots) {
		return fmt.Sprintf("SEMRUN_KEY_SLOTS gives %q slots %v, SEMRUN_SLOTS %v", keys[0], first, k.slots)
	}
	return ""
}

// namesTold says what is wrong with the names of its slots a child was
// told, "" when nothing: none, or SEMRUN_SLOT_NAMES, a name per slot of
// SEMRUN_SLOTS, and SEMRUN_SLOT_NAME, the first of them. Which names,
// capacityFaults judges.
func namesTold(k kid) string {
	switch {
	case !k.slotNameSet && !k.slotNamesSet:
		return ""
	case k.slotNameSet != k.slotNamesSet:
		return fmt.Sprintf("SEMRUN_SLOT_NAME set %v (%q), SEMRUN_SLOT_NAMES set %v (%q): want both or neither", k.slotNameSet, k.slotName, k.slotNamesSet, k.slotNames)
	case len(k.slotNames) != len(k.slots):
		return fmt.Sprintf("SEMRUN_SLOT_NAMES %q for SEMRUN_SLOTS %v: want a name per slot", k.slotNames, k.slots)
	case k.slotName != k.slotNames[0]:
		return fmt.Sprintf("SEMRUN_SLOT_NAME %q is not the first of SEMRUN_SLOT_NAMES %q", k.slotName, k.slotNames)
	}
	return ""
}

// slotFault is a holder whose slots break a promise.
type slotFault struct {
	k   kid
	why string
}

// slotFaults checks each holder's slots of its key (after perKey: a child
// of several keys once per key): as many as its weight, none twice, each
// below the key's capacity. A key of more than maxSlots permits numbers
// none, and a hold whose slots nobody told (no step's child started, and
// acquire printed none) is not judged; slotsTold judges a child told none.
func slotFaults(kids []kid, permits func(key string) int) []slotFault {
	var out []slotFault
	for _, k := range kids {
		n := permits(k.key)
		if n > maxSlots || !k.slotted {
			continue
		}
		if len(k.slots) != k.permits() {
			out = append(out, slotFault{k, fmt.Sprintf("holds slots %v of %q, want %d (its weight)", k.slots, k.key, k.permits())})
			continue
		}
		for i, s := range k.slots {
			if slices.Contains(k.slots[:i], s) {
				out = append(out, slotFault{k, fmt.Sprintf("holds slot %d of %q twice: %v", s, k.key, k.slots)})
				break
			}
			if s >= n {
				out = append(out, slotFault{k, fmt.Sprintf("holds slot %d of %q, of %d permits: want 0 to %d", s, k.key, n, n-1)})
				break
			}
		}
	}
	return out
}

// slotSep joins a key and a slot into the key of bySlot's holders: no
// key of the harness has it.
const slotSep = "\x00slot "

// bySlot returns a holder per slot each holder holds, its key that of
// the slot (slotKey): run through overlaps with one permit, two holders of
// one slot at once are an overlap. Holders with no slots are left out.
func bySlot(kids []kid) []kid {
	var out []kid
	for _, k := range kids {
		for _, s := range k.slots {
			x := k
			x.key, x.slots, x.weight = slotKey(k.key, s), []int{s}, 1
			out = append(out, x)
		}
	}
	return out
}

// slotKey is key's slot s, as bySlot names it; keySlot reads it back.
func slotKey(key string, s int) string { return key + slotSep + strconv.Itoa(s) }

func keySlot(sk string) (key string, slot int) {
	i := strings.LastIndex(sk, slotSep)
	if i < 0 {
		return sk, -1
	}
	slot, _ = strconv.Atoi(sk[i+len(slotSep):])
	return sk[:i], slot
}

// slotOverlaps returns each instant at which two holders held one slot of
// a key, by the same intervals as overlaps: a slot is a permit.
func slotOverlaps(kids []kid) []overlap {
	return overlaps(bySlot(kids), 1)
}

// reused returns the pairs of children of a key that were given the same
// token.
func reused(kids []kid) [][2]kid {
	seen := map[string]map[int64]kid{}
	var out [][2]kid
	for _, k := range kids {
		if seen[k.key] == nil {
			seen[k.key] = map[int64]kid{}
		}
		if first, ok := seen[k.key][k.token]; ok {
			if first.hold != 0 && first.hold == k.hold {
				continue // two steps of one hold
			}
			out = append(out, [2]kid{first, k})
			continue
		}
		seen[k.key][k.token] = k
	}
	return out
}

// restarted returns, for each restart of Redis and each key, a child
// granted before the restart (its token, on the wall clock, below the
// restart's start) still running when a child granted after it (a token
// above its heal) started, if there is one: the restart fence promises
// that whoever held before a restart has stopped before anyone granted
// after it starts. It names the one that ran longest and the first
// newcomer.
func restarted(kids []kid, faults []fault) [][2]kid {
	var out [][2]kid
	for _, f := range faults {
		if !f.restart {
			continue
		}
		old, young := map[string]kid{}, map[string]kid{}
		for _, k := range kids {
			end := k.end
			if end == 0 {
				end = 1<<63 - 1
			}
			switch {
			case k.token < f.wallStart:
				if o, ok := old[k.key]; !ok || end > o.end {
					k.end = end
					old[k.key] = k
				}
			case k.token > f.wallHeal:
				if y, ok := young[k.key]; !ok || k.start < y.start {
					young[k.key] = k
				}
			}
		}
		for _, key := range slices.Sorted(maps.Keys(old)) {
			if y, ok := young[key]; ok && old[key].end > y.start {
				out = append(out, [2]kid{old[key], y})
			}
		}
	}
	return out
}

// granted returns the children with each start moved back to the earliest
// start of a child of its key with a larger token, and for each child moved
// (by run) the child it was moved back to. If tokens follow the order of
// the grants, a child was granted before every child with a larger token,
// so it held its permit from at least the earliest of their starts: the
// intervals returned lie inside the leases, and no more than N of them may
// overlap. A token that went down stretches its child back over others.
func granted(kids []kid) ([]kid, map[int]kid) {
	out := byToken(kids)
	since := map[int]kid{}
	var first kid // the earliest start among the larger tokens of the key
	have := false
	eachToken(out, func(g []kid, newKey bool) {
		if newKey {
			have = false
		}
		for x := range g {
			if have && first.start < g[x].start {
				since[g[x].run] = first
				g[x].start = first.start
			}
		}
		for _, k := range g {
			if !have || k.start < first.start {
				first, have = k, true
			}
		}
	})
	return out, since
}

// reordered counts the children that started after a child of their key
// with a larger token had ended, and the longest such wait. With N > 1
// that is no fault in itself: a child starts a moment after its grant, or
// later when the grant's reply was lost and the request retried, and
// meanwhile a later grant's child can run and end. granted judges them.
func reordered(kids []kid) (int, time.Duration) {
	n := 0
	var longest time.Duration
	var end int64 // the earliest end among the larger tokens of the key
	have := false
	eachToken(byToken(kids), func(g []kid, newKey bool) {
		if newKey {
			have = false
		}
		for _, k := range g {
			if have && end < k.start {
				n++
				longest = max(longest, time.Duration(k.start-end))
			}
		}
		for _, k := range g {
			if !have || k.end < end {
				end, have = k.end, true
			}
		}
	})
	return n, longest
}

// byToken returns the children sorted by key, then largest token first.
func byToken(kids []kid) []kid {
	out := slices.Clone(kids)
	slices.SortFunc(out, func(a, b kid) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(b.token, a.token))
	})
	return out
}

// eachToken calls f with each run of children of sorted that share key and
// token, newKey being true for a key's first.
func eachToken(sorted []kid, f func(g []kid, newKey bool)) {
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].key == sorted[i].key && sorted[j].token == sorted[i].token {
			j++
		}
		f(sorted[i:j], i == 0 || sorted[i-1].key != sorted[i].key)
		i = j
	}
}

// Exit statuses semrun decides itself.
const (
	statusBusy       = 75
	statusLost       = 112
	statusRevoked    = 113
	statusMaxRuntime = 124
	statusFailure    = 125
)

// judge says what is wrong with how a semrun ended, "" when nothing: its
// child's own status passes through; 112 (permit lost) and 125 (Redis
// unreachable) only when a fault could explain them (excused); 113
// (revoked) only when an operator revoked it, and its child was stopped;
// 143 (SIGTERM) for a waiter the harness interrupted (several-keys).
func judge(r run, k *kid, excused bool) string {
	switch {
	case r.killed:
		if r.signal != syscall.SIGKILL {
			return fmt.Sprintf("killed by the nemesis, yet ended with status %d signal %d", r.status, r.signal)
		}
		return ""
	case r.interrupted && r.signal == syscall.SIGTERM && k == nil:
		return "" // its child, just started, died of the TERM before it said so: semrun dies of its signal
	case r.signal != 0:
		return fmt.Sprintf("semrun died of signal %d (%v)", r.signal, r.signal)
	case r.interrupted && r.status == 128+int(syscall.SIGTERM) && (k == nil || k.how == "term"):
		return "" // it waited, and gave up at once; or its child had started, and was told
	case r.interrupted && k == nil && r.status == statusBusy && r.timeout > 0 && r.interruptedAt >= r.launched+int64(r.timeout):
		return "" // its --timeout ran out before the TERM came (a slow store made it late to exit): busy was its answer
	case r.interrupted && k == nil:
		return fmt.Sprintf("SIGTERMed while it waited, yet status %d, want %d", r.status, 128+int(syscall.SIGTERM))
	case r.status == statusRevoked && !r.revoked:
		return "status 113 (revoked), yet no operator revoked it"
	case r.status == statusRevoked && k == nil:
		return "status 113 (revoked), and its child never said it started"
	case r.status == statusRevoked:
		return "" // its child stopped, or ended as the revoke was seen
	case r.status == statusFailure || r.status == statusLost:
		if !excused {
			return fmt.Sprintf("status %d with no fault to explain it", r.status)
		}
		if r.status == statusFailure && k != nil {
			return "status 125 after its child started"
		}
		return ""
	case k == nil && r.mayBeBusy && r.status == statusBusy:
		return "" // turned away: the key was taken, or cooling
	case k == nil:
		return fmt.Sprintf("status %d, and its child never said it started", r.status)
	case k.how == "done" && r.status == r.code:
		return ""
	case k.how == "done":
		return fmt.Sprintf("status %d, want the child's %d", r.status, r.code)
	default:
		return fmt.Sprintf("status %d after the child ended %s, want %d", r.status, k.how, statusLost)
	}
}

// TestChecks runs the checks on made-up histories, so that a check that
// cannot fail does not pass for a harness.
func TestChecks(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	runs := 0
	k := func(key string, token, start, end int64) kid {
		runs++
		return kid{run: runs, key: key, token: token, start: ms(start), end: ms(end), how: "done"}
	}
	t.Run("overlaps", func(t *testing.T) {
		kids := []kid{
			k("a", 1, 0, 100), k("a", 2, 50, 150), k("a", 3, 100, 200), // touching: no overlap at 100
			k("b", 1, 0, 100), k("b", 2, 10, 20), k("b", 3, 15, 30), // three at 15
			k("c", 1, 0, 0), // never ended: runs for ever
			k("c", 2, 500, 600),
		}
		kids[6].end = 0
		got := overlaps(kids, 2)
		if len(got) != 1 || got[0].key != "b" || got[0].at != ms(15) || len(got[0].running) != 3 {
			t.Fatalf("n=2: got %+v, want one overlap on b at 15ms of 3 children", got)
		}
		if got := overlaps(kids, 1); len(got) != 5 {
			t.Fatalf("n=1: got %d overlaps, want 5 (a at 50 and 100, b at 10 and 15, c at 500)", len(got))
		}
	})
	t.Run("tokens", func(t *testing.T) {
		kids := []kid{
			// Two permits. 5 started after 10 and 11 ended: granted before
			// them, it held a permit beside each of them, which fits.
			k("a", 10, 0, 100), k("a", 11, 120, 150), k("a", 5, 400, 500),
			// 11 was granted before 12 started, at 60, when 10 ran: three.
			k("b", 10, 0, 100), k("b", 11, 120, 150), k("b", 12, 60, 80), k("b", 5, 400, 500),
			k("c", 7, 0, 100), k("c", 7, 200, 300), // reused
		}
		if got := reused(kids); len(got) != 1 || got[0][0].key != "c" {
			t.Errorf("reused: got %+v, want the two 7s of c", got)
		}
		g, since := granted(kids)
		ovs := overlaps(g, 2)
		if len(ovs) == 0 || ovs[0].key != "b" {
			t.Fatalf("overlaps by token order: got %+v, want one on b", ovs)
		}
		for _, o := range ovs {
			if o.key != "b" {
				t.Errorf("overlap by token order on %q, want only on b", o.key)
			}
		}
		if len(overlaps(kids, 2)) != 0 {
			t.Errorf("overlaps as seen: got some, want none")
		}
		for _, x := range g {
			if x.key == "a" && x.token == 5 && (x.start != ms(0) || since[x.run].token != 10) {
				t.Errorf("a's 5 moved back to %v, since %+v: want 0, since 10", x.start, since[x.run])
			}
		}
		if n, d := reordered(kids); n != 3 || d != 320*time.Millisecond {
			t.Errorf("reordered: got %d, %v; want 3 (a's 5, b's 11 and 5), 320ms", n, d)
		}
	})
	t.Run("holds", func(t *testing.T) {
		// Hold 1 gave its permit back at 500 (its span from 100), yet a step
		// of it ran on until 600; hold 2, lost, ran steps at 0 and 200.
		h1 := &hold{id: 1, key: "a", token: 40, handle: "h1", acquire: &run{exited: ms(100)}, until: ms(500)}
		h2 := &hold{id: 2, key: "a", token: 30, handle: "h2", acquire: &run{exited: ms(0)}}
		kids := []kid{
			k("a", 40, 150, 250), k("a", 40, 300, 600), // hold 1's steps
			k("a", 30, 0, 100), k("a", 30, 200, 300), // hold 2's
			k("a", 50, 120, 130), // a run beside hold 1's span, between its steps
			k("a", 60, 540, 560), // a run beside hold 1's step that outlived it
		}
		byRun := map[int]*hold{kids[0].run: h1, kids[1].run: h1, kids[2].run: h2, kids[3].run: h2}
		got := holders(kids, []*hold{h1, h2}, byRun)
		if len(got) != 5 {
			t.Fatalf("holders: got %d, want 5 (hold 1's span and what ran after it, hold 2 as one, two runs): %+v", len(got), got)
		}
		if len(reused(got)) != 0 {
			t.Errorf("reused: the steps of one hold share its token, got %+v", reused(got))
		}
		// One permit: at 120 hold 1's span, hold 2 (held from 0 to 300) and
		// the run; at 540, hold 1's step beside the run.
		ovs := overlaps(got, 1)
		var at []int64
		for _, o := range ovs {
			at = append(at, o.at)
		}
		if !slices.Equal(at, []int64{ms(100), ms(120), ms(540)}) {
			t.Errorf("overlaps with one permit at %v, want at 100ms, 120ms and 540ms", at)
		}
		if len(overlaps(kids, 1)) >= len(ovs) {
			t.Errorf("the children alone must show fewer overlaps than the holds: the span and the time between steps hold the permit")
		}
	})
	t.Run("restarted", func(t *testing.T) {
		f := fault{restart: true, wallStart: 1000, wallHeal: 2000}
		kids := []kid{
			k("a", 500, 0, 300), k("a", 3000, 200, 400), // still ran when a newcomer started
			k("b", 500, 0, 100), k("b", 3000, 200, 400), // stopped in time
			k("c", 1500, 0, 900), k("c", 3000, 200, 400), // granted as the restart began: neither
		}
		got := restarted(kids, []fault{f, {start: 1, heal: 2}})
		if len(got) != 1 || got[0][0].key != "a" || got[0][1].token != 3000 {
			t.Errorf("restarted: got %+v, want key a's 500 before 3000", got)
		}
	})
	t.Run("judge", func(t *testing.T) {
		done := &kid{how: "done"}
		term := &kid{how: "term"}
		for _, c := range []struct {
			r       run
			k       *kid
			excused bool
			ok      bool
		}{
			{run{status: 7, code: 7}, done, false, true},
			{run{status: 0, code: 7}, done, true, false},
			{run{status: 112, code: 7}, term, true, true},
			{run{status: 112, code: 7}, term, false, false},
			{run{status: 112, code: 7}, done, true, true}, // lost as it ended
			{run{status: 125}, nil, true, true},
			{run{status: 125}, nil, false, false},
			{run{status: 125}, done, true, false},
			{run{status: 3}, nil, true, false},
			{run{status: -1, signal: syscall.SIGKILL, killed: true}, done, false, true},
			{run{status: -1, signal: syscall.SIGKILL}, done, true, false},
			{run{status: 113, code: 7, revoked: true}, term, false, true},
			{run{status: 113, code: 7, revoked: true}, done, false, true}, // revoked as it ended
			{run{status: 113, code: 7}, term, true, false},
			{run{status: 113, revoked: true}, nil, true, false},
			{run{status: 7, code: 7, revoked: true}, done, false, true},
			{run{status: 75, mayBeBusy: true}, nil, false, true},
			{run{status: 75}, nil, false, false},
			{run{status: 76, mayBeBusy: true}, nil, false, false},
			{run{status: 143, interrupted: true}, nil, false, true},
			{run{status: 143, interrupted: true}, term, false, true}, // its child had just started
			{run{status: 0, interrupted: true}, nil, false, false},
			{run{status: 75, interrupted: true, launched: 1, interruptedAt: 1 + int64(10*time.Second), timeout: 10 * time.Second}, nil, false, true},
			{run{status: 75, interrupted: true, launched: 1, interruptedAt: int64(9 * time.Second), timeout: 10 * time.Second}, nil, false, false},
			{run{status: 143}, nil, false, false},
			{run{status: -1, signal: syscall.SIGTERM, interrupted: true}, nil, false, true},
			{run{status: -1, signal: syscall.SIGTERM, interrupted: true}, done, false, false},
			{run{status: -1, signal: syscall.SIGTERM}, nil, false, false},
		} {
			if got := judge(c.r, c.k, c.excused); (got == "") != c.ok {
				t.Errorf("judge(%+v, %+v, excused %v) = %q, want ok %v", c.r, c.k, c.excused, got, c.ok)
			}
		}
	})
	t.Run("revoke", func(t *testing.T) {
		// Revoked by a command that ended at 1000ms: the child must be
		// stopped by 1000ms + learnWithin.
		rv := revocation{start: ms(980), end: ms(1000)}
		by := 1000 + learnWithin.Milliseconds()
		stopped := &kid{how: "term", end: ms(by - 10)}
		late := &kid{how: "term", end: ms(by + 10)}
		named := "semrun: key \"k\": permit lost: an operator revoked it: " + revokeReason + "; command terminated"
		for _, c := range []struct {
			rv      revocation
			r       run
			k       *kid
			excused bool
			ok      bool
		}{
			{rv, run{status: 113, stderr: named}, stopped, false, true},
			{rv, run{status: 113, stderr: named}, late, false, false},
			{rv, run{status: 113, stderr: named}, late, true, true},                      // Redis stopped: the renewal waited
			{rv, run{status: 113, stderr: "permit lost"}, stopped, false, false},         // no reason named
			{rv, run{status: 7, code: 7}, &kid{how: "done", end: ms(1200)}, false, true}, // ended first
			{rv, run{status: 7, code: 7}, &kid{how: "done", end: ms(by + 500)}, false, false},
			{rv, run{status: 112}, stopped, false, false},
			{revocation{status: 1, end: ms(1000)}, run{status: 7, code: 7}, &kid{how: "done", end: ms(5000)}, false, true}, // no such holder
			{revocation{status: 125, end: ms(1000)}, run{status: 7, code: 7}, &kid{how: "done", end: ms(5000)}, false, true},
		} {
			if got := revokeVerdict(c.rv, c.r, c.k, c.excused, 0); (got == "") != c.ok {
				t.Errorf("revokeVerdict(%+v, %+v, %+v, excused %v) = %q, want ok %v", c.rv, c.r, c.k, c.excused, got, c.ok)
			}
		}
		// A revoke of slot 1 from 1000 to 1050ms may have hit whoever held
		// slot 1 then, not its victim's other slot's holder, nor holders
		// of slot 1 before or well after.
		victim := &run{id: 1}
		rc := &cluster{runs: map[int]*run{1: victim, 2: {id: 2}, 3: {id: 3}, 4: {id: 4}, 5: {id: 5}, 6: {id: 6}},
			revokes: []*revocation{{key: "k", run: victim, bySlot: true, slot: 1, start: ms(1000), end: ms(1050)}}}
		held := func(run int, start, end int64, slots ...int) *kid {
			return &kid{run: run, key: "k", start: ms(start), end: ms(end), slotted: true, slots: slots}
		}
		rc.slotTargets(map[int]*kid{
			1: held(1, 0, 1040, 1), 2: held(2, 1040, 3000, 1), // the victim, and who took its slot
			3: held(3, 0, 3000, 0),    // another slot
			4: held(4, 0, 900, 1),     // slot 1, ended before
			5: held(5, 5000, 6000, 1), // slot 1, well after
			6: held(6, 1060, 0, 1, 2), // slot 1, just after (its grant may have come first)
		})
		var hit []int
		for id, r := range rc.runs {
			if r.revoked {
				hit = append(hit, id)
			}
		}
		slices.Sort(hit)
		others := slices.Sorted(slices.Values(rc.revokes[0].others))
		if !slices.Equal(hit, []int{2, 6}) || !slices.Equal(others, hit) {
			t.Errorf("slotTargets: marked %v (others %v), want 2 and 6", hit, rc.revokes[0].others)
		}
		faults := []fault{
			{start: ms(100), heal: ms(200), operator: true}, // a revoke: no push-back
			{start: ms(3000), heal: ms(5000)},               // Redis stopped before the permit freed
			{start: ms(9000), heal: ms(9500)},               // after the permit was due
		}
		grace := ms((ttl + trialSlack).Milliseconds())
		if got, want := freeBound(faults, ms(1000)), ms(5000)+grace; got != want {
			t.Errorf("freeBound after a fault: got %v, want %v", time.Duration(got), time.Duration(want))
		}
		if got, want := freeBound(faults[:1], ms(1000)), ms(1000)+grace; got != want {
			t.Errorf("freeBound: got %v, want %v", time.Duration(got), time.Duration(want))
		}
		if !underFault(faults, ms(5500), ms(6000)) || underFault(faults, ms(7100), ms(8000)) || underFault(faults[:1], 0, ms(300)) {
			t.Errorf("underFault: want a TTL after a fault of Redis, never for an operator's act")
		}
	})
	t.Run("pause", func(t *testing.T) {
		// Paused from 1000µs (acknowledged) to 2000µs; the line was runs
		// 5, 6 and 7, in that order.
		p := keyPause{key: "a", ackWall: 1000, endWall: 2000, line: []int{5, 6, 7}}
		mk := func(run int, token int64, start, end int64) kid {
			return kid{run: run, key: "a", token: token, start: ms(start), end: ms(end), how: "done"}
		}
		kids := []kid{
			mk(1, 900, 0, 1500), // granted before the pause, runs on through it
			mk(2, 990, 10, 20),  // granted before it was acknowledged
			mk(3, 1500, 30, 40), // granted while paused
			mk(6, 2001, 50, 60), // served out of order
			mk(5, 2002, 55, 65),
			mk(8, 2003, 56, 66), // came later, served before 7
			mk(7, 2004, 70, 80),
			{run: 9, key: "b", token: 1500}, // another key
		}
		if got := grantedWhilePaused(kids, p); len(got) != 1 || got[0].run != 3 {
			t.Errorf("grantedWhilePaused: got %+v, want run 3", got)
		}
		if got := servedAfter(kids, p, 3); !slices.Equal(got, []int{6, 5, 8}) {
			t.Errorf("servedAfter: got %v, want [6 5 8]", got)
		}
		inOrder := []kid{mk(5, 2001, 50, 60), mk(6, 2002, 50, 60), mk(7, 2100, 70, 80), mk(8, 2200, 90, 95)}
		if got := servedAfter(inOrder, p, 3); !slices.Equal(got, p.line) {
			t.Errorf("servedAfter in order: got %v, want %v", got, p.line)
		}
		if got := runningAt(kids, "a", ms(1000)); len(got) != 1 || got[0].run != 1 {
			t.Errorf("runningAt: got %+v, want run 1", got)
		}
		launched := map[int]int64{5: ms(5000), 6: ms(3000), 7: ms(5500)}
		if got := lineBeforeArrival(p.line, launched, 0); len(got) != 1 || got[0] != [2]int{5, 6} {
			t.Errorf("lineBeforeArrival: got %v, want [[5 6]] (6 came 2s before 5, 7 0.5s after)", got)
		}
		if got := lineBeforeArrival(p.line, launched, time.Second); len(got) != 0 {
			t.Errorf("lineBeforeArrival, allowing a second for the machine: got %v, want none", got)
		}
	})
	t.Run("min hold", func(t *testing.T) {
		// Tokens are µs of Redis's clock; starts ms here. A min hold of 1s.
		d := map[string]time.Duration{"a": time.Second, "b": time.Second, "c": time.Second}
		g := func(key string, grantMs, startMs int64) kid {
			x := k(key, grantMs*1000, startMs, startMs+100)
			return x
		}
		kids := []kid{
			g("a", 0, 10), g("a", 1000, 1010), g("a", 2500, 2510), // one permit: 1s apart, fine
			g("b", 0, 10), g("b", 999, 1005), // 999ms after: too soon
			g("c", 0, 10), g("c", 400, 420), g("c", 900, 990), // two permits: three within 1s
		}
		none := func(kid, kid) time.Duration { return 0 }
		one := slices.DeleteFunc(slices.Clone(kids), func(x kid) bool { return x.key == "c" })
		if got := crowded(one, 1, d, nil); len(got) != 1 || got[0][0].key != "b" || got[0][1].token != 999_000 {
			t.Errorf("crowded, one permit: got %+v, want b's 0 and 999", got)
		}
		if got := crowded(kids, 2, d, nil); len(got) != 1 || got[0][0].key != "c" {
			t.Errorf("crowded, two permits: got %+v, want c's three", got)
		}
		// Redis restarted empty between b's grants: its data lost excuses them.
		empty := fault{restart: true, wallStart: 500_000, wallHeal: 600_000, start: ms(500), heal: ms(600)}
		if got := crowded(one, 1, d, []fault{empty, {what: "with data", start: ms(500), heal: ms(600)}}); len(got) != 0 {
			t.Errorf("crowded across a restart empty: got %+v, want none", got)
		}
		if got := crowded(one, 1, d, []fault{{what: "with data", start: ms(500), heal: ms(600), wallStart: 500_000, wallHeal: 600_000}}); len(got) != 1 {
			t.Errorf("crowded across a restart that kept the data: got %+v, want b's", got)
		}
		// Per slot: c's 0 and 400 took slot 1 both, within 1s: its permit
		// was cooling. Slots 0 and 1 in turn are fine.
		slotted := func(x kid, slot int) kid {
			x.slotted, x.slots = true, []int{slot}
			return x
		}
		if got := crowdedSlots([]kid{slotted(g("c", 0, 10), 1), slotted(g("c", 400, 420), 1)}, d, nil); len(got) != 1 {
			t.Errorf("crowdedSlots, slot 1 twice in 400ms: got %+v, want one", got)
		}
		if got := crowdedSlots([]kid{slotted(g("c", 0, 10), 0), slotted(g("c", 400, 420), 1), slotted(g("c", 1000, 1010), 0)}, d, nil); len(got) != 0 {
			t.Errorf("crowdedSlots, slots 0, 1, then 0 1s on: got %+v, want none", got)
		}

		// By the starts: b's 995ms apart fail with no slack, pass with 10ms.
		if got := crowdedStarts(one, 1, d, nil, none); len(got) != 1 || got[0][0].key != "b" {
			t.Errorf("crowdedStarts: got %+v, want b's", got)
		}
		if got := crowdedStarts(one, 1, d, nil, func(kid, kid) time.Duration { return 10 * time.Millisecond }); len(got) != 0 {
			t.Errorf("crowdedStarts with 10ms of slack: got %+v, want none", got)
		}
		if got := crowdedStarts(one, 1, d, []fault{empty}, none); len(got) != 0 {
			t.Errorf("crowdedStarts across a restart empty: got %+v, want none", got)
		}
		// A child that started 500ms after its grant (its reply lost, and
		// asked again) is allowed that much by the cluster's slack.
		c := &cluster{wallOff: 0}
		late := []kid{g("b", 0, 500), g("b", 1000, 1005)}
		if got := crowdedStarts(late, 1, d, nil, c.startSlack); len(got) != 0 {
			t.Errorf("crowdedStarts, a start 500ms after its grant: got %+v, want none", got)
		}
		if got := crowdedStarts([]kid{g("b", 0, 10), g("b", 1000, 505)}, 1, d, nil, c.startSlack); len(got) != 1 {
			t.Errorf("crowdedStarts, a start 495ms after the one before it: got %+v, want one", got)
		}
		// The nemesis must have tested the cooling.
		good := silence{d: 8 * time.Second, grant: ms(0), from: ms(100), to: ms(100) + int64(quietFor)}
		short := good
		short.to -= ms(1)
		back := good
		back.from, back.to = ms(3000), ms(3000)+int64(quietFor)
		if n, why := silencesTested(nil); n != 0 || why == "" {
			t.Errorf("silencesTested with none: got %d, %q; want a failure", n, why)
		}
		if n, why := silencesTested([]silence{short, back}); n != 0 || why == "" {
			t.Errorf("silencesTested with one too short and one back after the min hold: got %d, %q; want a failure", n, why)
		}
		if n, why := silencesTested([]silence{short, good}); n != 1 || why != "" {
			t.Errorf("silencesTested: got %d, %q; want 1", n, why)
		}
	})
	t.Run("forgotten hold", func(t *testing.T) {
		// A hold granted at 0, released at 5000ms: told its hold is unknown
		// (125), which a restart that lost Redis's keys since the grant
		// explains, and nothing else does.
		c := &cluster{}
		unknown := "semrun: the hold of key \"a\" is unknown to the store: ...; nothing released"
		for _, tc := range []struct {
			faults []fault
			stderr string
			ok     bool
		}{
			{[]fault{{restart: true, start: ms(2000), heal: ms(2100)}}, unknown, true},
			{nil, unknown, false},
			{[]fault{{restart: true, start: -ms(1000), heal: -ms(900)}}, unknown, false},                                   // before the grant
			{[]fault{{start: ms(2000), heal: ms(2100), operator: true}}, unknown, false},                                   // no keys lost
			{[]fault{{restart: true, start: ms(2000), heal: ms(2100)}}, "semrun: no Redis at 127.0.0.1:1 answered", false}, // another 125
		} {
			h := &hold{id: 1, key: "a", handle: "h", acquire: &run{proc: &os.Process{}, launched: 0, exited: ms(100)},
				release: &run{proc: &os.Process{}, status: statusFailure, launched: ms(5000), exited: ms(5100), stderr: tc.stderr}}
			if got := c.judgeHold(h, nil, tc.faults, false); (len(got) == 0) != tc.ok {
				t.Errorf("judgeHold after faults %+v, release saying %q: got %q, want ok %v", tc.faults, tc.stderr, got, tc.ok)
			}
		}
	})
	t.Run("drain", func(t *testing.T) {
		// Drained at 1000ms, resumed at 2000ms.
		held := []kid{
			k("a", 1, 0, 900),                                // ended before: fine
			k("a", 2, 500, 1100),                             // still ran once drained
			k("a", 3, 1500, 1600),                            // started while drained
			k("a", 4, 2000, 2500),                            // started at the resume: fine
			k("b", 5, 1500, 1600),                            // another key
			{run: 99, key: "a", start: ms(100), how: "hold"}, // a hold never seen to end
		}
		got := heldWhileDrained(held, "a", ms(1000), ms(2000))
		var runs []int
		for _, x := range got {
			runs = append(runs, x.run)
		}
		if want := []int{held[1].run, held[2].run, 99}; !slices.Equal(runs, want) {
			t.Errorf("heldWhileDrained: got runs %v, want %v", runs, want)
		}
		started := &kid{token: 9, how: "done"}
		for _, c := range []struct {
			r  *run
			k  *kid
			ok bool
		}{
			{&run{proc: &os.Process{}, status: statusLost}, nil, true},
			{&run{proc: &os.Process{}, status: statusLost}, started, false}, // its child ran
			{&run{proc: &os.Process{}, status: 7, code: 7}, started, false},
			{&run{proc: &os.Process{}, status: 0}, nil, false},
			{nil, nil, true}, // none tried
		} {
			if got := refusalVerdict(c.r, c.k); (got == "") != c.ok {
				t.Errorf("refusalVerdict(%+v, %+v) = %q, want ok %v", c.r, c.k, got, c.ok)
			}
		}
	})
	t.Run("frozen keeper", func(t *testing.T) {
		p := &os.Process{}
		notStarved := func(int, int64, int64) bool { return false }
		during, after := "thawed during the step", "thawed after the step"
		done7 := &kid{how: "done", code: 7}
		for _, c := range []struct {
			th thaw
			k  *kid
			ok bool
		}{
			{thaw{mode: during, step: &run{proc: p, status: 7}, release: &run{proc: p, status: 0}}, done7, true},
			{thaw{mode: during, step: &run{proc: p, status: 112, stderr: "lost"}, release: &run{proc: p, status: 112}}, &kid{how: "term", code: 143}, false}, // the step killed
			{thaw{mode: during, step: &run{proc: p, status: 0}, release: &run{proc: p, status: 0}}, done7, false},                                            // not its child's status
			{thaw{mode: during, step: &run{proc: p, status: 7}, release: &run{proc: p, status: 112, stderr: "may have run without the permit"}}, done7, false},
			{thaw{mode: after, step: &run{proc: p, status: 7}, release: &run{proc: p, status: 112, stderr: "permit lost"}}, done7, true},
			{thaw{mode: after, step: &run{proc: p, status: 7}, release: &run{proc: p, status: 125}}, done7, false},
			{thaw{mode: during, step: &run{proc: p, status: 3}}, nil, false}, // its child never started
		} {
			if got := thawVerdict(c.th, c.k, notStarved); (got == "") != c.ok {
				t.Errorf("thawVerdict(%+v, %+v) = %q, want ok %v", c.th, c.k, got, c.ok)
			}
		}
		// A starved machine excuses a lost step.
		th := thaw{mode: during, step: &run{proc: p, status: 112}, release: &run{proc: p, status: 112}}
		if got := thawVerdict(th, &kid{how: "term", code: 143}, func(s int, _, _ int64) bool { return s == statusLost }); got != "" {
			t.Errorf("thawVerdict on a starved machine: %q, want ok", got)
		}
	})
	t.Run("several keys", func(t *testing.T) {
		// SEMRUN_FENCING_TOKENS: KEY=TOKEN a line, the token after the last '='.
		got, err := fencingTokens("a=b=12\nc=5")
		if err != nil || !slices.Equal(got, []keyToken{{"a=b", 12}, {"c", 5}}) {
			t.Errorf("fencingTokens: got %+v, %v; want a=b 12, c 5", got, err)
		}
		for _, bad := range []string{"", "a", "=5", "a=x", "a=1\n\nb=2"} {
			if got, err := fencingTokens(bad); err == nil {
				t.Errorf("fencingTokens(%q) = %+v, want an error", bad, got)
			}
		}
		// The recorder reads them from the child's T line.
		dir := t.TempDir()
		rec := newRecorder(t, filepath.Join(dir, "kids"))
		conn, err := net.Dial("unix", filepath.Join(dir, "kids"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "S 10 9 1000 12 a=b 7\nT %s\nE 2000 done 0\n", strconv.Quote("a=b=12\nc=5"))
		_ = conn.Close()
		for deadline := time.Now().Add(hangBound); rec.quiet(0) > 0 || rec.lastStart("c") == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the recorder read no child of c within %v", hangBound)
			}
		}
		if kid, ok := rec.get(7); !ok || !kid.told || !slices.Equal(kid.tokens, []keyToken{{"a=b", 12}, {"c", 5}}) || rec.lastStart("c") != 1000 {
			t.Errorf("recorder: got %+v (%v), last start of c %d; want the tokens of a=b and c, c started at 1000", kid, ok, rec.lastStart("c"))
		}
		if _, bad := rec.snapshot(); len(bad) != 0 {
			t.Errorf("recorder: lines it could not read: %q", bad)
		}

		// Two children of keys a (N=2) and b (N=1), listed in either
		// order: seen by their first key only, none overlaps; per key,
		// they overlap on b, and b's token 2 was handed out twice.
		two := func(run int, start, end int64, pairs ...keyToken) kid {
			return kid{run: run, key: pairs[0].key, token: pairs[0].token, start: ms(start), end: ms(end), how: "done", told: true, tokens: pairs}
		}
		kids := []kid{
			two(101, 0, 100, keyToken{"a", 1}, keyToken{"b", 1}),
			two(102, 50, 150, keyToken{"b", 2}, keyToken{"a", 2}),
			two(103, 200, 300, keyToken{"a", 3}, keyToken{"b", 2}),
		}
		permits := func(key string) int { return map[string]int{"a": 2, "b": 1}[key] }
		if got := overlapsOf(kids, permits); len(got) != 0 {
			t.Errorf("overlaps by the first key: got %+v, want none", got)
		}
		held := perKey(kids)
		if got := overlapsOf(held, permits); len(got) != 1 || got[0].key != "b" || got[0].at != ms(50) {
			t.Errorf("overlaps per key: got %+v, want one on b at 50ms", got)
		}
		if got := overlapsOf(held, func(string) int { return 1 }); len(got) != 2 {
			t.Errorf("overlaps per key, one permit each: got %d, want 2 (a and b at 50ms)", len(got))
		}
		if got := reused(held); len(got) != 1 || got[0][0].key != "b" || got[0][0].token != 2 {
			t.Errorf("reused per key: got %+v, want b's 2", got)
		}

		// Frozen whole from 1000 to 4000ms: b's holder stopped as it woke,
		// c's ran on; newcomers took b and c (N=1) while they were frozen.
		// e's child was frozen before it said it started: it says so on
		// waking, and is stopped then.
		woke := map[int]frozen{201: {ms(1000), ms(4000)}, 202: {ms(1000), ms(4000)}, 204: {ms(1000), ms(4000)}, 206: {ms(1000), ms(4000)}}
		frozenKids := []kid{
			k("b", 1, 500, 4050), k("c", 1, 600, 6000), k("b", 2, 3500, 3600),
			k("d", 1, 700, 900), // ended before the freeze
			k("c", 2, 3500, 3600),
			k("e", 1, 4001, 4040), k("e", 2, 3000, 4100),
		}
		for i := range frozenKids {
			frozenKids[i].run = 201 + i
		}
		none := func(int64, int64) time.Duration { return 0 }
		clipped := clipWoken(frozenKids, woke, none)
		if clipped[0].end != ms(1000) || clipped[1].end != ms(6000) || clipped[3].end != ms(900) {
			t.Errorf("clipWoken: ends %v, %v, %v; want 1000ms (stopped as it woke), 6000ms (ran on), 900ms", clipped[0].end, clipped[1].end, clipped[3].end)
		}
		if len(clipped) != len(frozenKids)-1 || clipped[5].token != 2 {
			t.Errorf("clipWoken: %+v; want e's first child, which said it started only on waking, left out", clipped)
		}
		if got := overlaps(clipped, 1); len(got) != 1 || got[0].key != "c" || got[0].at != ms(3500) {
			t.Errorf("overlaps once clipped: got %+v, want one on c, whose holder ran on, at 3500ms", got)
		}
		if got := overlaps(frozenKids, 1); len(got) != 3 {
			t.Errorf("overlaps unclipped: got %d, want 3 (b and c at 3500ms, e at 4001ms)", len(got))
		}
		if got := clipWoken(frozenKids, woke, func(int64, int64) time.Duration { return 2 * time.Second }); got[1].end != ms(1000) {
			t.Errorf("clipWoken with 2s of the machine's allowance: ran on until %v, want clipped", got[1].end)
		}

		// Stalls: nothing ran from 100ms to 5s.
		idle := []kid{k("a", 1, 0, 100), k("a", 2, 5000, 5100), k("a", 3, 5050, 0)}
		bound := func(int64, int64) time.Duration { return 2 * time.Second }
		if got := stalls(idle, 0, ms(9000), nil, bound); len(got) != 1 || got[0] != [2]int64{ms(100), ms(5000)} {
			t.Errorf("stalls: got %v, want 100ms to 5s", got)
		}
		if got := stalls(idle, 0, ms(9000), []fault{{start: ms(200), heal: ms(1000)}}, bound); len(got) != 0 {
			t.Errorf("stalls after a fault: got %v, want none (it heals within %v)", got, healFailure)
		}
		if got := stalls(idle[:2], 0, ms(9000), nil, bound); len(got) != 2 || got[1] != [2]int64{ms(5100), ms(9000)} {
			t.Errorf("stalls to the end: got %v, want 100ms to 5s and 5.1s to 9s", got)
		}

		// Progress: every order of keys ran, and more ran than gave up
		// with no fault near (runs 2 and 3, excused: 9 and up).
		mk := func(id, status int, keys ...string) run { return run{id: id, keys: keys, status: status} }
		runs := []run{mk(1, 0, "a", "b"), mk(2, 75, "a", "b"), mk(3, 75, "b", "a"), mk(4, 0, "a", "b"), mk(5, 0, "b", "a")}
		ran := map[int]*kid{1: {}, 4: {}, 5: {}}
		excused := func(r run) bool { return r.id >= 9 }
		if _, why := progress(runs, ran, 2, excused); why != "" {
			t.Errorf("progress: %s, want none", why)
		}
		if _, why := progress(runs, ran, 3, excused); why == "" {
			t.Errorf("progress with an order that never called: want a failure")
		}
		if _, why := progress(runs[:4], ran, 2, excused); !strings.Contains(why, "never ran") {
			t.Errorf("progress with b,a never run: got %q", why)
		}
		if _, why := progress([]run{runs[0], runs[1], runs[3], mk(9, 75, "b", "a")}, ran, 2, excused); why != "" {
			t.Errorf("progress with b,a never run, but for one give-up under a fault: %q, want none", why)
		}
		if _, why := progress(append(slices.Clone(runs), mk(6, 75, "a", "b"), mk(7, 75, "b", "a")), ran, 2, excused); !strings.Contains(why, "gave up") {
			t.Errorf("progress with 3 run and 4 given up: got %q", why)
		}
		if _, why := progress(append(slices.Clone(runs), mk(10, 75, "a", "b"), mk(11, 75, "b", "a")), ran, 2, excused); why != "" {
			t.Errorf("progress with 3 run and 4 given up, 2 under a fault: %q, want none", why)
		}

		// What a run of several says.
		told := func(key string, token int64, pairs ...keyToken) *kid {
			return &kid{key: key, token: token, how: "done", told: true, tokens: pairs}
		}
		ab := []keyToken{{"a", 1}, {"b", 2}}
		for _, c := range []struct {
			r  run
			k  *kid
			ok bool
		}{
			{run{keys: []string{"a", "b"}, status: 7, code: 7}, told("a", 1, ab...), true},
			{run{keys: []string{"b", "a"}, status: 7, code: 7}, told("a", 1, ab...), false},                   // not the order given
			{run{keys: []string{"a", "b"}, status: 7, code: 7}, told("a", 9, ab...), false},                   // the first is not SEMRUN_FENCING_TOKEN's
			{run{keys: []string{"a", "b"}, status: 7, code: 7}, told("a", 1, ab[:1]...), false},               // one key missing
			{run{keys: []string{"a", "b"}, status: 7, code: 7}, &kid{key: "a", token: 1, how: "done"}, false}, // no SEMRUN_FENCING_TOKENS
			{run{keys: []string{"a", "b"}, status: 112, stderr: "semrun: key \"b\": permit lost: renewal found it gone; command terminated"}, told("a", 1, ab...), true},
			{run{keys: []string{"a", "b"}, status: 112, stderr: "semrun: permit lost; command terminated"}, told("a", 1, ab...), false},
			{run{keys: []string{"a", "b"}, status: 75, stderr: "semrun: key \"a\": no permit within 8s (--timeout)"}, nil, true},
			{run{keys: []string{"a", "b"}, status: 75, stderr: "semrun: key \"z\": no permit within 8s (--timeout)"}, nil, false},
			{run{key: "a", status: 112}, nil, true}, // one key: judge's alone
		} {
			if got := severalVerdict(c.r, c.k); (got == "") != c.ok {
				t.Errorf("severalVerdict(%+v, %+v) = %q, want ok %v", c.r, c.k, got, c.ok)
			}
		}
	})
	t.Run("slots", func(t *testing.T) {
		// SEMRUN_SLOTS and SEMRUN_KEY_SLOTS as the recorder reads them.
		if got, err := slotList("0,3"); err != nil || !slices.Equal(got, []int{0, 3}) {
			t.Errorf("slotList: got %v, %v; want 0, 3", got, err)
		}
		for _, bad := range []string{"", "a", "-1", "1,", "01", " 1", "1;2"} {
			if got, err := slotList(bad); err == nil {
				t.Errorf("slotList(%q) = %v, want an error", bad, got)
			}
		}
		if got, err := keySlotList("a=b=0,2\nc=1\nbig="); err != nil || len(got) != 3 || got[0].key != "a=b" || !slices.Equal(got[0].slots, []int{0, 2}) || got[1].key != "c" || got[2].slots != nil {
			t.Errorf("keySlotList: got %+v, %v; want a=b 0,2, c 1 and big none", got, err)
		}
		for _, bad := range []string{"", "a", "=1", "a=x", "a=1,", "a=1\n\nb=2"} {
			if got, err := keySlotList(bad); err == nil {
				t.Errorf("keySlotList(%q) = %+v, want an error", bad, got)
			}
		}
		dir := t.TempDir()
		rec := newRecorder(t, filepath.Join(dir, "kids"))
		for _, lines := range []string{
			"S 10 9 1000 12 a 31\nL \"1\" \"1,2\" - - -\nE 2000 done 0\n",
			fmt.Sprintf("S 10 9 1000 12 a 32\nL - %s %s - -\n", strconv.Quote("3"), strconv.Quote("a=3\nb=0,1")),
			"S 10 9 1000 12 a 33\nL \"x\" - - - -\n", // not a slot
			"S 10 9 1000 12 a 34\nL \"1\" - -\n",     // three fields
			fmt.Sprintf("S 10 9 1000 12 a 35\nL \"1\" \"1,2\" - %s %s\n", strconv.Quote("gpu é1"), strconv.Quote("gpu é1,b=\"2\"")),
		} {
			conn, err := net.Dial("unix", filepath.Join(dir, "kids"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(conn, lines)
			_ = conn.Close()
		}
		for deadline := time.Now().Add(hangBound); ; time.Sleep(5 * time.Millisecond) {
			_, ok := rec.get(35)
			if rec.quiet(0) == 0 && ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the recorder read no child 35 within %v", hangBound)
			}
		}
		if k, _ := rec.get(31); !k.slotted || !k.slotSet || k.slot != 1 || !slices.Equal(k.slots, []int{1, 2}) || k.keySlotsSet {
			t.Errorf("recorder, child 31: got %+v, want slot 1, slots 1,2, no SEMRUN_KEY_SLOTS", k)
		}
		if k, _ := rec.get(32); !k.slotted || k.slotSet || !slices.Equal(k.slots, []int{3}) || !k.keySlotsSet || len(k.keySlots) != 2 || !slices.Equal(k.keySlots[1].slots, []int{0, 1}) {
			t.Errorf("recorder, child 32: got %+v, want no SEMRUN_SLOT, slots 3, and a's and b's", k)
		}
		if k, _ := rec.get(31); k.slotNameSet || k.slotNamesSet {
			t.Errorf("recorder, child 31: got %+v, want no names", k)
		}
		if k, _ := rec.get(35); !k.slotNameSet || k.slotName != "gpu é1" || !k.slotNamesSet || !slices.Equal(k.slotNames, []string{"gpu é1", `b="2"`}) {
			t.Errorf("recorder, child 35: got %+v, want names gpu é1 and b=\"2\"", k)
		}
		if _, bad := rec.snapshot(); len(bad) != 2 {
			t.Errorf("recorder: lines it could not read %q, want 33's and 34's", bad)
		}

		// What a child was told: a, N=3; b, N=2; big, N=2000, which numbers
		// no slot.
		permits := func(key string) int { return map[string]int{"a": 3, "b": 2, "big": 2000}[key] }
		told := func(key string, slot int, slots ...int) kid {
			return kid{key: key, slotted: true, slot: slot, slotSet: slot >= 0, slots: slots}
		}
		// named: k told the name SEMRUN_SLOT_NAME ("" unset) and names
		// SEMRUN_SLOT_NAMES (none: unset).
		named := func(k kid, name string, names ...string) kid {
			k.slotName, k.slotNameSet, k.slotNames, k.slotNamesSet = name, name != "", names, names != nil
			return k
		}
		// several: a child of keys (its SEMRUN_FENCING_TOKENS), told ks.
		several := func(k kid, keys string, ks ...keySlots) kid {
			for key := range strings.SplitSeq(keys, ",") {
				k.tokens = append(k.tokens, keyToken{key: key})
			}
			k.keySlots, k.keySlotsSet = ks, ks != nil
			return k
		}
		for _, c := range []struct {
			k  kid
			ok bool
		}{
			{told("a", 2, 2), true},
			{told("a", 0, 0, 2), true},
			{told("a", 2, 0, 2), false},                                   // SEMRUN_SLOT not the first
			{told("a", -1, 0, 2), false},                                  // no SEMRUN_SLOT
			{kid{key: "a", slotted: true, slot: 0, slotSet: true}, false}, // no SEMRUN_SLOTS
			{kid{key: "a"}, false},                                        // none at all
			{kid{key: "big"}, true},                                       // none on a key that numbers none
			{told("big", 0, 0), false},                                    // some on it
			{several(told("a", 1, 1, 2), "a,b", keySlots{"a", []int{1, 2}}, keySlots{"b", []int{0}}), true},
			{several(told("a", 1, 1, 2), "a,b", keySlots{"a", []int{1}}, keySlots{"b", []int{0}}), false},    // a's are not SEMRUN_SLOTS
			{several(told("a", 1, 1, 2), "a,b", keySlots{"a", []int{1, 2}}), false},                          // b missing
			{several(told("a", 1, 1, 2), "a,b", keySlots{"b", []int{0}}, keySlots{"a", []int{1, 2}}), false}, // out of order
			{several(told("a", 1, 1, 2), "a,b"), false},                                                      // no SEMRUN_KEY_SLOTS
			{several(kid{key: "big", slotted: true}, "big,b", keySlots{"b", []int{1}}), true},
			{several(kid{key: "big", slotted: true}, "big,b", keySlots{"big", nil}, keySlots{"b", []int{1}}), false}, // big numbers none
			{named(told("a", 0, 0, 2), "x", "x", "z"), true},
			{named(told("a", 0, 0, 2), "z", "x", "z"), false}, // SEMRUN_SLOT_NAME not the first
			{named(told("a", 0, 0, 2), "x", "x"), false},      // a name short
			{named(told("a", 0, 0, 2), "x"), false},           // no SEMRUN_SLOT_NAMES
			{named(told("a", 0, 0, 2), "", "x", "z"), false},  // no SEMRUN_SLOT_NAME
		} {
			if got := slotsTold(c.k, permits); (got == "") != c.ok {
				t.Errorf("slotsTold(%+v) = %q, want ok %v", c.k, got, c.ok)
			}
		}

		// How many, and which: a, N=3.
		held := func(weight int, slots ...int) kid {
			return kid{key: "a", weight: weight, slotted: true, slots: slots}
		}
		for _, c := range []struct {
			k  kid
			ok bool
		}{
			{held(0, 2), true},
			{held(2, 0, 2), true},
			{held(2, 1), false},      // fewer than its weight
			{held(1, 0, 1), false},   // more
			{held(2, 1, 1), false},   // one twice
			{held(1, 3), false},      // past N
			{held(3, 0, 1, 2), true}, // all of them
			{kid{key: "a"}, true},    // told none: slotsTold's
			{kid{key: "big", slotted: true, slots: []int{5000}}, true}, // numbers none: slotsTold's
		} {
			if got := slotFaults([]kid{c.k}, permits); (len(got) == 0) != c.ok {
				t.Errorf("slotFaults(%+v) = %+v, want ok %v", c.k, got, c.ok)
			}
		}

		// Overlaps of a slot: a, N=3. Three holders at once are fine as
		// permits; two of them on slot 1 are not.
		s := func(run int, token, start, end int64, weight int, slots ...int) kid {
			return kid{run: run, key: "a", token: token, start: ms(start), end: ms(end), how: "done", weight: weight, slotted: true, slots: slots}
		}
		kids := []kid{
			s(1, 1, 0, 100, 1, 0), s(2, 2, 10, 100, 2, 1, 2), // all three slots
			s(3, 3, 100, 200, 1, 1), s(4, 4, 150, 250, 1, 2), // touching at 100: fine
			s(5, 5, 300, 400, 1, 0), s(6, 6, 310, 320, 1, 0), s(7, 7, 330, 340, 1, 1), // 6 takes 5's slot
		}
		if got := overlaps(kids, 3); len(got) != 0 {
			t.Errorf("overlaps of permits: got %+v, want none", got)
		}
		got := slotOverlaps(kids)
		if len(got) != 1 {
			t.Fatalf("slotOverlaps: got %+v, want slot 0 at 310ms", got)
		}
		if key, slot := keySlot(got[0].key); key != "a" || slot != 0 || got[0].at != ms(310) || len(got[0].running) != 2 || got[0].running[1].run != 6 {
			t.Errorf("slotOverlaps: got key %q slot %d at %v, running %+v; want slot 0 of a at 310ms, 5 and 6", key, slot, got[0].at, got[0].running)
		}
		if got := slotOverlaps(kids[:6:6]); len(got) != 1 {
			t.Errorf("slotOverlaps without run 7: got %d, want 1", len(got))
		}
		if got := slotOverlaps(slices.Delete(slices.Clone(kids), 5, 6)); len(got) != 0 {
			t.Errorf("slotOverlaps without run 6: got %+v, want none", got)
		}
		// Weights count as permits: 2 and 2 of a's 3.
		if got := overlaps([]kid{s(8, 8, 0, 100, 2, 0, 1), s(9, 9, 50, 150, 2, 1, 2)}, 3); len(got) != 1 {
			t.Errorf("overlaps of weights 2 and 2 of 3 permits: got %+v, want one", got)
		}
		// By token order: 11 was granted before 12 started, at 100, and
		// took slot 0, 10's: it held it beside 10, which ran until 150.
		late := []kid{s(10, 10, 0, 150, 1, 0), s(11, 12, 100, 120, 1, 1), s(12, 11, 200, 300, 1, 0)}
		if got := slotOverlaps(late); len(got) != 0 {
			t.Errorf("slotOverlaps as seen: got %+v, want none", got)
		}
		if g, _ := granted(late); len(slotOverlaps(g)) != 1 {
			t.Errorf("slotOverlaps by token order: got %+v, want slot 0 of 10 and 11", slotOverlaps(g))
		}
		// A child of several keys holds its slots of each.
		pk := perKey([]kid{
			several(kid{run: 20, key: "a", slotted: true, slots: []int{1}}, "a,b", keySlots{"a", []int{1}}, keySlots{"b", []int{0}}),
			several(kid{run: 21, key: "b", slotted: true, slots: []int{0}}, "b,a", keySlots{"b", []int{0}}, keySlots{"a", []int{2}}),
		})
		if len(pk) != 4 || !slices.Equal(pk[1].slots, []int{0}) || pk[1].key != "b" || !slices.Equal(pk[3].slots, []int{2}) {
			t.Errorf("perKey: got %+v, want a 1, b 0, b 0, a 2", pk)
		}
		if got := slotOverlaps(pk); len(got) != 1 {
			t.Errorf("slotOverlaps per key: got %+v, want slot 0 of b", got)
		}

		// Every step of a hold is told its hold's slots.
		h1, h2 := &hold{id: 1, key: "a", slots: []int{2}}, &hold{id: 2, key: "a"}
		steps := []kid{
			s(30, 5, 0, 10, 1, 2), s(31, 5, 20, 30, 1, 1), // h1's second step told another
			s(32, 6, 0, 10, 1, 0), s(33, 6, 20, 30, 1, 0), // h2's, as its first
			{run: 34, key: "a"}, // h2's, told none (slotsTold's)
		}
		byRun := map[int]*hold{30: h1, 31: h1, 32: h2, 33: h2, 34: h2}
		if got := holdSlots(steps, byRun); len(got) != 1 || got[0].k.run != 31 || !slices.Equal(h2.slots, []int{0}) {
			t.Errorf("holdSlots: got %+v, h2's %v; want 31's, and h2 holding 0", got, h2.slots)
		}
		if got := holders(nil, []*hold{{id: 3, key: "a", handle: "h3", slots: []int{1}, acquire: &run{exited: ms(10)}, until: ms(20)}}, nil); len(got) != 1 || !got[0].slotted || !slices.Equal(got[0].slots, []int{1}) {
			t.Errorf("holders: got %+v, want a hold of slot 1", got)
		}
	})
	t.Run("capacity", func(t *testing.T) {
		// key-capacity's operator on a, of N=4: lowered to 2, named, unset,
		// lowered to 3 (failed: unknown until the next act), named anew.
		// Times in ms; the wall clock (µs, as tokens count) runs apart.
		wall := func(at int64) int64 { return 1e12 + at*1000 }
		act := func(state string, start, end int64, status int) capacityChange {
			ch := capacityChange{key: "a", state: state, start: ms(start), end: ms(end), startWall: wall(start), endWall: wall(end), status: status}
			switch state {
			case "lowered":
				ch.lowered = 2 + int(start/4000)
			case "named":
				for s := range 4 {
					ch.names = append(ch.names, fmt.Sprintf("gpu é%d.%d", start/1000, s))
				}
			}
			return ch
		}
		changes := []capacityChange{
			act("named", 5000, 5100, 0), // given out of order: sorted by start
			act("lowered", 1000, 1100, 0), act("named", 2000, 2100, 0), act("unset", 3000, 3100, 0), act("lowered", 4000, 4100, 125),
		}
		ws := capWindows(changes, ms(0), wall(0))
		var got []string
		for _, w := range ws {
			got = append(got, fmt.Sprintf("%s %d %d..%d", w.state, w.lowered, (w.from-1e12)/1000, min(w.to, wall(9999))/1000-1e9))
		}
		if want := []string{"unset 0 0..1000", "lowered 2 1100..2000", "named 0 2100..3000", "unset 0 3100..4000", " 3 4100..5000", "named 0 5100..9999"}; !slices.Equal(got, want) {
			t.Fatalf("capWindows: got %q, want %q", got, want)
		}
		if ws[2].names[3] != "gpu é2.3" || ws[5].names[0] != "gpu é5.0" || ws[5].toMono != math.MaxInt64 {
			t.Fatalf("capWindows: got %+v, want the names of each act, the last window for ever", ws)
		}
		// k: a child of a granted at token, started at start, told slots
		// and names (nil: none).
		k := func(token, start int64, slots []int, names ...string) kid {
			runs++
			c := kid{run: runs, key: "a", token: wall(token), start: ms(start), end: ms(start + 100), how: "done", slotted: true, slotSet: true, slot: slots[0], slots: slots, weight: len(slots)}
			if names != nil {
				c.slotName, c.slotNameSet, c.slotNames, c.slotNamesSet = names[0], true, names, true
			}
			return c
		}
		n2, n5 := ws[2].names, ws[5].names
		for _, c := range []struct {
			k  kid
			ok bool
		}{
			{k(900, 950, []int{3}), true},           // before the first act, nothing kept
			{k(900, 950, []int{3}, n2[3]), false},   // ...and named
			{k(1200, 1250, []int{1}), true},         // lowered to 2
			{k(1200, 1250, []int{0, 1}), true},      // both
			{k(1200, 1250, []int{2}), false},        // past it
			{k(1200, 1250, []int{1, 2}), false},     // one past it
			{k(1200, 1250, []int{1}, n2[1]), false}, // told a name
			{k(1050, 1250, []int{3}), true},         // granted as the act ran: the boundary is not judged
			{k(1900, 2050, []int{3}), true},         // started as the next act ran: not judged
			{k(1900, 1950, []int{3}), false},        // started before it
			{k(2200, 2250, []int{2}, n2[2]), true},  // named
			{k(2200, 2250, []int{1, 3}, n2[1], n2[3]), true},
			{k(2200, 2250, []int{2}, n2[1]), false},    // another slot's name
			{k(2200, 2250, []int{1, 3}, n2[1]), false}, // a name short
			{k(2200, 2250, []int{2}), false},           // no name
			{k(3200, 3250, []int{3}), true},            // unset
			{k(3200, 3250, []int{3}, n2[3]), false},    // the names unset were told
			{k(4200, 4250, []int{3}, n2[3]), true},     // after a failed act: unknown
			{k(6000, 6050, []int{0}, n5[0]), true},     // named anew
			{k(6000, 6050, []int{0}, n2[0]), false},    // the old names
			{kid{run: 99, key: "b", token: wall(1200), start: ms(1250), slotted: true, slots: []int{3}}, true}, // another key
		} {
			if past, misnamed := capacityFaults([]kid{c.k}, ws); (len(past)+len(misnamed) == 0) != c.ok {
				t.Errorf("capacityFaults(%+v) = %+v, %+v; want ok %v", c.k, past, misnamed, c.ok)
			}
		}

		// At most 2 at once of those granted while lowered to 2, holders
		// from before it left out.
		span := func(c kid, end int64) kid { c.end = ms(end); return c }
		kids := []kid{span(k(900, 950, []int{3}), 1800), span(k(1200, 1250, []int{0}), 1600), span(k(1300, 1350, []int{1}), 1700)}
		if got := loweredOverlaps(kids, ws); len(got) != 0 {
			t.Errorf("loweredOverlaps: got %+v, want none", got)
		}
		if got := loweredOverlaps(append(slices.Clone(kids), span(k(1400, 1450, []int{0}), 1500)), ws); len(got) != 1 || got[0].at != ms(1450) || len(got[0].running) != 3 {
			t.Errorf("loweredOverlaps with a third at 1450ms: got %+v, want one", got)
		}
		if got := loweredOverlaps(append(slices.Clone(kids), span(k(1050, 1450, []int{0}), 1500)), ws); len(got) != 0 {
			t.Errorf("loweredOverlaps with a third granted as the act ran: got %+v, want none", got)
		}
		if got := loweredOverlaps(append(slices.Clone(kids), span(k(1650, 1650, []int{0, 1}), 1750)), ws); len(got) != 1 {
			t.Errorf("loweredOverlaps with two permits beside one: got %+v, want one", got)
		}
	})
	t.Run("priorities", func(t *testing.T) {
		none := func(from, to int64) time.Duration { return 0 }
		// p is a run of priority prio (age: --priority-age 1s) launched at
		// launch ms, exiting with status at exit; with a child from start
		// (0: none) holding token.
		id := 0
		p := func(prio int, age bool, launch, start, token, exit int64, status int) prioRun {
			id++
			x := prioRun{r: run{id: id, launched: ms(launch), exited: ms(exit), status: status, timeout: severalWait, mayBeBusy: true}, prio: prio}
			if age {
				x.age = time.Second
			}
			if start > 0 {
				x.k = &kid{run: id, token: token, start: ms(start), end: ms(start + 200), how: "done"}
			}
			return x
		}
		// Lost: no child, exited past --timeout and healFailure; or never.
		runs := []prioRun{
			p(0, false, 0, 0, 0, 10_000, statusBusy),      // gave up at its --timeout
			p(0, false, 0, 500, 1, 700, 0),                // ran
			p(0, false, 0, 0, 0, 16_500, statusBusy),      // 16.5s: lost
			p(0, false, 20_000, 0, 0, 0, 0),               // never exited: lost
			p(0, false, 30_000, 0, 0, 45_000, statusBusy), // waited through a fault of 3s: 10+4+3 = 17s
		}
		faults := []fault{{what: "pause", start: ms(31_000), heal: ms(34_000)}}
		if got := lostFromLine(runs, faults, none); len(got) != 2 || !strings.Contains(got[0], "run 3 ") || !strings.Contains(got[1], "run 4 ") {
			t.Errorf("lostFromLine: got %q, want runs 3 and 4", got)
		}
		runs[2].r.killed = true
		runs[3].r.interrupted = true
		if got := lostFromLine(runs, faults, none); len(got) != 0 {
			t.Errorf("lostFromLine with the lost killed and SIGTERMed: got %q, want none", got)
		}
		if got := lostFromLine(runs, nil, none); len(got) != 1 || !strings.Contains(got[0], "run 5 ") {
			t.Errorf("lostFromLine without the fault: got %q, want run 5", got)
		}
		if got := lostFromLine(runs, nil, func(from, to int64) time.Duration { return 2 * time.Second }); len(got) != 0 {
			t.Errorf("lostFromLine on a loaded machine: got %q, want none", got)
		}

		// The top caller: served within healFailure, never gives up, away
		// from faults; others are not judged.
		id = 0
		runs = []prioRun{
			p(100, false, 1000, 1300, 1, 1500, 0),           // 300ms
			p(100, false, 2000, 7000, 2, 7200, 0),           // 5s: late
			p(100, false, 8000, 0, 0, 18_000, statusBusy),   // gave up
			p(100, false, 20_000, 0, 0, 30_000, statusBusy), // gave up, by a fault
			p(50, false, 31_000, 40_000, 3, 40_200, 0),      // not the top
			p(100, true, 31_000, 40_000, 4, 40_200, 0),      // aged: not judged
			p(100, false, 500, 4000, 5, 4200, 0),            // before the first child
		}
		faults = []fault{{what: "kill", start: ms(25_000), heal: ms(26_000)}}
		waits, late := topWaits(runs, ms(1000), ms(60_000), faults, none)
		if len(waits) != 1 || waits[0] != 300*time.Millisecond || len(late) != 2 || !strings.Contains(late[0], "run 2 ") || !strings.Contains(late[1], "run 3 ") {
			t.Errorf("topWaits: got %v, %q; want [300ms], runs 2 and 3", waits, late)
		}
		if waits, late := topWaits(nil, 0, ms(60_000), nil, none); waits != nil || late != nil {
			t.Errorf("topWaits of no runs: got %v, %q", waits, late)
		}
		if _, late := topWaits(runs, ms(1000), ms(60_000), faults, func(from, to int64) time.Duration { return 2 * time.Second }); len(late) != 1 {
			t.Errorf("topWaits on a loaded machine: got %q, want run 3 alone", late)
		}

		// Order: b (higher, no age) seen waiting in line, granted after a
		// (whose grant came after the read), or never.
		id = 0
		tok := func(ms int64) int64 { return ms * 1000 } // Redis's clock, µs
		runs = []prioRun{
			p(-100, false, 0, 5000, tok(2000), 5200, 0),  // 1: a, granted at 2s
			p(50, false, 500, 6000, tok(3000), 6200, 0),  // 2: granted after a: wrong
			p(50, false, 500, 1800, tok(1500), 2000, 0),  // 3: granted before a: right
			p(80, true, 500, 6000, tok(3100), 6200, 0),   // 4: aged: not judged
			p(50, false, 0, 0, 0, 10_000, statusBusy),    // 5: waited until 10s: wrong
			p(50, false, 0, 0, 0, 2500, 143),             // 6: SIGTERMed: not judged
			p(50, false, 0, 0, 0, 1600, statusBusy),      // 7: its --timeout (1.5s) ran out before a's grant
			p(-100, false, 0, 0, 0, 10_000, statusBusy),  // 8: equal to a: not judged
			p(-100, false, 0, 1100, tok(1050), 1300, 0),  // 9: granted during the read: not judged
			p(50, false, 3000, 0, 0, 13_000, statusBusy), // 10: pid 2 again, launched after the read
		}
		for i := range runs {
			runs[i].pid = runs[i].r.id
		}
		runs[5].r.interrupted = true
		runs[6].r.timeout = 1500 * time.Millisecond
		runs[9].pid = 2
		seen := []seenLine{{from: ms(1000), to: ms(1100), waiters: []seenWaiter{{2, 50}, {3, 50}, {4, 80}, {5, 50}, {6, 50}, {7, 50}, {8, -100}, {99, 100}}}}
		if got := shownPriorities(runs, seen); len(got) != 0 {
			t.Errorf("shownPriorities: got %q, want none", got)
		}
		wrongly := slices.Clone(seen)
		wrongly[0].waiters = []seenWaiter{{2, 49}, {4, 79}, {4, 90}, {5, 50}, {99, 1}}
		if got := shownPriorities(runs, wrongly); len(got) != 2 || !strings.Contains(got[0], "run 2 ") || !strings.Contains(got[1], "run 4 ") {
			t.Errorf("shownPriorities: got %q, want run 2 (shown 49 for 50) and run 4 (aged, shown 79 for 80)", got)
		}
		never := func(from, to int64) bool { return false }
		judged, wrong := outOfOrder(runs, seen, 0, nil, never)
		if judged != 3 || len(wrong) != 2 || !strings.Contains(wrong[0], "while run 2 ") || !strings.Contains(wrong[1], "while run 5 ") {
			t.Errorf("outOfOrder: got %d judged, %q; want 3, a granted while runs 2 and 5 waited", judged, wrong)
		}
		if judged, wrong := outOfOrder(runs, seen, int64(time.Second), nil, never); judged != 0 || len(wrong) != 0 {
			t.Errorf("outOfOrder with a's grant a second earlier, during the read: got %d judged, %q; want none", judged, wrong)
		}
		if judged, wrong := outOfOrder(runs, seen, 0, []fault{{what: "SIGSTOP", start: ms(1500), heal: ms(1600)}}, never); judged != 0 || len(wrong) != 0 {
			t.Errorf("outOfOrder with a fault near: got %d judged, %q; want none", judged, wrong)
		}
		if judged, _ := outOfOrder(runs, seen, 0, nil, func(from, to int64) bool { return true }); judged != 0 {
			t.Errorf("outOfOrder on a starved machine: got %d judged, want none", judged)
		}
	})
	t.Run("lag", func(t *testing.T) {
		// Probes of 50ms every 250ms, one of 3s launched at 10s; one under
		// way since 20s.
		p := &prober{}
		for at := int64(0); at < 20_000; at += 250 {
			d := int64(50)
			if at == 10_000 {
				d = 3000
			}
			p.probes = append(p.probes, probe{launched: ms(at), started: ms(at + d)})
		}
		p.cur = mono() - int64(5*time.Second)
		for _, c := range []struct {
			from, to int64
			want     time.Duration
		}{
			{ms(2000), ms(4000), 50 * time.Millisecond},
			{ms(12000), ms(12500), 3 * time.Second},       // under way then
			{ms(13500), ms(14000), 3 * time.Second},       // a second before
			{ms(14500), ms(15000), 50 * time.Millisecond}, // over by then
			{ms(9000), ms(9900), 50 * time.Millisecond},   // launched after
			{mono(), mono(), 5 * time.Second},             // the one under way, 5s and more
		} {
			got := p.lag(c.from, c.to)
			if got < c.want || c.want < time.Second && got != c.want || got > c.want+time.Second {
				t.Errorf("lag(%v, %v): got %v, want %v", time.Duration(c.from), time.Duration(c.to), got, c.want)
			}
		}
		if got := (*prober)(nil).lag(0, ms(1000)); got != 0 {
			t.Errorf("lag without a prober: got %v, want 0", got)
		}
		if p.allowance(ms(12000), ms(12500)) != 6*time.Second {
			t.Errorf("allowance: got %v, want twice the lag", p.allowance(ms(12000), ms(12500)))
		}
		machine = p
		defer func() { machine = nil }()
		for _, c := range []struct {
			status   int
			from, to int64
			want     bool
		}{
			{statusLost, ms(12000), ms(12500), true},
			{statusFailure, ms(12000), ms(12500), true},
			{statusLost, ms(2000), ms(4000), false}, // a quiet machine excuses nothing
			{7, ms(12000), ms(12500), false},        // nor another status
		} {
			if got := starved(c.status, c.from, c.to); got != c.want {
				t.Errorf("starved(%d, %v, %v): got %v, want %v", c.status, time.Duration(c.from), time.Duration(c.to), got, c.want)
			}
		}
	})
}

// describe shows a child for a report.
func (c *cluster) describe(k kid) string {
	slots := ""
	if k.slotted {
		slots = fmt.Sprintf(" slots %v", k.slots)
	}
	return fmt.Sprintf("{run %d pid %d token %d%s from %s to %s (%s)}", k.run, k.pid, k.token, slots, c.rel(k.start), c.rel(k.end), k.how)
}

// faultsNear lists the faults within one TTL of the instant at.
func (c *cluster) faultsNear(at int64) string {
	var out []string
	for _, f := range c.faults {
		if at >= f.start-int64(ttl) && at <= f.heal+int64(ttl) {
			out = append(out, fmt.Sprintf("%s %s..%s", f.what, c.rel(f.start), c.rel(f.heal)))
		}
	}
	if len(out) == 0 {
		return "no fault within a TTL"
	}
	return strings.Join(out, ", ")
}
