package semaphoretest

import (
	"flag"
	"strconv"
	"testing"
)

// Parallel is how many of a store's tests run at once unless -parallel
// says otherwise: they wait for leases, timeouts, servers and helper
// processes far more than they compute (the Redis store's: 44s of CPU in
// 129s one per CPU on 2 CPUs, 43s of wall 8 at a time).
const Parallel = 8

// Main runs a store package's tests, Parallel at a time unless -parallel
// is given, and returns their exit status: its TestMain is
// os.Exit(semaphoretest.Main(m)).
func Main(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(Parallel))
	}
	return m.Run()
}
