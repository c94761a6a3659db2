//go:build race

package action_test

// raceFlags build semrun as these tests are built, with -race: the build
// then finds every package in the cache the tests' own build left, and
// only links.
var raceFlags = []string{"-race"}
