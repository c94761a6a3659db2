package metrics

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/semrun/semrun/internal/semaphore"
)

// keyDescs describe the metrics: semrun_up, and those of each key,
// labelled with the key alone.
type keyDescs struct {
	up, readable                            *prometheus.Desc
	capacity, held, waiting, paused, oldest *prometheus.Desc
	grants, busy, timeouts, losses, revokes *prometheus.Desc
	waitSeconds, heldSeconds                *prometheus.Desc
}

func (d *keyDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.up, d.readable, d.capacity, d.held, d.waiting, d.paused, d.oldest,
		d.grants, d.busy, d.timeouts, d.losses, d.revokes, d.waitSeconds, d.heldSeconds}
}

// descs are made once, when first used: not at the start of every run.
var descs = sync.OnceValue(func() *keyDescs {
	key := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"key"}, nil)
	}
	return &keyDescs{
		up:          prometheus.NewDesc("semrun_up", "1 when the store could be read, 0 when not (no metric of a key then).", nil, nil),
		readable:    key("semrun_key_readable", "1 when the key could be read, 0 when not (no other metric of it then)."),
		capacity:    key("semrun_capacity", "Permits of the key: the capacity kept in the store (semrun key set) when set, else the one its latest caller asked for; missing when unknown."),
		held:        key("semrun_held", "Permits of the key taken, by holders and by coolings (--min-hold)."),
		waiting:     key("semrun_waiting", "Callers waiting in the key's line."),
		paused:      key("semrun_paused", "1 while the key is paused (semrun key pause), else 0."),
		oldest:      key("semrun_oldest_holder_age_seconds", "How long the key's longest holder has held it; 0 when none does. Coolings (--min-hold) do not count."),
		grants:      key("semrun_grants_total", "Permits of the key granted."),
		busy:        key("semrun_busy_total", "Callers that would not wait (--no-wait) and got no permit of the key."),
		timeouts:    key("semrun_timeouts_total", "Waiters whose wait ended (--timeout) before their turn came."),
		losses:      key("semrun_losses_total", "Permits of the key lost: their holder stopped renewing or vanished without giving them back."),
		revokes:     key("semrun_revokes_total", "Holders of the key an operator revoked (semrun key revoke)."),
		waitSeconds: key("semrun_wait_seconds", "How long each grant of the key waited for its permit."),
		heldSeconds: key("semrun_held_seconds", "How long each permit of the key given back was held."),
	}
})

// keyMetrics are the metrics of one key's status: the one place that
// makes them, for a server and a textfile alike. A key that could not be
// read has semrun_key_readable 0 and nothing else. What the store said is
// bounded here too: counters below 0 are 0.
func keyMetrics(k semaphore.KeyStatus) ([]prometheus.Metric, error) {
	if err := semaphore.CheckKey(k.Key); err != nil {
		return nil, fmt.Errorf("the store named a key %q, which cannot be one: %v", shorten(k.Key, semaphore.MaxKeyLen), err)
	}
	d := descs()
	m := &metricList{key: k.Key}
	if k.Error != "" {
		m.gauge(d.readable, 0)
		return m.out, m.err
	}
	m.gauge(d.readable, 1)
	if c := cmp.Or(k.StoredCapacity, k.Capacity); c > 0 {
		// Unknown, it is missing rather than 0: semrun_held >=
		// semrun_capacity must not hold of a key nobody asked for yet.
		m.gauge(d.capacity, float64(c))
	}
	m.gauge(d.held, float64(max(k.Held, 0)))
	m.gauge(d.waiting, float64(len(k.Waiters)))
	paused := 0.0
	if k.Paused != nil {
		paused = 1
	}
	m.gauge(d.paused, paused)
	var oldest time.Duration
	for _, h := range k.Holders {
		oldest = max(oldest, h.Age)
	}
	m.gauge(d.oldest, oldest.Seconds())
	// No counts yet is none counted: a counter that starts at 0, not
	// one that appears at its first increase, which rate() would miss.
	var counts semaphore.Counts
	if k.Counts != nil {
		counts = *k.Counts
	}
	m.counter(d.grants, counts.Grants)
	m.counter(d.busy, counts.Busy)
	m.counter(d.timeouts, counts.Timeouts)
	m.counter(d.losses, counts.Losses)
	m.counter(d.revokes, counts.Revokes)
	m.histogram(d.waitSeconds, counts.Wait)
	m.histogram(d.heldSeconds, counts.Held)
	return m.out, m.err
}

// metricList gathers one key's metrics, and the first error in making one.
type metricList struct {
	key string
	out []prometheus.Metric
	err error
}

func (l *metricList) add(m prometheus.Metric, err error) {
	if err != nil {
		l.err = cmp.Or(l.err, fmt.Errorf("key %q: %w", l.key, err))
		return
	}
	l.out = append(l.out, m)
}

func (l *metricList) gauge(d *prometheus.Desc, v float64) {
	l.add(prometheus.NewConstMetric(d, prometheus.GaugeValue, v, l.key))
}

func (l *metricList) counter(d *prometheus.Desc, v int64) {
	l.add(prometheus.NewConstMetric(d, prometheus.CounterValue, float64(max(v, 0)), l.key))
}

func (l *metricList) histogram(d *prometheus.Desc, h semaphore.Histogram) {
	count, sum, buckets := promHistogram(h)
	l.add(prometheus.NewConstHistogram(d, count, sum, buckets, l.key))
}

// promHistogram is h as Prometheus counts it: at each upper bound of
// semaphore.Buckets, in seconds, how many were at most that long (h
// counts each bucket apart); count is them all, the longer ones
// included (+Inf), and sum their sum in seconds.
func promHistogram(h semaphore.Histogram) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(semaphore.Buckets))
	for i, b := range semaphore.Buckets {
		if i < len(h.Counts) {
			count = addCapped(count, h.Counts[i])
		}
		buckets[b.Seconds()] = count
	}
	for _, c := range h.Counts[min(len(h.Counts), len(semaphore.Buckets)):] {
		count = addCapped(count, c)
	}
	return count, max(h.Sum, 0).Seconds(), buckets
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
