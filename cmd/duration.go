package cmd

import (
	"errors"
	"math"
	"strconv"
	"time"
)

// durationValue is a flag's duration: Go's form (90s, 1m30s) or, as
// timeout(1), flock -w and sem --st take it, a bare number of seconds
// (10, 0.5). Flags, variables and config files all set it through Set.
type durationValue time.Duration

func newDuration(p *time.Duration, value time.Duration) *durationValue {
	*p = value
	return (*durationValue)(p)
}

func (d *durationValue) Set(s string) error {
	if v, err := time.ParseDuration(s); err == nil {
		*d = durationValue(v)
		return nil
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return errors.New("not a duration: give seconds (10, 0.5) or a unit (90s, 2m, 1h30m)")
	}
	if math.Abs(secs) > float64(math.MaxInt64)/float64(time.Second) {
		return errors.New("too long a duration")
	}
	*d = durationValue(time.Duration(math.Round(secs * float64(time.Second))))
	return nil
}

// Type names the value in --help.
func (d *durationValue) Type() string { return "duration" }

// String is "0" for none, so that --help shows no default of zero.
func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}
