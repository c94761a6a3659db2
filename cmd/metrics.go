//go:build !semrun_nometrics

package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/semrun/semrun/internal/metrics"
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
store keeps counters of, the first 200 of them.

With --listen, it serves them on http://ADDR/metrics, reading the store at each
scrape (once for the scrapes that come while it reads), until SIGINT or SIGTERM
(it then exits 0); it says where it listens on stderr. With --textfile, it
writes them once to FILE, atomically, for node_exporter's textfile collector,
from cron: it exits 0 once FILE is written.

semrun_up is 0 when the store could not be read, and semrun_key_readable 0 for
a key that could not be: the other metrics are then missing, and a line on
stderr says why. It exits 125 for bad flags or values.`,
		Example: `  semrun metrics --listen 127.0.0.1:9750
  semrun metrics --textfile /var/lib/node_exporter/textfile/semrun.prom pdf db`,
		Args: keyArgs,
		RunE: func(cmd *cobra.Command, keys []string) error {
			return o.withStore(cmd, o.checkWhere, func(store semaphore.Store, log *logger) error {
				c := metrics.NewCollector(store, keys, log.Warnf)
				if o.textfile != "" {
					return o.writeTextfile(c, log)
				}
				return o.serve(cmd.Context(), c, log)
			})
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

// The times that bound a client of --listen. None of them holds up
// another scrape: the store is read once for the scrapes that come while
// it reads (metrics.Collector.Shared), and each answer is written apart.
const (
	// headerTime bounds the reading of a request, from its connection or
	// its last answer: a client that sends nothing holds no connection
	// longer.
	headerTime = 10 * time.Second
	// writeTime bounds the writing of an answer, once the store is read:
	// a client that reads nothing holds its connection no longer.
	writeTime = 10 * time.Second
	// quietSpell ends an episode of answers that could not be written:
	// the first is said, the next ones only once none failed for as long.
	quietSpell = time.Minute
)

// serve serves c's metrics on /metrics at --listen until SIGINT, SIGTERM
// or ctx ends, then shuts down cleanly.
func (o *metricsOptions) serve(ctx context.Context, c *metrics.Collector, log *logger) error {
	// Caught before the address is said, so that a signal sent once it
	// is stops the server cleanly.
	signals, stop := runner.UntilStopped()
	defer stop()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("%s: %w", o.src.show("listen", o.listen), addrWhy(err))
	}
	srv := metricsServer(c, log.Warnf)
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
	// A scrape under way ends within metrics.ScrapeTimeout: it is let
	// finish. An answer a client does not read is cut short.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metrics.ScrapeTimeout+time.Second)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		_ = srv.Close()
	}
	<-served
	c.Wait() // a reading no scrape waits for any more
	return nil
}

// metricsServer is the server of c's metrics on /metrics, and nothing
// else; its complaints, and answers that could not be written, are said
// with warnf, once an episode.
func metricsServer(c *metrics.Collector, warnf func(string, ...any)) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", &metricsHandler{c: c, failed: &episode{warnf: warnf, quiet: quietSpell}})
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: headerTime,
		ReadTimeout:       headerTime,
		// The handler sets its own, once the store is read; this bounds
		// the rest.
		WriteTimeout:   metrics.ScrapeTimeout + writeTime + time.Second,
		IdleTimeout:    time.Minute,
		MaxHeaderBytes: 16 << 10, // a scrape's headers are a few hundred bytes
		// net/http's own complaints (an accept error, retried every
		// second while it lasts) are semrun's lines, escaped, once an
		// episode.
		ErrorLog: stdlog.New(warnWriter((&episode{warnf: warnf, quiet: quietSpell}).say), "", 0),
	}
}

// metricsHandler answers a scrape with the reading of the store it
// shares with the others under way (metrics.Collector.Shared), in the
// text format, gzipped when the client takes it (as Prometheus does).
type metricsHandler struct {
	c      *metrics.Collector
	failed *episode
}

func (h *metricsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET or HEAD only", http.StatusMethodNotAllowed)
		return
	}
	scrape := h.c.Shared(r.Context())
	if scrape == nil {
		return // the client left
	}
	body := scrape.Text
	w.Header().Set("Content-Type", metrics.ContentType)
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header) {
		body = scrape.Gzipped()
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	// From now: the time the store took is not the client's.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTime))
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(body); err != nil {
		h.failed.say("metrics: an answer to %s could not be written (a client that does not read?): %v; more are said only after %v without", r.RemoteAddr, err, quietSpell)
	}
}

// acceptsGzip tells whether a request's Accept-Encoding takes gzip (a
// weight of 0 refuses it).
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
				return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
			}
		}
	}
	return false
}

// episode says the first of a run of failures, and the next only once a
// quiet spell with none has passed: a client that fails every answer is
// one line, not one an answer.
type episode struct {
	warnf func(format string, args ...any)
	quiet time.Duration

	mu   sync.Mutex
	last time.Time // of the last failure; zero: none yet
}

func (e *episode) say(format string, args ...any) {
	e.mu.Lock()
	now := time.Now()
	fresh := e.last.IsZero() || now.Sub(e.last) >= e.quiet
	e.last = now
	e.mu.Unlock()
	if fresh {
		e.warnf(format, args...)
	}
}

// tell says what the user needs even without --verbose: where metrics
// listens. --quiet silences it, as every line but errors.
func (o *metricsOptions) tell(format string, args ...any) {
	c := *o.commonOptions
	c.verbose = !c.quiet
	c.logger(o.f.Streams.ErrOut).Infof(format, args...)
}

// writeTextfile writes c's metrics to --textfile, atomically: a file of
// its own in FILE's directory, renamed onto FILE.
func (o *metricsOptions) writeTextfile(c *metrics.Collector, log *logger) error {
	if !strings.HasSuffix(o.textfile, ".prom") {
		log.Warnf("%s: node_exporter's textfile collector reads only files named *.prom", o.src.show("textfile", o.textfile))
	}
	if err := metrics.WriteTextfile(o.textfile, c.Text()); err != nil {
		return fmt.Errorf("%s: %w", o.src.show("textfile", o.textfile), fileWhy(err))
	}
	return nil
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

// warnWriter writes each line as a warning.
type warnWriter func(format string, args ...any)

func (w warnWriter) Write(p []byte) (int, error) {
	w("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
