package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"

	"github.com/semrun/semrun/internal/metrics/metricstest"
	"github.com/semrun/semrun/internal/semaphore"
)

// library is the Prometheus client library's collector of the same
// series semrun writes itself: const metrics of each family's values,
// which a registry gathers and expfmt writes.
type library struct {
	scrape *series
	keys   []*series
}

func (l library) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(l, ch) }

func (l library) Collect(ch chan<- prometheus.Metric) {
	types := map[string]prometheus.ValueType{"gauge": prometheus.GaugeValue, "counter": prometheus.CounterValue}
	for _, f := range Families {
		if !f.Keyed {
			if v, ok := f.value(l.scrape); ok {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(f.Name, f.Help, nil, nil), types[f.Type], v)
			}
			continue
		}
		d := prometheus.NewDesc(f.Name, f.Help, []string{"key"}, nil)
		for _, s := range l.keys {
			if f.hist != nil {
				if s.readable() {
					h := f.hist(s)
					buckets := map[float64]uint64{}
					for i, b := range semaphore.Buckets {
						buckets[b.Seconds()] = h.cumulative[i]
					}
					ch <- prometheus.MustNewConstHistogram(d, h.count, h.sum, buckets, s.status.Key)
				}
			} else if v, ok := f.value(s); ok {
				ch <- prometheus.MustNewConstMetric(d, types[f.Type], v, s.status.Key)
			}
		}
	}
}

// libraryText is what the client library writes of the same series.
func libraryText(t *testing.T, scrape *series, keys []*series) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(library{scrape, keys})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("the library refuses the metrics: %v", err)
	}
	var b bytes.Buffer
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// statuses are keys of every kind a scrape meets: busy, idle, unknown,
// unreadable, hostile names, counts large and odd.
func statuses() []semaphore.KeyStatus {
	var wait, held semaphore.Histogram
	for _, d := range []time.Duration{0, 7 * time.Millisecond, 10 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, 25 * time.Hour} {
		wait.Observe(d)
	}
	held.Observe(90 * time.Second)
	return []semaphore.KeyStatus{
		{Key: "pdf", Capacity: 3, StoredCapacity: 5, Held: 3, Holders: []semaphore.Holder{{Age: 1234567 * time.Microsecond}},
			Waiters: []semaphore.Waiter{{}, {}}, Paused: &semaphore.Pause{},
			Counts: &semaphore.Counts{Grants: 1_000_000, Busy: 2, Timeouts: 1 << 60, Losses: -4, Revokes: 5, Wait: wait, Held: held}},
		{Key: "idle", Capacity: 2},
		{Key: "unknown"},
		{Key: "bad", Error: "WRONGTYPE"},
		{Key: `a"b\c} x`, Capacity: 1, Held: 1},
		{Key: `le="1"`, Capacity: 1},
		{Key: "ключ\u202e", Capacity: 1},
	}
}

// The text semrun writes is the client library's, byte for byte: what
// the library's registry and expfmt write of the same metrics, whatever
// the keys and the values. So semrun's metrics are those the library
// would make, without the library in semrun (see text).
func TestTextIsTheClientLibrarysText(t *testing.T) {
	t.Parallel()
	all := statuses()
	for name, tc := range map[string]struct {
		up       bool
		leftOut  int
		statuses []semaphore.KeyStatus
	}{
		"keys":          {true, 0, all},
		"keys reversed": {true, 3, reversed(all)},
		"no key":        {true, 0, nil},
		"store down":    {false, 0, nil},
		"one unread":    {true, 0, all[3:4]},
	} {
		var keys []*series
		for _, st := range tc.statuses {
			s, err := keySeries(st)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, s)
		}
		scrape := &series{up: tc.up, leftOut: tc.leftOut}
		var ours text
		writeFamilies(&ours, scrape, keys)
		if want := libraryText(t, scrape, keys); string(ours.b) != want {
			t.Errorf("%s: semrun's text is not the library's:\n%s\nthe library's:\n%s", name, ours.b, want)
		}
	}
}

