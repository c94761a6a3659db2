// Package metrics turns the status of keys into Prometheus metrics, in
// Prometheus's text format: a collector that reads a store at each
// scrape, shared by the scrapes that come while it reads, one function
// from a key's status to its series, and a writer of the text to a file
// for node_exporter's textfile collector. Serving them, and the flags
// that choose how, are semrun metrics's (cmd).
package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/semaphore"
)

// ScrapeTimeout bounds one reading of the store: under Prometheus's
// default scrape timeout (10s), so that a store that does not answer is
// told as semrun_up 0 rather than as a scrape that failed.
const ScrapeTimeout = 5 * time.Second

// Source is what the metrics read of a store (a semaphore.Store).
type Source interface {
	Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error)
	Keys(ctx context.Context) ([]string, error)
}

// MaxKeys bounds the keys a store lists that a scrape reports on, and so
// its size: each key is 58 series, about 6KB with a short name (at most
// 27KB with one of semaphore.MaxKeyLen bytes to escape). Anyone who can
// write to the store may list made-up keys; those past MaxKeys are left
// out, and semrun_keys_left_out says how many. Keys named on the command
// line are not bounded: the operator chose them.
const MaxKeys = 200

// Collector reads the keys' status from the store at each scrape, within
// ScrapeTimeout, and writes their metrics.
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
	// reading is the reading of the store under way, which every scrape
	// that comes meanwhile shares; nil when none is.
	reading *Scrape
}

// NewCollector is a collector of keys, else of every key store keeps
// counters of, that says what it could not read with warnf.
func NewCollector(store Source, keys []string, warnf func(format string, args ...any)) *Collector {
	return &Collector{store: store, keys: dedupe(keys), warnf: warnf}
}

// Scrape is one reading of the store, as the text format says it.
type Scrape struct {
	done   chan struct{} // closed once Text is written
	joined int           // the scrapes that share it (under Collector.mu)
	// Text is the metrics, in the text format (ContentType).
	Text []byte
	// Gzipped is Text compressed with gzip, made once, when first asked.
	Gzipped func() []byte
}

// Text reads the store and writes the metrics in the text format.
func (c *Collector) Text() []byte {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	statuses, leftOut, problems, err := c.read(ctx)
	scrape := &series{up: err == nil, leftOut: leftOut}
	if err != nil {
		problems = append(problems, "the store could not be read: "+shorten(err.Error(), maxProblem))
	}
	var keys []*series
	for _, k := range statuses {
		s, err := keySeries(k)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		keys = append(keys, s)
		if k.Error != "" {
			problems = append(problems, fmt.Sprintf("key %q could not be read: %s", k.Key, shorten(k.Error, maxProblem)))
		}
	}
	c.say(problems)
	t := &text{b: make([]byte, 0, 1024+len(keys)*8<<10)}
	writeFamilies(t, scrape, keys)
	return t.b
}

// Shared is a reading of the store for a scrape: the one under way when
// there is one, else a new one. However many scrapes come at once, the
// store is read once at a time, and none is refused: each waits for the
// reading under way (at most ScrapeTimeout), or until ctx ends (nil
// then). The reading is the collector's, not the scrape's: a scrape that
// gives up ends no other's.
func (c *Collector) Shared(ctx context.Context) *Scrape {
	c.mu.Lock()
	r := c.reading
	if r == nil {
		r = &Scrape{done: make(chan struct{})}
		c.reading = r
		go func() { // ends within ScrapeTimeout: Text reads no longer
			text := c.Text()
			c.mu.Lock()
			c.reading = nil // a scrape that comes from now on reads anew
			c.mu.Unlock()
			r.Text, r.Gzipped = text, sync.OnceValue(func() []byte { return gzipped(text) })
			close(r.done)
		}()
	}
	r.joined++
	c.mu.Unlock()
	select {
	case <-r.done:
		return r
	case <-ctx.Done():
		return nil
	}
}

// Wait waits for the reading of the store under way, if any, to end
// (within ScrapeTimeout): a server that stopped closes its store only
// once nothing reads it.
func (c *Collector) Wait() {
	c.mu.Lock()
	r := c.reading
	c.mu.Unlock()
	if r != nil {
		<-r.done
	}
}

// gzipped is b compressed with gzip.
func gzipped(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	_, _ = w.Write(b) // a bytes.Buffer takes it all
	_ = w.Close()
	return out.Bytes()
}

// read is the status of the keys named, else of those the store keeps
// counters of (how many it listed past MaxKeys: leftOut), and what was
// wrong with what the store named.
func (c *Collector) read(ctx context.Context) (_ []semaphore.KeyStatus, leftOut int, _ []string, _ error) {
	keys := c.keys
	var problems []string
	if len(keys) == 0 {
		listed, err := c.store.Keys(ctx)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("list its keys: %w", err)
		}
		keys, leftOut, problems = storeKeys(listed)
	}
	if len(keys) == 0 {
		return nil, leftOut, problems, nil // Status of no key is of every key: a walk
	}
	st, err := c.store.Status(ctx, keys)
	if err != nil {
		return nil, leftOut, problems, err
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
	return out, leftOut, problems, nil
}

// storeKeys are the keys a store listed that can be keys, each once, the
// first MaxKeys of them in order, how many more there were, and what was
// wrong with the list: anyone who can write to the store may have
// written it.
func storeKeys(listed []string) (keys []string, leftOut int, problems []string) {
	for _, k := range dedupe(listed) {
		if err := semaphore.CheckKey(k); err != nil {
			problems = append(problems, fmt.Sprintf("the store named a key %q, which cannot be one: %v", shorten(k, semaphore.MaxKeyLen), err))
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > MaxKeys {
		// Said once for as long as it lasts, not again as the number moves.
		problems = append(problems, fmt.Sprintf("the store lists more than %d keys: metrics of the first %d only (semrun_keys_left_out says how many more); name the keys wanted", MaxKeys, MaxKeys))
		leftOut, keys = len(keys)-MaxKeys, keys[:MaxKeys]
	}
	return keys, leftOut, problems
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
