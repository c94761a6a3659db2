// Package metricstest reads back what semrun's metrics say, for the tests
// of the collector and of semrun metrics: the text format parsed with the
// client library's own parser, one series by its key, and the families
// semrun makes, written out by hand.
package metricstest

import (
	"math"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are every family semrun metrics has, and its type.
var Families = map[string]dto.MetricType{
	"semrun_up":                        dto.MetricType_GAUGE,
	"semrun_keys_left_out":             dto.MetricType_GAUGE,
	"semrun_key_readable":              dto.MetricType_GAUGE,
	"semrun_capacity_permits":          dto.MetricType_GAUGE,
	"semrun_held_permits":              dto.MetricType_GAUGE,
	"semrun_waiting":                   dto.MetricType_GAUGE,
	"semrun_paused":                    dto.MetricType_GAUGE,
	"semrun_oldest_holder_age_seconds": dto.MetricType_GAUGE,
	"semrun_grants_total":              dto.MetricType_COUNTER,
	"semrun_busy_total":                dto.MetricType_COUNTER,
	"semrun_timeouts_total":            dto.MetricType_COUNTER,
	"semrun_losses_total":              dto.MetricType_COUNTER,
	"semrun_revokes_total":             dto.MetricType_COUNTER,
	"semrun_wait_duration_seconds":     dto.MetricType_HISTOGRAM,
	"semrun_hold_duration_seconds":     dto.MetricType_HISTOGRAM,
}

// Parse parses text, in the text format, as Prometheus would.
func Parse(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, text)
	}
	return fams
}

// Series is the metric of family name whose key label is key; nil when
// there is none. Key "" is the family's series without labels.
func Series(fams map[string]*dto.MetricFamily, name, key string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "key" && l.GetValue() == key {
				return m
			}
		}
		if key == "" && len(m.GetLabel()) == 0 {
			return m
		}
	}
	return nil
}

// Value is the value of a gauge's or a counter's series; NaN when missing.
func Value(fams map[string]*dto.MetricFamily, name, key string) float64 {
	m := Series(fams, name, key)
	switch {
	case m == nil:
		return math.NaN()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return math.NaN()
}
