package cmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/semaphore"
)

// logger writes semrun's own lines to stderr, as --verbose, --quiet and
// --log-format say: warnings, --verbose lines, and the final error line.
type logger struct {
	sl *slog.Logger
}

// logger is the one place that makes semrun's own lines, in the format
// decided before the command line was parsed (readSettings).
func (c *commonOptions) logger(w io.Writer) *logger {
	level := slog.LevelWarn
	switch {
	case c.quiet:
		level = slog.LevelError
	case c.verbose:
		level = slog.LevelInfo
	}
	var h slog.Handler = &textHandler{w: w, level: level}
	if c.settings != nil && c.settings.jsonLines {
		h = slog.NewJSONHandler(printable.JSON(w), &slog.HandlerOptions{Level: level})
	}
	return &logger{sl: slog.New(h).With(c.logAttrs...)}
}

// checkLogFormat refuses a --log-format other than text or json.
func (c *commonOptions) checkLogFormat() error {
	if c.logFormat != "text" && c.logFormat != "json" {
		return usageErrorf("%s: must be text or json", c.src.show("log-format", c.logFormat))
	}
	return nil
}

// Warnf says something is off; --quiet silences it.
func (l *logger) Warnf(format string, args ...any) {
	l.sl.Warn(semaphore.Clip(fmt.Sprintf(format, args...), maxLine))
}

// Infof says what happens, with --verbose only.
func (l *logger) Infof(format string, args ...any) {
	l.sl.Info(semaphore.Clip(fmt.Sprintf(format, args...), maxLine))
}

// Final is the one line that says why semrun exits with status, which is
// not the command's own.
func (l *logger) Final(status int, msg string) {
	l.sl.Error(semaphore.Clip(msg, maxLine), "status", status)
}

// textHandler writes lines as semrun always has: "semrun: warning: ..."
// and "semrun: ...". The message says everything; attributes are for JSON.
type textHandler struct {
	w     io.Writer
	level slog.Level
}

func (h *textHandler) Enabled(_ context.Context, level slog.Level) bool { return level >= h.level }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	prefix := "semrun: "
	if r.Level == slog.LevelWarn {
		prefix = "semrun: warning: "
	}
	// What came from elsewhere (a server's error, a file's name) must not
	// drive the terminal, nor fake a line. One write: lines from two
	// goroutines do not mix.
	_, err := io.WriteString(h.w, prefix+printable.String(r.Message)+"\n")
	return err
}

// maxLine bounds one of semrun's lines: text a store or a server sent
// back (a reason, an error) is clipped where it is read, and whatever
// slipped through still makes one line a terminal shows whole.
const maxLine = 4096

func (h *textHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *textHandler) WithGroup(string) slog.Handler      { return h }
