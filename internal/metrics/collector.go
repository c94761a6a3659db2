// Package metrics turns the status of keys into Prometheus metrics: a
// collector that reads a store at each collection, one function from a
// key's status to its metrics, and a writer of the text format to a file
// for node_exporter's textfile collector. Serving them, and the flags
// that choose how, are semrun metrics's (cmd).
package metrics

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/semrun/semrun/internal/semaphore"
)

// ScrapeTimeout bounds one reading of the store: under Prometheus's
// default scrape timeout (10s), so that a store that does not answer is
// told as semrun_up 0 rather than as a scrape that failed.
const ScrapeTimeout = 5 * time.Second

// Registry is a registry of c alone: no Go runtime or process metrics,
// which describe semrun's exporter, not the keys, and would differ
// between a server and a textfile. It checks that what c collects is
// what it describes.
func Registry(c prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	return reg
}

// Source is what the metrics read of a store (a semaphore.Store).
type Source interface {
	Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error)
	Keys(ctx context.Context) ([]string, error)
}

// maxKeys bounds the keys a store names for the metrics: each is 45
// series. Keys named on the command line are not bounded.
const maxKeys = 1000

// Collector reads the keys' status from the store at each collection,
// within ScrapeTimeout, and turns each into metrics (keyMetrics).
type Collector struct {
	store Source
	// keys are the keys named; none: the store's Keys, never a walk of
	// the whole store.
	keys  []string
	warnf func(format string, args ...any)

	mu sync.Mutex
	// said are the problems the last collection said: a store down for
	// an hour is said once, not at every scrape.
	said map[string]bool
}

// NewCollector is a collector of keys, else of every key store keeps
// counters of, that says what it could not read with warnf.
func NewCollector(store Source, keys []string, warnf func(format string, args ...any)) *Collector {
	return &Collector{store: store, keys: dedupe(keys), warnf: warnf}
}

// Describe sends every metric's Desc: the registry checks each collected
// metric against them.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs().all() {
		ch <- d
	}
}

// Collect reads the keys and sends their metrics, with semrun_up.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	statuses, problems, err := c.read(ctx)
	up := 1.0
	if err != nil {
		up = 0
		problems = append(problems, "the store could not be read: "+shorten(err.Error(), maxProblem))
	}
	if m, err := prometheus.NewConstMetric(descs().up, prometheus.GaugeValue, up); err == nil {
		ch <- m
	}
	for _, k := range statuses {
		metrics, err := keyMetrics(k)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, m := range metrics {
			ch <- m
		}
		if k.Error != "" {
			problems = append(problems, fmt.Sprintf("key %q could not be read: %s", k.Key, shorten(k.Error, maxProblem)))
		}
	}
	c.say(problems)
}

// read is the status of the keys named, else of those the store keeps
// counters of, and what was wrong with what the store named.
func (c *Collector) read(ctx context.Context) ([]semaphore.KeyStatus, []string, error) {
	keys := c.keys
	var problems []string
	if len(keys) == 0 {
		listed, err := c.store.Keys(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("list its keys: %w", err)
		}
		keys, problems = storeKeys(listed)
	}
	if len(keys) == 0 {
		return nil, problems, nil // Status of no key is of every key: a walk
	}
	st, err := c.store.Status(ctx, keys)
	if err != nil {
		return nil, problems, err
	}
	// Each key asked for once: a store that answers more cannot add
	// series, nor the same one twice, which the registry would refuse.
	unanswered := make(map[string]bool, len(keys))
	for _, k := range keys {
		unanswered[k] = true
	}
	var out []semaphore.KeyStatus
	for _, s := range st {
		if !unanswered[s.Key] {
			problems = append(problems, fmt.Sprintf("the store answered for key %q, not asked for or answered before", shorten(s.Key, semaphore.MaxKeyLen)))
			continue
		}
		unanswered[s.Key] = false
		out = append(out, s)
	}
	return out, problems, nil
}

// storeKeys are the keys a store listed that can be keys, each once, the
// first maxKeys of them in order, and what was wrong with the list:
// anyone who can write to the store may have written it.
func storeKeys(listed []string) ([]string, []string) {
	var keys, problems []string
	for _, k := range dedupe(listed) {
		if err := semaphore.CheckKey(k); err != nil {
			problems = append(problems, fmt.Sprintf("the store named a key %q, which cannot be one: %v", shorten(k, semaphore.MaxKeyLen), err))
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > maxKeys {
		problems = append(problems, fmt.Sprintf("the store keeps counters of %d keys: metrics of the first %d only; name the keys wanted", len(keys), maxKeys))
		keys = keys[:maxKeys]
	}
	return keys, problems
}

// dedupe is keys with each once, in the order first met.
func dedupe(keys []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// maxProblem bounds the text of a store's error said in one line, and
// maxProblems the lines one collection says: a store's reply is not
// trusted to be short.
const (
	maxProblem  = 300
	maxProblems = 10
)

// say warns of the problems the last collection did not have, at most
// maxProblems of them.
func (c *Collector) say(problems []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := make(map[string]bool, len(problems))
	var fresh []string
	for _, p := range problems {
		if !c.said[p] && !now[p] {
			fresh = append(fresh, p)
		}
		now[p] = true
	}
	c.said = now
	for i, p := range fresh {
		if i == maxProblems {
			c.warnf("metrics: and %d more", len(fresh)-maxProblems)
			break
		}
		c.warnf("metrics: %s", p)
	}
}

// shorten is s cut to at most n bytes, on a character's boundary, with
// "..." when it was cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
