//go:build unix

package localstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// A reader that finds the log rewritten in place and grown past where it
// was, unseen in between, reads it whole: the line it took last is not
// where it was. It takes every line that came since, once.
func TestReadLogAfterRewriteInPlaceUnseen(t *testing.T) {
	s, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err := s.openKey("k", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	note := func(from, n int) {
		for i := range n {
			k.note(semaphore.Event{Kind: semaphore.EventCapacity, Capacity: from + i})
		}
	}
	read := func(pos *logPos) []int {
		t.Helper()
		events, err := k.readLog(pos, "k")
		if err != nil {
			t.Fatalf("readLog: %v", err)
		}
		var got []int
		for _, e := range events {
			got = append(got, e.Capacity)
		}
		return got
	}
	want := func(from, n int) string {
		var w []int
		for i := range n {
			w = append(w, from+i)
		}
		return fmt.Sprint(w)
	}
	note(1, 200)
	pos := logPos{start: -1}
	if got := read(&pos); fmt.Sprint(got) != want(1, 200) {
		t.Fatalf("first read: got %v, want 1 to 200", got)
	}
	// Its last 10 lines, in place, as a member who may not replace it
	// writes them, then 300 more: past where the reader was.
	path := filepath.Join(k.path, eventsFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kept, n := newestLines(b, false, 10, len(b))
	if n != 10 {
		t.Fatalf("newestLines: got %d lines, want 10", n)
	}
	if err := k.writeInPlace(eventsFile, kept); err != nil {
		t.Fatal(err)
	}
	note(201, 300)
	if fi, _ := os.Stat(path); fi.Size() < pos.end {
		t.Fatalf("the log: %d bytes, want more than the %d read before", fi.Size(), pos.end)
	}
	if got := read(&pos); fmt.Sprint(got) != want(201, 300) {
		t.Errorf("read after the rewrite: got %v, want 201 to 500", got)
	}
	if got := read(&pos); len(got) != 0 {
		t.Errorf("read again: got %v, want nothing new", got)
	}
}

// newestLines keeps whole lines only, the newest, within its bounds.
func TestNewestLines(t *testing.T) {
	for _, c := range []struct {
		in        string
		cut       bool
		n, most   int
		want      string
		wantCount int
	}{
		{"a\nbb\nccc\n", false, 5, 100, "a\nbb\nccc\n", 3},
		{"a\nbb\nccc\n", false, 2, 100, "bb\nccc\n", 2},
		{"a\nbb\nccc\n", true, 5, 100, "bb\nccc\n", 2},
		{"a\nbb\nccc\nhalf", false, 5, 100, "a\nbb\nccc\n", 3},
		{"a\nbb\nccc\n", false, 5, 7, "bb\nccc\n", 2},
		{"no newline at all", true, 5, 100, "", 0},
		{"", false, 5, 100, "", 0},
	} {
		got, count := newestLines([]byte(c.in), c.cut, c.n, c.most)
		if !bytes.Equal(got, []byte(c.want)) || count != c.wantCount {
			t.Errorf("newestLines(%q, cut %v, %d, %d): got %q, %d, want %q, %d", c.in, c.cut, c.n, c.most, got, count, c.want, c.wantCount)
		}
	}
}

// Stats read back are what were written; a file that is not semrun's
// stats, or has a count below 0, is none.
func TestStatsRoundTrip(t *testing.T) {
	var st stats
	st.Last, st.Lines = 1764659143123456, 1001
	for range 3 {
		count(&st.Counts, semaphore.Event{Kind: semaphore.EventGrant, Waited: 7 * time.Second})
		count(&st.Counts, semaphore.Event{Kind: semaphore.EventRelease, Held: time.Hour})
	}
	count(&st.Counts, semaphore.Event{Kind: semaphore.EventBusy})
	count(&st.Counts, semaphore.Event{Kind: semaphore.EventLost})
	got, err := decodeStats(st.encode(), "stats")
	if err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("decodeStats(encode(%+v)): got %+v, %v, want it back", st, got, err)
	}
	if got, err := decodeStats(nil, "stats"); err != nil || !reflect.DeepEqual(got, stats{}) {
		t.Errorf("decodeStats of an empty file: got %+v, %v, want none", got, err)
	}
	b := st.encode()
	for _, bad := range [][]byte{
		[]byte("3" + string(b[1:])),                           // another version
		[]byte("1" + string(b[1:])),                           // version 1, with more buckets
		bytes.Replace(b, []byte(" 1001 "), []byte(" -1 "), 1), // below 0
		b[:len(b)-3], // a number short
		[]byte(`{"v":1,"grants":3}`),
	} {
		var e *badFileError
		if _, err := decodeStats(bad, "stats"); !errors.As(err, &e) {
			t.Errorf("decodeStats(%q): got %v, want a *badFileError", bad, err)
		}
	}
}

// Stats of version 1, counted in semaphore.OldBuckets before the buckets
// began at 10ms, are read with each count in the bucket of its bound, and
// written as version 2: no count goes down.
func TestStatsOfTheOldBuckets(t *testing.T) {
	old := len(semaphore.OldBuckets)
	// 4 waits of at most 1s, 2 of 5s to 15s, 1 longer than a day; a hold
	// of at most 1h.
	nums := []string{"1", "1764659143123456", "12", "7", "1", "0", "0", "0", "60000000000", "90000000000000"}
	waits := make([]string, old+1)
	holds := make([]string, old+1)
	for i := range waits {
		waits[i], holds[i] = "0", "0"
	}
	waits[0], waits[2], waits[old] = "4", "2", "1"
	holds[9] = "1"
	nums = append(append(append(nums, waits...), "3600000000000"), holds...)
	st, err := decodeStats([]byte(strings.Join(nums, " ")+"\n"), "stats")
	if err != nil {
		t.Fatalf("decodeStats of version 1: %v", err)
	}
	want := make([]uint64, len(semaphore.Buckets)+1)
	want[semaphore.Bucket(time.Second)], want[semaphore.Bucket(15*time.Second)], want[len(semaphore.Buckets)] = 4, 2, 1
	if !reflect.DeepEqual(st.Wait.Counts, want) || st.Grants != 7 || st.Lines != 12 || st.Wait.Sum != 25*time.Hour ||
		st.Held.Count() != 1 || st.Held.Counts[semaphore.Bucket(time.Hour)] != 1 || st.RecentHold != time.Minute {
		t.Errorf("version 1 read: got %+v, want waits %v, 7 grants, a hold of at most 1h", st, want)
	}
	count(&st.Counts, semaphore.Event{Kind: semaphore.EventGrant, Waited: 30 * time.Millisecond})
	again, err := decodeStats(st.encode(), "stats")
	want[semaphore.Bucket(30*time.Millisecond)]++
	if err != nil || !reflect.DeepEqual(again, st) || !reflect.DeepEqual(again.Wait.Counts, want) || !bytes.HasPrefix(st.encode(), []byte("2 ")) {
		t.Errorf("written again: got %+v, %v; want version 2 with waits %v", again, err, want)
	}
}

// A line the log's writer makes is one its readers take, whatever the
// event says: a loss is told from the file its holder left, which any
// member of a group may have written.
func TestLineOfIsReadBack(t *testing.T) {
	exit := 300
	e := semaphore.Event{
		Kind: semaphore.EventLost, Holder: "../../etc",
		HolderInfo: semaphore.HolderInfo{Host: "h\x1b[31m\u202e", PID: -5, Command: "x\u2028y", Label: "\xff"},
		Permits:    semaphore.MaxPermits + 1, Weight: -3, Token: -7, Capacity: -1, ExitStatus: &exit,
		Held: -time.Second, Reason: string(bytes.Repeat([]byte("x"), 5000)),
	}
	now := time.Now().UnixMicro()
	l := lineOf(e)
	l.T = now
	if err := l.check(now); err != nil {
		t.Errorf("the line of a loss told by a planted file: readers skip it (%v), want them to take it", err)
	}
}

// A key's log never takes more than docs/watching.md says, however long
// its events: filled with the longest lines semrun writes (every text at
// its bound, in characters JSON escapes), it stays under that bound from
// its first line to well past its rewrites, and keeps lines.
func TestLogStaysWithinItsDocumentedSize(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "watching.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`never more than (\d+) KiB`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/watching.md: no \"never more than N KiB\" for the local log")
	}
	kib, _ := strconv.Atoi(string(m[1]))
	bound := int64(kib) << 10

	s, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, err := s.openKey("k", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.close()
	long := func(n int) string { return strings.Repeat(`"`, n) } // 2 bytes each in JSON
	status := 255
	e := semaphore.Event{
		Kind: semaphore.EventRelease, Holder: newID(), Permits: semaphore.MaxPermits, Weight: semaphore.MaxPermits,
		HolderInfo: semaphore.HolderInfo{Host: long(maxInfoText), PID: 1 << 30, Command: long(maxInfoText), Label: long(semaphore.MaxLabel)},
		Token:      1 << 62, ExitStatus: &status, Held: 30 * 24 * time.Hour, Cooling: 30 * 24 * time.Hour,
		Reason: long(semaphore.MaxReason),
	}
	for i := range semaphore.MaxSlots { // as many as fit, names left out
		e.Numbers = append(e.Numbers, i)
		e.Names = append(e.Names, fmt.Sprintf("%04d", i)+long(semaphore.MaxSlotName-4))
	}
	line, err := lineOf(e).encode()
	if err != nil {
		t.Fatalf("the longest line: %v", err)
	}
	log := filepath.Join(k.path, eventsFile)
	most, rewrites, last := int64(0), 0, int64(0)
	for range 4 * int(bound) / len(line) {
		k.note(e)
		fi, err := os.Stat(log)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, fi.Size())
		if fi.Size() < last {
			rewrites++
		}
		last = fi.Size()
	}
	if most > bound {
		t.Errorf("the log of lines of %d bytes: got up to %d bytes, want at most %d (%d KiB, as docs/watching.md says)", len(line), most, bound, kib)
	}
	if rewrites < 2 || last < bound/2 {
		t.Errorf("the log: %d rewrites, %d bytes at the end; want at least 2, and at least half the bound kept", rewrites, last)
	}
	t.Logf("lines of %d bytes: the log took up to %d bytes (%d rewrites)", len(line), most, rewrites)
}

