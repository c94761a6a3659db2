//go:build !race

package action_test

// raceFlags build semrun as these tests are built, without -race.
var raceFlags []string