func reversed(s []semaphore.KeyStatus) []semaphore.KeyStatus {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// promlint, which promtool check metrics runs, finds nothing in what a
// scrape says: names, units, HELP, counters.
func TestPromlintFindsNothing(t *testing.T) {
	t.Parallel()
	st := statuses()
	var keys []string
	for _, s := range st {
		keys = append(keys, s.Key)
	}
	text := NewCollector(&fixedStore{statuses: st}, keys, t.Logf).Text()
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil || len(problems) != 0 {
		t.Errorf("promlint: got %v, %+v; want no problem in\n%s", err, problems, text)
	}
}

// units are the unit suffixes of the families' names.
var units = []string{"_seconds", "_permits", "_bytes", "_ratio"}

// stem is name without _total and its unit; and the unit.
func stem(name string) (string, string) {
	name = strings.TrimSuffix(name, "_total")
	for _, u := range units {
		if s, ok := strings.CutSuffix(name, u); ok {
			return s, u
		}
	}
	return name, ""
}

// Families are those the tests know (metricstest.Families), sorted by
// name as the text lists them, each with its HELP; no two share a stem
// (semrun_held and semrun_held_seconds would: permits and seconds); and
// the unkeyed ones say of the scrape.
func TestFamilies(t *testing.T) {
	t.Parallel()
	stems := map[string]string{}
	var names []string
	for _, f := range Families {
		names = append(names, f.Name)
		if typ, ok := metricstest.Families[f.Name]; !ok || strings.ToLower(typ.String()) != f.Type {
			t.Errorf("%s, a %s: metricstest.Families says %v", f.Name, f.Type, typ)
		}
		if f.Help == "" || (f.value == nil) == (f.hist == nil) || (f.hist != nil) != (f.Type == "histogram") {
			t.Errorf("%s: a family needs a HELP, and a value or (a histogram) a hist", f.Name)
		}
		s, unit := stem(f.Name)
		if other, ok := stems[s]; ok {
			t.Errorf("%s and %s share the stem %s: say what each counts apart", f.Name, other, s)
		}
		stems[s] = f.Name
		if f.Type == "counter" && !strings.HasSuffix(f.Name, "_total") || f.Type == "histogram" && unit != "_seconds" {
			t.Errorf("%s: a counter ends in _total, a histogram of durations in _seconds", f.Name)
		}
	}
	if !slices.IsSorted(names) || len(names) != len(metricstest.Families) {
		t.Errorf("Families %v: want them all (%d), sorted by name", names, len(metricstest.Families))
	}
	for _, f := range Families {
		if f.Name == "semrun_keys_left_out" && !strings.Contains(f.Help, " "+strconv.Itoa(MaxKeys)+" ") {
			t.Errorf("%s: its HELP %q does not say MaxKeys, %d", f.Name, f.Help, MaxKeys)
		}
	}
}

// blockingStore is a store whose Status waits until it is let go, and
// counts its calls.
type blockingStore struct {
	fixedStore
	entered chan struct{} // a Status began
	release chan struct{} // closed: every Status ends
	calls   int
	mu      sync.Mutex
}

func (s *blockingStore) Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.fixedStore.Status(ctx, keys)
}

// However many scrapes come while the store is read, it is read once for
// them all, each gets that reading, none is refused; a scrape that gives
// up ends no other's; one that comes after it ended reads anew.
func TestMetricsSharedReading(t *testing.T) {
	t.Parallel()
	store := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	c := NewCollector(store, []string{"k"}, t.Logf)
	const crowd = 50
	got := make(chan *Scrape, crowd)
	go func() { got <- c.Shared(context.Background()) }()
	<-store.entered // the reading is under way: every scrape from now shares it
	var wg sync.WaitGroup
	for range crowd - 1 {
		wg.Go(func() { got <- c.Shared(context.Background()) })
	}
	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	if s := c.Shared(gaveUp); s != nil {
		t.Errorf("a scrape that gave up: got a reading, want nil")
	}
	// Every scrape of the crowd has joined the reading (a bounded wait).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		joined := c.reading.joined
		c.mu.Unlock()
		if joined == crowd+1 { // and the one that gave up
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %d scrapes joined the reading, want %d", joined, crowd+1)
		}
	}
	close(store.release)
	wg.Wait()
	var first *Scrape
	for range crowd {
		s := <-got
		if first == nil {
			first = s
		}
		if s != first || !bytes.Contains(s.Text, []byte(`semrun_key_readable{key="k"} 1`)) {
			t.Fatalf("a scrape of the crowd: got %p %q, want the one reading %p", s, s.Text, first)
		}
	}
	if store.calls != 1 {
		t.Errorf("%d scrapes at once read the store %d times, want once", crowd, store.calls)
	}
	if g, err := gunzip(first.Gzipped()); err != nil || !bytes.Equal(g, first.Text) {
		t.Errorf("Gzipped: got %q, %v; want Text compressed", g, err)
	}
	again := c.Shared(context.Background())
	if again == first || store.calls != 2 {
		t.Errorf("a scrape after the reading ended: want a new reading (store read %d times)", store.calls)
	}
	// Wait waits for a reading that no scrape waits for any more.
	store.release = make(chan struct{})
	store.entered = make(chan struct{}, 1) // not the last reading's
	go c.Shared(gaveUp)
	<-store.entered
	waited := make(chan struct{})
	go func() { c.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Errorf("Wait returned while the store was read")
	case <-time.After(10 * time.Millisecond): // a regression shows sometimes, never a false failure
	}
	close(store.release)
	<-waited
}

// gunzip is b decompressed.
func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(r)
	return out, errors.Join(err, r.Close())
}
