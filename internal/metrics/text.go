package metrics

import (
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/semrun/semrun/internal/semaphore"
)

// ContentType is the media type of the text format text writes:
// Prometheus's text exposition format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// text is metrics in Prometheus's text exposition format, written as the
// client library's expfmt writes them, byte for byte (text_test.go makes
// the same metrics with the library and compares). semrun writes it
// itself so that no run pays for the library: its packages (and
// protobuf's) initialise at the start of every process that links them,
// about a millisecond of every run.
type text struct {
	b []byte
}

// family writes f's HELP and TYPE lines.
func (t *text) family(f *Family) {
	t.b = append(t.b, "# HELP "...)
	t.b = append(t.b, f.Name...)
	t.b = append(t.b, ' ')
	t.b = append(t.b, helpEscaper().Replace(f.Help)...)
	t.b = append(t.b, "\n# TYPE "...)
	t.b = append(t.b, f.Name...)
	t.b = append(t.b, ' ')
	t.b = append(t.b, f.Type...)
	t.b = append(t.b, '\n')
}

// sample writes one line: name and suffix, the label key unless it is
// "", the label le unless it is "", and v.
func (t *text) sample(name, suffix, key string, v float64) {
	t.labelled(name, suffix, key, "")
	t.value(v)
}

// labelled writes a series' name and labels: key (none when ""), and le
// (none when "").
func (t *text) labelled(name, suffix, key, le string) {
	t.b = append(t.b, name...)
	t.b = append(t.b, suffix...)
	if key == "" && le == "" {
		return
	}
	sep := byte('{')
	if key != "" {
		t.b = append(t.b, `{key="`...)
		t.b = append(t.b, valueEscaper().Replace(key)...)
		t.b = append(t.b, '"')
		sep = ','
	}
	if le != "" {
		t.b = append(t.b, sep)
		t.b = append(t.b, `le="`...)
		t.b = append(t.b, le...)
		t.b = append(t.b, '"')
	}
	t.b = append(t.b, '}')
}

// value ends a line with v, as the text format writes a float.
func (t *text) value(v float64) {
	t.b = append(t.b, ' ')
	t.b = appendFloat(t.b, v)
	t.b = append(t.b, '\n')
}

// histogram writes the series of h of one key: a bucket for each bound
// of semaphore.Buckets (le in seconds) and +Inf, the sum and the count.
func (t *text) histogram(name, key string, h *histogram) {
	var le []byte
	for i, b := range semaphore.Buckets {
		le = appendFloat(le[:0], b.Seconds())
		t.labelled(name, "_bucket", key, string(le))
		t.value(float64(h.cumulative[i]))
	}
	t.labelled(name, "_bucket", key, "+Inf")
	t.value(float64(h.count))
	t.sample(name, "_sum", key, h.sum)
	t.sample(name, "_count", key, float64(h.count))
}

// appendFloat appends f as the text format writes it: Go's shortest 'g'.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// escapers are the text format's: it escapes a backslash and a newline
// in HELP, and a double quote too in a label's value. Made when first
// used, not at the start of every run (a var set by a call would be).
var escapers struct {
	once        sync.Once
	help, value *strings.Replacer
}

func helpEscaper() *strings.Replacer {
	escapers.once.Do(makeEscapers)
	return escapers.help
}

func valueEscaper() *strings.Replacer {
	escapers.once.Do(makeEscapers)
	return escapers.value
}

func makeEscapers() {
	escapers.help = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	escapers.value = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
}
