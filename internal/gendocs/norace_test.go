//go:build !race

package main

// raceFlags build semrun as these tests are built, without -race.
var raceFlags []string
