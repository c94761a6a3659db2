package cmd

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// metricsOptions are semrun metrics's: where the metrics go.
type metricsOptions struct {
	*commonOptions
	listen, textfile string
}

func newCmdMetrics(common *commonOptions) *cobra.Command {
	o := &metricsOptions{commonOptions: common}
	cmd := &cobra.Command{
		Use:   "metrics (--listen ADDR | --textfile FILE) [flags] [KEY...]",
		Short: "Serve Prometheus metrics of keys, or write them for node_exporter",
		Long: `metrics reports on each KEY in Prometheus's format: its capacity, the permits
held, the callers waiting, whether it is paused, its oldest holder's age;
counters of grants, busy answers, timeouts, losses and revokes; histograms of
the time waited for a permit and of the time held. Without a KEY: every key the
store keeps counters of.

With --listen, it serves them on http://ADDR/metrics, reading the store at each
scrape, until SIGINT or SIGTERM (it then exits 0); it says where it listens on
stderr. With --textfile, it writes them once to FILE, atomically, for
node_exporter's textfile collector, from cron: it exits 0 once FILE is written.

semrun_up is 0 when the store could not be read, and semrun_key_readable 0 for
a key that could not be: the other metrics are then missing, and a line on
stderr says why. It exits 125 for bad flags or values.`,
		Example: `  semrun metrics --listen 127.0.0.1:9750
  semrun metrics --textfile /var/lib/node_exporter/textfile/semrun.prom pdf db`,
		Args: keyArgs,
		RunE: func(cmd *cobra.Command, keys []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			if err := o.checkWhere(); err != nil {
				return err
			}
			log := o.logger(cmd.ErrOrStderr())
			store, err := o.openStore(log, runAsks{})
			if err != nil {
				return err
			}
			defer store.Close()
			reg := metricsRegistry(newKeyCollector(store, keys, log.Warnf))
			if o.textfile != "" {
				return o.writeTextfile(reg, log)
			}
			return o.serve(cmd.Context(), reg, log)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "", "serve the metrics on http://`ADDR`/metrics (host:port; port 0 picks a free one) until interrupted")
	cmd.Flags().StringVar(&o.textfile, "textfile", "", "write the metrics once to `FILE`, atomically, for node_exporter's textfile collector")
	return cmd
}

// checkWhere refuses anything but one of --listen and --textfile, and an
// address that is not host:port, before the store is opened.
func (o *metricsOptions) checkWhere() error {
	switch {
	case o.listen == "" && o.textfile == "":
		return usageErrorf("give --listen ADDR to serve the metrics, or --textfile FILE to write them once")
	case o.listen != "" && o.textfile != "":
		return usageErrorf("%s and %s: choose one", o.src.name("listen"), o.src.name("textfile"))
	case o.listen != "":
		if _, _, err := net.SplitHostPort(o.listen); err != nil {
			return usageErrorf("%s: %v", o.src.show("listen", o.listen), addrWhy(err))
		}
	}
	return nil
}

// addrWhy is err without what it repeats of the address (net's "address
// X: " and "listen tcp X: "), which the caller names with its flag.
func addrWhy(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// scrapeTimeout bounds one reading of the store: under Prometheus's
// default scrape timeout (10s), so that a store that does not answer is
// told as semrun_up 0 rather than as a scrape that failed.
const scrapeTimeout = 5 * time.Second

// maxScrapes bounds the scrapes served at once, each of which reads the
// store: more are answered 503.
const maxScrapes = 4

// serve serves reg on /metrics at --listen until SIGINT, SIGTERM or ctx
// ends, then shuts down cleanly.
func (o *metricsOptions) serve(ctx context.Context, reg *prometheus.Registry, log *logger) error {
	// Caught before the address is said, so that a signal sent once it
	// is stops the server cleanly.
	signals, stop := runner.UntilStopped()
	defer stop()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("%s: %w", o.src.show("listen", o.listen), addrWhy(err))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// What could be read is served: semrun_up and semrun_key_readable
		// say what could not. What the library itself fails at is said.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            warnLog(log.Warnf),
		MaxRequestsInFlight: maxScrapes,
	}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      scrapeTimeout + 10*time.Second,
		IdleTimeout:       time.Minute,
		// net/http's own complaints (a bad TLS client, an accept error)
		// are semrun's lines, escaped, not raw on stderr.
		ErrorLog: log.std(),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	o.tell("serving metrics on http://%s/metrics", ln.Addr())
	select {
	case sig := <-signals:
		log.Infof("%s: stopping", runner.SignalName(sig.(syscall.Signal)))
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("%s: %w", o.src.show("listen", o.listen), err)
	}
	// A scrape under way ends within scrapeTimeout: it is let finish.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scrapeTimeout+time.Second)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		_ = srv.Close()
	}
	<-served
	return nil
}

