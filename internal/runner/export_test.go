package runner

import "os"

// NewSignals is Signals as a test makes them: c plays the signals semrun
// caught, and suspend stands in for a job-control stop of the test.
func NewSignals(c <-chan os.Signal, suspend func()) *Signals {
	return &Signals{c: c, suspend: suspend}
}
