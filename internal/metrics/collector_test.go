package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/semrun/semrun/internal/metrics/metricstest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// fixedStore is the seam the collector is fed through: the KeyStatus
// values (and Counts, which no store fills yet) a test sets, and what it
// was asked.
type fixedStore struct {
	mu       sync.Mutex
	keys     []string
	keysErr  error
	statuses []semaphore.KeyStatus // nil: a status of each key asked
	err      error
	listed   int        // calls of Keys
	asked    [][]string // the keys of each call of Status
}

func (s *fixedStore) Keys(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed++
	return s.keys, s.keysErr
}

func (s *fixedStore) Status(_ context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, keys)
	if s.err != nil {
		return nil, s.err
	}
	if s.statuses != nil {
		return s.statuses, nil
	}
	var out []semaphore.KeyStatus
	for _, k := range keys {
		out = append(out, semaphore.KeyStatus{Key: k, Capacity: 1})
	}
	return out, nil
}

// collectText is what c collects, and that text parsed back with the
// client library's own parser.
func collectText(t *testing.T, c *Collector) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	text := string(c.Text())
	return metricstest.Parse(t, text), text
}

// checkBuckets checks that h's buckets are semaphore.Buckets in seconds,
// cumulative as want says (one count per bound), with count and sum.
func checkBuckets(t *testing.T, what string, h *dto.Histogram, want []uint64, count uint64, sum float64) {
	t.Helper()
	if h == nil {
		t.Fatalf("%s: no histogram", what)
	}
	var bounds []float64
	var got []uint64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue // the text format's +Inf: the count
		}
		bounds, got = append(bounds, b.GetUpperBound()), append(got, b.GetCumulativeCount())
	}
	var wantBounds []float64
	for _, b := range semaphore.Buckets {
		wantBounds = append(wantBounds, b.Seconds())
	}
	if !slices.Equal(bounds, wantBounds) {
		t.Errorf("%s: got upper bounds %v, want %v", what, bounds, wantBounds)
	}
	if !slices.Equal(got, want) || h.GetSampleCount() != count || h.GetSampleSum() != sum {
		t.Errorf("%s: got buckets %v, count %d, sum %v; want %v, %d, %v", what, got, h.GetSampleCount(), h.GetSampleSum(), want, count, sum)
	}
}