// tell says what the user needs even without --verbose: where metrics
// listens. --quiet silences it, as every line but errors.
func (o *metricsOptions) tell(format string, args ...any) {
	c := *o.commonOptions
	c.verbose = !c.quiet
	c.logger(o.f.Streams.ErrOut).Infof(format, args...)
}

// writeTextfile writes reg's metrics to --textfile, atomically: a file of
// its own in FILE's directory, renamed onto FILE.
func (o *metricsOptions) writeTextfile(reg *prometheus.Registry, log *logger) error {
	if !strings.HasSuffix(o.textfile, ".prom") {
		log.Warnf("%s: node_exporter's textfile collector reads only files named *.prom", o.src.show("textfile", o.textfile))
	}
	if err := writeTextfile(o.textfile, reg); err != nil {
		return fmt.Errorf("%s: %w", o.src.show("textfile", o.textfile), fileWhy(err))
	}
	return nil
}

// writeTextfile writes what g gathers to path through a new file of its
// own in path's directory, renamed onto path. Not the client library's
// WriteToTextfile: it sets the new file's mode by its name, while it
// reads the store, and in a directory others may write (node_exporter's,
// shared with a group) one of them could put a symbolic link under that
// name, and have root's cron job make any file readable by all. Here the
// store is read first, and the file is made (O_EXCL, never through a
// link), its mode set, and renamed, through one descriptor of the
// directory and one of the file.
func writeTextfile(path string, g prometheus.Gatherer) (err error) {
	families, err := g.Gather()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return err
		}
	}
	dir, name := filepath.Split(path)
	root, err := os.OpenRoot(cmp.Or(dir, "."))
	if err != nil {
		return err
	}
	defer root.Close()
	// Not *.prom, which node_exporter would read half written.
	tmp := "." + name + "." + rand.Text()[:16] + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	_, err = f.Write(b.Bytes())
	if err == nil {
		// node_exporter runs as another user.
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return root.Rename(tmp, name)
}

// fileWhy is err without the path of the temporary file it names, which
// the user never chose.
func fileWhy(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// warnLog says promhttp's errors as semrun's warnings, in one line.
type warnLog func(format string, args ...any)

func (w warnLog) Println(v ...any) {
	w("metrics: %v", oneLine(errors.New(strings.TrimSpace(fmt.Sprintln(v...)))))
}

// std is a standard library logger whose lines are l's warnings.
func (l *logger) std() *stdlog.Logger {
	return stdlog.New(warnWriter(l.Warnf), "", 0)
}

// warnWriter writes each line as a warning.
type warnWriter func(format string, args ...any)

func (w warnWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// metricsRegistry is a registry of c alone: no Go runtime or process
// metrics, which describe semrun's exporter, not the keys, and would
// differ between --listen and --textfile. It checks that what c collects
// is what it describes.
func metricsRegistry(c prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	return reg
}

// keySource is what the metrics read of a store (a semaphore.Store).
type keySource interface {
	Status(ctx context.Context, keys []string) ([]semaphore.KeyStatus, error)
	Keys(ctx context.Context) ([]string, error)
}

// maxMetricKeys bounds the keys a store names for the metrics: each is
// 45 series. Keys named on the command line are not bounded.
const maxMetricKeys = 1000

// keyCollector reads the keys' status from the store at each collection,
// within scrapeTimeout, and turns each into metrics (keyMetrics).
type keyCollector struct {
	store keySource
	// keys are the keys named; none: the store's Keys, never a walk of
	// the whole store.
	keys  []string
	warnf func(format string, args ...any)

	mu sync.Mutex
	// said are the problems the last collection said: a store down for
	// an hour is said once, not at every scrape.
	said map[string]bool
}

func newKeyCollector(store keySource, keys []string, warnf func(format string, args ...any)) *keyCollector {
	return &keyCollector{store: store, keys: dedupe(keys), warnf: warnf}
}

// Describe sends every metric's Desc: the registry checks each collected
// metric against them.
func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs().all() {
		ch <- d
	}
}

// Collect reads the keys and sends their metrics, with semrun_up.
func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
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
func (c *keyCollector) read(ctx context.Context) ([]semaphore.KeyStatus, []string, error) {
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
// first maxMetricKeys of them in order, and what was wrong with the list:
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
	if len(keys) > maxMetricKeys {
		problems = append(problems, fmt.Sprintf("the store keeps counters of %d keys: metrics of the first %d only; name the keys wanted", len(keys), maxMetricKeys))
		keys = keys[:maxMetricKeys]
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
func (c *keyCollector) say(problems []string) {
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
// makes them, for --listen and --textfile alike. A key that could not be
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
