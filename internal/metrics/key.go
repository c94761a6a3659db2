package metrics

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Family is one family of metrics semrun metrics makes.
type Family struct {
	// Name is its name; Type "gauge", "counter" or "histogram", as the
	// text format says them; Help what it means.
	Name, Type, Help string
	// Keyed: it has a series for each key, labelled key; else a single
	// series without labels.
	Keyed bool
	// value is its value for a key (or for the scrape, unkeyed), and
	// whether it has one; hist a histogram's.
	value func(*series) (float64, bool)
	hist  func(*series) *histogram
}

// Families are every family, in the order the text lists them: by name,
// as the client library's registry sorts them. Names follow Prometheus's
// conventions: no two stems with different units (semrun_held_permits,
// not semrun_held beside semrun_held_seconds), counters end in _total,
// durations are seconds.
var Families = []Family{
	{Name: "semrun_busy_total", Type: "counter", Keyed: true,
		Help:  "Callers that would not wait (--no-wait) and got no permit of the key: all held, the key paused, the restart fence.",
		value: func(s *series) (float64, bool) { return s.count(s.counts.Busy) }},
	{Name: "semrun_capacity_permits", Type: "gauge", Keyed: true,
		Help: "Permits of the key: the capacity kept in the store (semrun key set) when set, else the one its latest caller (or, idle, its latest grant) asked for; missing when the store knows neither.",
		value: func(s *series) (float64, bool) {
			// Unknown, it is missing rather than 0: held >= capacity
			// must not hold of a key nobody asked for.
			c := cmp.Or(max(s.status.StoredCapacity, 0), max(s.status.Capacity, 0))
			return float64(c), s.readable() && c > 0
		}},
	{Name: "semrun_grants_total", Type: "counter", Keyed: true,
		Help:  "Permits of the key granted.",
		value: func(s *series) (float64, bool) { return s.count(s.counts.Grants) }},
	{Name: "semrun_held_permits", Type: "gauge", Keyed: true,
		Help:  "Permits of the key taken, by holders (each its --weight) and by coolings (--min-hold).",
		value: func(s *series) (float64, bool) { return float64(max(s.status.Held, 0)), s.readable() }},
	{Name: "semrun_hold_duration_seconds", Type: "histogram", Keyed: true,
		Help: "How long each permit of the key given back was held, from its grant to its release.",
		hist: func(s *series) *histogram { return s.held }},
	{Name: "semrun_key_readable", Type: "gauge", Keyed: true,
		Help: "1 when the key could be read, 0 when not (no other metric of it then).",
		value: func(s *series) (float64, bool) {
			if s.readable() {
				return 1, true
			}
			return 0, true
		}},
	{Name: "semrun_keys_left_out", Type: "gauge",
		Help:  "Keys the store listed that have no metrics: those past the first 200 (name the keys wanted).",
		value: func(s *series) (float64, bool) { return float64(s.leftOut), true }},
	{Name: "semrun_losses_total", Type: "counter", Keyed: true,
		Help:  "Permits of the key lost: their holder stopped renewing or vanished without giving them back.",
		value: func(s *series) (float64, bool) { return s.count(s.counts.Losses) }},
	{Name: "semrun_oldest_holder_age_seconds", Type: "gauge", Keyed: true,
		Help: "How long the key's longest holder has held it; 0 when none does. Coolings (--min-hold) do not count.",
		value: func(s *series) (float64, bool) {
			var oldest time.Duration
			for _, h := range s.status.Holders {
				oldest = max(oldest, h.Age)
			}
			return oldest.Seconds(), s.readable()
		}},
	{Name: "semrun_paused", Type: "gauge", Keyed: true,
		Help: "1 while the key is paused (semrun key pause), else 0.",
		value: func(s *series) (float64, bool) {
			if s.status.Paused != nil {
				return 1, s.readable()
			}
			return 0, s.readable()
		}},
	{Name: "semrun_revokes_total", Type: "counter", Keyed: true,
		Help:  "Holders of the key an operator revoked (semrun key revoke).",
		value: func(s *series) (float64, bool) { return s.count(s.counts.Revokes) }},
	{Name: "semrun_timeouts_total", Type: "counter", Keyed: true,
		Help:  "Waiters whose wait ended (--timeout) before their turn came.",
		value: func(s *series) (float64, bool) { return s.count(s.counts.Timeouts) }},
	{Name: "semrun_up", Type: "gauge",
		Help: "1 when the store could be read, 0 when not (no metric of a key then).",
		value: func(s *series) (float64, bool) {
			if s.up {
				return 1, true
			}
			return 0, true
		}},
	{Name: "semrun_wait_duration_seconds", Type: "histogram", Keyed: true,
		Help: "How long each grant of the key waited for its permit.",
		hist: func(s *series) *histogram { return s.wait }},
	{Name: "semrun_waiting", Type: "gauge", Keyed: true,
		Help:  "Callers waiting in the key's line.",
		value: func(s *series) (float64, bool) { return float64(len(s.status.Waiters)), s.readable() }},
}

