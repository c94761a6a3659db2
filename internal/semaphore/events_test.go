package semaphore

import (
	"slices"
	"testing"
	"time"
)

// Buckets rise, start at 10ms, and hold every bound of OldBuckets: a count
// kept in an old bucket falls in the bucket of the same bound, so that no
// cumulative count of a histogram goes down when a store's counters kept
// in the old ones are read.
func TestBucketsHoldTheOldOnes(t *testing.T) {
	if !slices.IsSorted(Buckets) || Buckets[0] != 10*time.Millisecond {
		t.Errorf("Buckets %v: want them rising from 10ms", Buckets)
	}
	for _, b := range OldBuckets {
		if i := Bucket(b); i == len(Buckets) || Buckets[i] != b {
			t.Errorf("the old bound %v is no bound of Buckets: its counts would move", b)
		}
	}
	if Bucket(5*time.Millisecond) != 0 || Bucket(10*time.Millisecond) != 0 || Bucket(11*time.Millisecond) != 1 || Bucket(25*time.Hour) != len(Buckets) {
		t.Errorf("Bucket: a bound falls in its own bucket, the rest in the next")
	}
}
