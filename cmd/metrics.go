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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
			return o.withStore(cmd, o.checkWhere, func(store semaphore.Store, log *logger) error {
				reg := metrics.Registry(metrics.NewCollector(store, keys, log.Warnf))
				if o.textfile != "" {
					return o.writeTextfile(reg, log)
				}
				return o.serve(cmd.Context(), reg, log)
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
		WriteTimeout:      metrics.ScrapeTimeout + 10*time.Second,
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
	// A scrape under way ends within metrics.ScrapeTimeout: it is let finish.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metrics.ScrapeTimeout+time.Second)
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
	if err := metrics.WriteTextfile(o.textfile, reg); err != nil {
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
