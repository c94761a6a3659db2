package redisstore

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// TestMain runs the tests 8 at a time unless -parallel says otherwise:
// they wait for leases, timeouts and servers far more than they compute
// (44s of CPU in 129s one per CPU on 2 CPUs; 43s of wall with 8), and the
// suite waited on them.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(8))
	}
	os.Exit(m.Run())
}