// A line keeps a holder's slots, and leaves out their names, then their
// numbers, rather than the event, when they would make it too long;
// numbers read back that no grant could hold make the line one semrun
// did not write, names of another count leave them unnamed.
func TestEventLineSlots(t *testing.T) {
	now := time.Now().UnixMicro()
	roundTrip := func(e semaphore.Event) (semaphore.Event, int) {
		t.Helper()
		l := lineOf(e)
		l.T = now
		b, err := l.encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		var back eventLine
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.check(now); err != nil {
			t.Fatalf("check of %s: %v", b, err)
		}
		return back.event("k"), len(b)
	}
	named := semaphore.Slots{Numbers: []int{0, 3}, Names: []string{"gpu <0>", "gpu & 3"}}
	if got, _ := roundTrip(semaphore.Event{Kind: semaphore.EventGrant, Slots: named}); !reflect.DeepEqual(got.Slots, named) {
		t.Errorf("slots read back: got %+v, want %+v", got.Slots, named)
	}
	var every semaphore.Slots
	for i := range semaphore.MaxSlots {
		every.Numbers = append(every.Numbers, i)
		every.Names = append(every.Names, fmt.Sprintf("%04d", i)+strings.Repeat("é", 50))
	}
	got, n := roundTrip(semaphore.Event{Kind: semaphore.EventRelease, HolderInfo: semaphore.HolderInfo{Label: strings.Repeat("x", semaphore.MaxLabel)}, Slots: every})
	if !slices.Equal(got.Numbers, every.Numbers) || got.Names != nil || n > maxEventLine {
		t.Errorf("every slot, with long names: got %d numbers, %d names in %d bytes; want every number, no name, at most %d bytes", len(got.Numbers), len(got.Names), n, maxEventLine)
	}
	got, _ = roundTrip(semaphore.Event{Kind: semaphore.EventGrant, Slots: semaphore.Slots{Numbers: []int{1}, Names: []string{"a", "b"}}})
	if !slices.Equal(got.Numbers, []int{1}) || got.Names != nil {
		t.Errorf("names of another count: got %+v, want slot 1, unnamed", got.Slots)
	}
	for _, bad := range []string{"1,0", "0,0", "-1", "1024", "a", "01", "0,", ","} {
		l := eventLine{T: now, Kind: semaphore.EventGrant, Slots: bad}
		if err := l.check(now); err == nil {
			t.Errorf("a line of slots %q: check passed, want it skipped", bad)
		}
	}
}