func TestMetricsOfAKeyStatus(t *testing.T) {
	t.Parallel()
	var wait, held semaphore.Histogram
	for _, d := range []time.Duration{500 * time.Millisecond, 3 * time.Second, 3 * time.Second, 25 * time.Hour} {
		wait.Observe(d)
	}
	held.Observe(90 * time.Second)
	held.Observe(2 * time.Minute) // on a bound: in its bucket
	st := semaphore.KeyStatus{
		Key: "pdf", Capacity: 3, StoredCapacity: 5, Held: 3,
		Holders: []semaphore.Holder{{Age: 90 * time.Second}, {Age: 10 * time.Minute}},
		Waiters: []semaphore.Waiter{{}, {}, {}},
		// A cooling permit is held but has no holder: no age.
		Cooling: []semaphore.Cooling{{EndsIn: time.Hour}},
		Paused:  &semaphore.Pause{Reason: "upkeep"},
		Counts: &semaphore.Counts{Grants: 7, Busy: 2, Timeouts: 1, Losses: 4, Revokes: 5, Wait: wait, Held: held,
			RecentHold: time.Minute},
	}
	fams, text := collectText(t, NewCollector(&fixedStore{statuses: []semaphore.KeyStatus{st}}, []string{"pdf"}, t.Logf))
	for name, typ := range metricstest.Families {
		f := fams[name]
		switch {
		case f == nil:
			t.Errorf("%s is missing:\n%s", name, text)
		case f.GetType() != typ:
			t.Errorf("%s: got type %v, want %v", name, f.GetType(), typ)
		case f.GetHelp() == "":
			t.Errorf("%s has no HELP", name)
		}
	}
	for name := range fams {
		if _, ok := metricstest.Families[name]; !ok {
			t.Errorf("%s: a family no one asked for (the Go runtime's, the process's?)", name)
		}
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"semrun_key_readable", 1},
		{"semrun_capacity_permits", 5}, // the stored capacity wins
		{"semrun_held_permits", 3},
		{"semrun_waiting", 3},
		{"semrun_paused", 1},
		{"semrun_oldest_holder_age_seconds", 600},
		{"semrun_grants_total", 7},
		{"semrun_busy_total", 2},
		{"semrun_timeouts_total", 1},
		{"semrun_losses_total", 4},
		{"semrun_revokes_total", 5},
	} {
		if got := metricstest.Value(fams, tc.name, "pdf"); got != tc.want {
			t.Errorf("%s{key=\"pdf\"}: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := metricstest.Value(fams, "semrun_up", ""); got != 1 {
		t.Errorf("semrun_up: got %v, want 1", got)
	}
	//                              10ms 25ms 50ms 100ms 250ms 500ms 1s 5s 15s 30s 1m 2m 5m 10m 30m 1h 2h 4h 8h 24h
	checkBuckets(t, "semrun_wait_duration_seconds", metricstest.Series(fams, "semrun_wait_duration_seconds", "pdf").GetHistogram(),
		[]uint64{0, 0, 0, 0, 0, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, 4, 90006.5)
	checkBuckets(t, "semrun_hold_duration_seconds", metricstest.Series(fams, "semrun_hold_duration_seconds", "pdf").GetHistogram(),
		[]uint64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2}, 2, 210)
	// The text itself, as node_exporter and Prometheus read it.
	for _, line := range []string{
		`# TYPE semrun_grants_total counter`,
		`semrun_grants_total{key="pdf"} 7`,
		`semrun_wait_duration_seconds_bucket{key="pdf",le="5"} 3`,
		`semrun_wait_duration_seconds_bucket{key="pdf",le="0.5"} 1`,
		`semrun_wait_duration_seconds_bucket{key="pdf",le="+Inf"} 4`,
		`semrun_wait_duration_seconds_count{key="pdf"} 4`,
	} {
		if !strings.Contains(text, "\n"+line+"\n") {
			t.Errorf("the text lacks the line %q:\n%s", line, text)
		}
	}
}

// A key nobody asked for yet has no capacity (not 0, which
// semrun_held_permits >= semrun_capacity_permits would take for full), and counters and
// histograms at 0 when the store counted nothing.
func TestMetricsOfANewKey(t *testing.T) {
	t.Parallel()
	fams, text := collectText(t, NewCollector(&fixedStore{statuses: []semaphore.KeyStatus{{Key: "new"}}}, []string{"new"}, t.Logf))
	if m := metricstest.Series(fams, "semrun_capacity_permits", "new"); m != nil {
		t.Errorf("semrun_capacity_permits of a key of unknown capacity: got %v, want none", m)
	}
	for _, name := range []string{"semrun_held_permits", "semrun_waiting", "semrun_paused", "semrun_oldest_holder_age_seconds",
		"semrun_grants_total", "semrun_busy_total", "semrun_timeouts_total", "semrun_losses_total", "semrun_revokes_total"} {
		if got := metricstest.Value(fams, name, "new"); got != 0 {
			t.Errorf("%s{key=\"new\"}: got %v, want 0\n%s", name, got, text)
		}
	}
	zeros := make([]uint64, len(semaphore.Buckets))
	checkBuckets(t, "semrun_wait_duration_seconds", metricstest.Series(fams, "semrun_wait_duration_seconds", "new").GetHistogram(), zeros, 0, 0)
	checkBuckets(t, "semrun_hold_duration_seconds", metricstest.Series(fams, "semrun_hold_duration_seconds", "new").GetHistogram(), zeros, 0, 0)
	// The caller's capacity when none is stored.
	fams, _ = collectText(t, NewCollector(&fixedStore{statuses: []semaphore.KeyStatus{{Key: "k", Capacity: 2}}}, []string{"k"}, t.Logf))
	if got := metricstest.Value(fams, "semrun_capacity_permits", "k"); got != 2 {
		t.Errorf("semrun_capacity_permits with no stored capacity: got %v, want the caller's 2", got)
	}
}

// What a store returns is not trusted: counts that do not add up, a
// histogram of the wrong length, counters below 0.
func TestMetricsBoundWhatTheStoreSays(t *testing.T) {
	t.Parallel()
	n := len(semaphore.Buckets)
	long := make([]uint64, n+3) // three more than +Inf: counted in it
	long[0], long[n], long[n+2] = 1, 1, 1
	overflow := make([]uint64, n+1)
	overflow[0], overflow[1] = math.MaxUint64, 5
	st := semaphore.KeyStatus{Key: "odd", Held: -3, Counts: &semaphore.Counts{
		Grants: -1, Wait: semaphore.Histogram{Counts: long, Sum: -time.Second},
		Held: semaphore.Histogram{Counts: overflow},
	}}
	fams, _ := collectText(t, NewCollector(&fixedStore{statuses: []semaphore.KeyStatus{st}}, []string{"odd"}, t.Logf))
	if got := metricstest.Value(fams, "semrun_grants_total", "odd"); got != 0 {
		t.Errorf("a count below 0: got %v, want 0", got)
	}
	if got := metricstest.Value(fams, "semrun_held_permits", "odd"); got != 0 {
		t.Errorf("held below 0: got %v, want 0", got)
	}
	ones := slices.Repeat([]uint64{1}, n)
	checkBuckets(t, "a histogram too long", metricstest.Series(fams, "semrun_wait_duration_seconds", "odd").GetHistogram(), ones, 3, 0)
	maxed := slices.Repeat([]uint64{maxCount}, n)
	checkBuckets(t, "a histogram that overflows", metricstest.Series(fams, "semrun_hold_duration_seconds", "odd").GetHistogram(), maxed, maxCount, 0)
	short := semaphore.KeyStatus{Key: "short", Counts: &semaphore.Counts{Wait: semaphore.Histogram{Counts: []uint64{2, 1}}}}
	fams, _ = collectText(t, NewCollector(&fixedStore{statuses: []semaphore.KeyStatus{short}}, []string{"short"}, t.Logf))
	want := append([]uint64{2}, slices.Repeat([]uint64{3}, n-1)...)
	checkBuckets(t, "a histogram too short", metricstest.Series(fams, "semrun_wait_duration_seconds", "short").GetHistogram(), want, 3, 0)
}

// A key that could not be read has semrun_key_readable 0 and nothing
// else; the others are there; why is said once, not at every scrape.
func TestMetricsOfAKeyThatCouldNotBeRead(t *testing.T) {
	t.Parallel()
	store := &fixedStore{statuses: []semaphore.KeyStatus{
		{Key: "bad", Error: "WRONGTYPE Operation against a key holding the wrong kind of value"},
		{Key: "good", Capacity: 1, Held: 1},
	}}
	var w semaphoretest.Warnings
	c := NewCollector(store, []string{"bad", "good"}, w.Warnf)
	fams, text := collectText(t, c)
	if got := metricstest.Value(fams, "semrun_key_readable", "bad"); got != 0 {
		t.Errorf("semrun_key_readable of a key that could not be read: got %v, want 0", got)
	}
	for name := range metricstest.Families {
		if name != "semrun_key_readable" && metricstest.Series(fams, name, "bad") != nil {
			t.Errorf("%s of a key that could not be read: want none\n%s", name, text)
		}
	}
	if metricstest.Value(fams, "semrun_up", "") != 1 || metricstest.Value(fams, "semrun_key_readable", "good") != 1 || metricstest.Value(fams, "semrun_held_permits", "good") != 1 {
		t.Errorf("beside a key that could not be read: want semrun_up 1 and the other key's metrics\n%s", text)
	}
	said := w.Take()
	if len(said) != 1 || !strings.Contains(said[0], `key "bad" could not be read: WRONGTYPE`) {
		t.Errorf("got warnings %q, want one saying why key bad could not be read", said)
	}
	collectText(t, c)
	if said := w.Take(); len(said) != 0 {
		t.Errorf("the second scrape: got warnings %q, want none (said once)", said)
	}
}

// A store that cannot be read: semrun_up 0, nothing else, and one line
// that says why, said again only once it recovered and failed again.
func TestMetricsOfAStoreThatCannotBeRead(t *testing.T) {
	t.Parallel()
	store := &fixedStore{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}
	var w semaphoretest.Warnings
	c := NewCollector(store, []string{"k"}, w.Warnf)
	for i := range 2 {
		fams, text := collectText(t, c)
		if !onlyScrapes(fams) || metricstest.Value(fams, "semrun_up", "") != 0 {
			t.Errorf("scrape %d of a store down: want semrun_up 0 alone, got\n%s", i, text)
		}
	}
	said := w.Take()
	if len(said) != 1 || said[0] != "metrics: the store could not be read: dial tcp 127.0.0.1:6379: connection refused" {
		t.Errorf("two scrapes of a store down: got warnings %q, want one", said)
	}
	store.mu.Lock()
	store.err = nil
	store.mu.Unlock()
	if fams, _ := collectText(t, c); metricstest.Value(fams, "semrun_up", "") != 1 {
		t.Errorf("the store back: want semrun_up 1")
	}
	store.mu.Lock()
	store.err = errors.New("connection refused")
	store.mu.Unlock()
	collectText(t, c)
	if said := w.Take(); len(said) != 1 {
		t.Errorf("down again: got warnings %q, want one", said)
	}
	// Keys that cannot be listed are the store down too.
	fams, _ := collectText(t, NewCollector(&fixedStore{keysErr: errors.New("events: not built yet")}, nil, w.Warnf))
	if !onlyScrapes(fams) || metricstest.Value(fams, "semrun_up", "") != 0 {
		t.Errorf("keys that cannot be listed: want semrun_up 0 alone")
	}
}

// Without a KEY, the keys are the store's Keys, each read once; with
// none, Status is not asked (with no key, it would walk the store); a
// KEY named is read without asking for the list.
func TestMetricsReadTheKeysTheStoreKeeps(t *testing.T) {
	t.Parallel()
	store := &fixedStore{keys: []string{"b", "a", "b"}}
	fams, _ := collectText(t, NewCollector(store, nil, t.Logf))
	if store.listed != 1 || len(store.asked) != 1 || !slices.Equal(store.asked[0], []string{"a", "b"}) {
		t.Errorf("Keys called %d times, Status asked %q; want once each, for a and b", store.listed, store.asked)
	}
	if metricstest.Value(fams, "semrun_key_readable", "a") != 1 || metricstest.Value(fams, "semrun_key_readable", "b") != 1 {
		t.Errorf("want both keys' metrics")
	}
	none := &fixedStore{}
	fams, _ = collectText(t, NewCollector(none, nil, t.Logf))
	if len(none.asked) != 0 || !onlyScrapes(fams) || metricstest.Value(fams, "semrun_up", "") != 1 {
		t.Errorf("a store that keeps no key: Status asked %q, %d families; want no Status, semrun_up 1 and no key's series", none.asked, len(fams))
	}
	named := &fixedStore{keysErr: errors.New("listed")}
	collectText(t, NewCollector(named, []string{"x", "x"}, t.Logf))
	if named.listed != 0 || len(named.asked) != 1 || !slices.Equal(named.asked[0], []string{"x"}) {
		t.Errorf("a key named twice: Keys called %d times, Status asked %q; want no Keys, x once", named.listed, named.asked)
	}
}

// onlyScrapes tells whether fams has the scrape's families alone
// (semrun_up, semrun_keys_left_out), and no key's.
func onlyScrapes(fams map[string]*dto.MetricFamily) bool {
	for name := range fams {
		if name != "semrun_up" && name != "semrun_keys_left_out" {
			return false
		}
	}
	return true
}

// A scrape has a bounded size: of the keys a store lists (anyone who can
// write to it may list made-up ones, as long as they can be), the first
// MaxKeys are read, semrun_keys_left_out says how many more, and it is
// said once; keys named are all read.
func TestMetricsOfAScrapeAreBounded(t *testing.T) {
	t.Parallel()
	many := &fixedStore{}
	for i := range 1000 {
		// As long as a key can be, each character escaped: the largest.
		many.keys = append(many.keys, fmt.Sprintf("%04d", i)+strings.Repeat(`"`, semaphore.MaxKeyLen-4))
	}
	var w semaphoretest.Warnings
	c := NewCollector(many, nil, w.Warnf)
	text := string(c.Text()) // not parsed whole: 5MB, slow under the race detector
	if len(many.asked) != 1 || len(many.asked[0]) != MaxKeys || !slices.Equal(many.asked[0], many.keys[:MaxKeys]) {
		t.Errorf("1000 keys listed: want the first %d read", MaxKeys)
	}
	if got := strings.Count(text, "\nsemrun_key_readable{"); got != MaxKeys {
		t.Errorf("1000 keys listed: got the series of %d, want %d", got, MaxKeys)
	}
	if want := fmt.Sprintf("\nsemrun_keys_left_out %d\n", 1000-MaxKeys); !strings.Contains(text, want) {
		t.Errorf("semrun_keys_left_out: want the line %q", want)
	}
	// The bound docs/watching.md gives: at most 27KB a key.
	if most := MaxKeys * 27 << 10; len(text) > most {
		t.Errorf("a scrape of 1000 keys listed: %d bytes, want at most %d", len(text), most)
	}
	said := w.Take()
	if len(said) != 1 || !strings.Contains(said[0], "name the keys wanted") {
		t.Errorf("got warnings %q, want one saying keys were left out", said)
	}
	many.keys = append(many.keys, "another")
	c.Text()
	if said := w.Take(); len(said) != 0 {
		t.Errorf("a scrape again, with one more key: got warnings %q, want none (said once)", said)
	}
	named := &fixedStore{}
	NewCollector(named, many.keys, t.Logf).Text()
	if len(named.asked) != 1 || len(named.asked[0]) != len(many.keys) {
		t.Errorf("%d keys named: want them all read", len(many.keys))
	}
}

// Keys are label values, from anyone who can write to the store: quotes,
// backslashes, braces and what looks like another series come back as
// they were, in one series each; what cannot be a key is left out, said,
// and breaks nothing.
func TestMetricsOfHostileKeys(t *testing.T) {
	t.Parallel()
	hostile := []string{`a"b`, `back\slash`, `x"} semrun_up 0 # `, `le="1"`, "\u202eevil", "ключ", strings.Repeat("k", semaphore.MaxKeyLen)}
	bad := []string{"new\nline", "\xff\xfe", "", strings.Repeat("k", semaphore.MaxKeyLen+1)}
	store := &fixedStore{keys: append(slices.Clone(hostile), bad...)}
	var w semaphoretest.Warnings
	fams, text := collectText(t, NewCollector(store, nil, w.Warnf))
	if len(store.asked) != 1 || len(store.asked[0]) != len(hostile) {
		t.Fatalf("Status asked %q, want the %d keys that can be keys", store.asked, len(hostile))
	}
	for _, k := range hostile {
		if metricstest.Value(fams, "semrun_key_readable", k) != 1 || metricstest.Value(fams, "semrun_capacity_permits", k) != 1 {
			t.Errorf("key %q: its series did not come back as it was:\n%s", k, text)
		}
	}
	if got := len(fams["semrun_held_permits"].GetMetric()); got != len(hostile) {
		t.Errorf("got %d semrun_held_permits series, want %d: one a key\n%s", got, len(hostile), text)
	}
	if metricstest.Value(fams, "semrun_up", "") != 1 || len(fams["semrun_up"].GetMetric()) != 1 {
		t.Errorf("a key that looks like a series made one:\n%s", text)
	}
	if said := w.Take(); len(said) != len(bad) {
		t.Errorf("got warnings %q, want one for each of the %d names that cannot be keys", said, len(bad))
	}
	// A store that answers for a key twice, or for one not asked (one
	// that cannot be a key, too).
	twice := &fixedStore{statuses: []semaphore.KeyStatus{{Key: "k", Held: 1}, {Key: "k", Held: 2}, {Key: "\x1b[2J"}}}
	fams, text = collectText(t, NewCollector(twice, []string{"k"}, w.Warnf))
	if len(fams["semrun_held_permits"].GetMetric()) != 1 || metricstest.Value(fams, "semrun_held_permits", "k") != 1 || strings.Contains(text, "\x1b") {
		t.Errorf("a status of one key twice, and one of no key: want the first alone\n%s", text)
	}
	if said := w.Take(); len(said) != 2 {
		t.Errorf("got warnings %q, want the key twice and the one not asked said", said)
	}
}

// Many problems at once are not a flood: at most maxProblems lines.
func TestMetricsSayFewLines(t *testing.T) {
	t.Parallel()
	store := &fixedStore{}
	for i := range 50 {
		store.statuses = append(store.statuses, semaphore.KeyStatus{Key: fmt.Sprint("k", i), Error: strings.Repeat("x", 10_000)})
	}
	var w semaphoretest.Warnings
	var keys []string
	for _, k := range store.statuses {
		keys = append(keys, k.Key)
	}
	collectText(t, NewCollector(store, keys, w.Warnf))
	said := w.Take()
	if len(said) != maxProblems+1 || said[maxProblems] != "metrics: and 40 more" {
		t.Errorf("50 keys unread: got %d lines, want %d and one that says how many more", len(said), maxProblems+1)
	}
	for _, s := range said {
		if len(s) > maxProblem+100 {
			t.Errorf("a line of %d bytes, want a store's error cut to %d", len(s), maxProblem)
		}
	}
}

// renamed are the names semrun metrics said before, which
// docs/watching.md names to say what they became.
var renamed = map[string]string{
	"semrun_capacity":     "semrun_capacity_permits",
	"semrun_held":         "semrun_held_permits",
	"semrun_wait_seconds": "semrun_wait_duration_seconds",
	"semrun_held_seconds": "semrun_hold_duration_seconds",
}

// watching is docs/watching.md.
func watching(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "watching.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// family is the family a series' name belongs to (a histogram's
// _bucket, _sum and _count are its own), and whether semrun makes it.
func family(name string) (*Family, bool) {
	for i, f := range Families {
		base := name
		if f.Type == "histogram" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
		}
		if base == f.Name {
			return &Families[i], true
		}
	}
	return nil, false
}

// The table of docs/watching.md lists every metric semrun metrics makes,
// with its type, and nothing else; its queries and rules name no other
// (but the names of before, said once, as renamed).
func TestDocsListEveryMetric(t *testing.T) {
	t.Parallel()
	doc := watching(t)
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(semrun_[a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = m[2]
	}
	for _, f := range Families {
		if got := documented[f.Name]; got != f.Type {
			t.Errorf("docs/watching.md: %s is a %s, the table says %q", f.Name, f.Type, got)
		}
	}
	for _, m := range regexp.MustCompile(`semrun_[a-z_]+`).FindAllString(doc, -1) {
		if _, ok := family(m); !ok && renamed[m] == "" {
			t.Errorf("docs/watching.md names %s, which semrun metrics does not make", m)
		}
	}
	for old, now := range renamed {
		if _, ok := family(now); !ok || !strings.Contains(doc, "`"+old+"`") {
			t.Errorf("renamed %s to %s: want the new name made, and the old one said in docs/watching.md", old, now)
		}
	}
}

// The Grafana dashboard of docs/watching.md is JSON a Grafana imports,
// and every metric it queries is one semrun metrics makes: the table's
// check, again, on the queries themselves.
func TestDocsDashboard(t *testing.T) {
	t.Parallel()
	doc := watching(t)
	_, rest, ok := strings.Cut(doc, "### A Grafana dashboard")
	if !ok {
		t.Fatal("docs/watching.md has no section \"A Grafana dashboard\"")
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	body, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/watching.md: the dashboard is no ```json block")
	}
	var dash struct {
		Title      string
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
		Panels []struct {
			Title   string
			Type    string
			GridPos struct{ W, H int }
			Targets []struct{ Expr string }
		}
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard: got title %q, %d panels; want a title and panels", dash.Title, len(dash.Panels))
	}
	queries := map[string]string{}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			queries["variable "+v.Name] = v.Definition
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q: want queries, and a place", p.Title)
		}
		for i, q := range p.Targets {
			queries[fmt.Sprintf("panel %q, query %d", p.Title, i)] = q.Expr
		}
	}
	queried := map[string]bool{}
	for where, q := range queries {
		names := regexp.MustCompile(`semrun_[a-z_]+`).FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric of semrun's", where, q)
		}
		for _, name := range names {
			f, ok := family(name)
			if !ok {
				t.Errorf("%s queries %s, which semrun metrics does not make", where, name)
				continue
			}
			queried[f.Name] = true
		}
	}
	for _, name := range []string{"semrun_held_permits", "semrun_capacity_permits", "semrun_wait_duration_seconds", "semrun_hold_duration_seconds"} {
		if !queried[name] {
			t.Errorf("the dashboard does not show %s", name)
		}
	}
}
