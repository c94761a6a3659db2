//go:build !linux

package clock

import "time"

// start anchors the clock; Go's monotonic clock is the best this platform
// offers (on macOS it stops while the host sleeps; docs/how-it-works.md says so).
var start = time.Now()

func now() int64 { return int64(time.Since(start)) + 1 } // never the zero Instant

func alarm(at Instant, fire func()) func() { return timerAlarm(at, fire) }
