package cmd

import (
	"testing"
	"time"
)

func TestDurationTakesBareSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"10", 10 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"0", 0, true},
		{"1e3", 1000 * time.Second, true},
		{"90s", 90 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"-2", -2 * time.Second, true}, // refused later, by the range each flag checks
		{"", 0, false},
		{"soon", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"1e300", 0, false},
		{"10 s", 0, false},
	} {
		var d time.Duration
		err := newDuration(&d, time.Hour).Set(tc.in)
		if tc.ok && (err != nil || d != tc.want) {
			t.Errorf("Set(%q): got (%v, %v), want %v", tc.in, d, err, tc.want)
		}
		if !tc.ok && err == nil {
			t.Errorf("Set(%q): got %v, want an error", tc.in, d)
		}
	}
}