// series are what one key's metrics (or the scrape's, unkeyed) say.
type series struct {
	// The scrape's: whether the store could be read, and how many keys
	// it listed were left out.
	up      bool
	leftOut int

	status     semaphore.KeyStatus
	counts     semaphore.Counts
	wait, held *histogram
}

// keySeries are the series of one key's status. What the store said is
// bounded here: counters below 0 are 0, counts that do not add up stop
// at maxCount.
func keySeries(k semaphore.KeyStatus) (*series, error) {
	if err := semaphore.CheckKey(k.Key); err != nil {
		return nil, fmt.Errorf("the store named a key %q, which cannot be one: %v", shorten(k.Key, semaphore.MaxKeyLen), err)
	}
	s := &series{status: k}
	// No counts yet is none counted: a counter that starts at 0, not
	// one that appears at its first increase, which rate() would miss.
	if k.Counts != nil {
		s.counts = *k.Counts
	}
	s.wait, s.held = newHistogram(s.counts.Wait), newHistogram(s.counts.Held)
	return s, nil
}

// readable tells whether the key could be read: a key that could not
// has semrun_key_readable 0 and nothing else.
func (s *series) readable() bool { return s.status.Error == "" }

// count is a counter's value, at least 0.
func (s *series) count(n int64) (float64, bool) { return float64(max(n, 0)), s.readable() }

// histogram is a semaphore.Histogram as Prometheus counts it.
type histogram struct {
	// cumulative[i] is how many were at most semaphore.Buckets[i]; count
	// is them all, the longer ones included (+Inf), and sum their sum in
	// seconds.
	cumulative []uint64
	count      uint64
	sum        float64
}

// newHistogram is h as Prometheus counts it (h counts each bucket apart).
func newHistogram(h semaphore.Histogram) *histogram {
	out := &histogram{cumulative: make([]uint64, len(semaphore.Buckets))}
	for i := range semaphore.Buckets {
		if i < len(h.Counts) {
			out.count = addCapped(out.count, h.Counts[i])
		}
		out.cumulative[i] = out.count
	}
	for _, c := range h.Counts[min(len(h.Counts), len(semaphore.Buckets)):] {
		out.count = addCapped(out.count, c)
	}
	out.sum = max(h.Sum, 0).Seconds()
	return out
}

// maxCount is the largest count the metrics say: the largest integer a
// float64, which Prometheus and its text format count in, holds exactly.
const maxCount = 1 << 53

// addCapped is a+b, at most maxCount: counts a store returns are not
// trusted to add up.
func addCapped(a, b uint64) uint64 {
	if a >= maxCount || b >= maxCount-a {
		return maxCount
	}
	return a + b
}

// writeFamilies writes the families of the scrape's series and of each
// key's, keys sorted (as the registry sorts a family's series), in the
// text format; a family with no series is left out, as the registry
// leaves it out.
func writeFamilies(t *text, scrape *series, keys []*series) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b *series) int { return cmp.Compare(a.status.Key, b.status.Key) })
	for i := range Families {
		f := &Families[i]
		if !f.Keyed {
			if v, ok := f.value(scrape); ok {
				t.family(f)
				t.sample(f.Name, "", "", v)
			}
			continue
		}
		begun := false
		for _, s := range keys {
			if f.hist != nil {
				if !s.readable() {
					continue
				}
				if !begun {
					t.family(f)
					begun = true
				}
				t.histogram(f.Name, s.status.Key, f.hist(s))
				continue
			}
			v, ok := f.value(s)
			if !ok {
				continue
			}
			if !begun {
				t.family(f)
				begun = true
			}
			t.sample(f.Name, "", s.status.Key, v)
		}
	}
}
