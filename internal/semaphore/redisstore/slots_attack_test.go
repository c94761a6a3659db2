package redisstore

import (
	"slices"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// TestSlotsAttackNotItsWeight: a reply or a turn (anyone may have pushed
// one to a wake list) whose slots are not as many as the request's weight
// gives the lease no slots: a child never gets slots its grant did not
// take.
func TestSlotsAttackNotItsWeight(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, "redis://"+srv.Addr+"/0", Options{})
	for _, tc := range []struct {
		weight int
		slots  []int
		want   []int
	}{
		{0, []int{0, 1, 2}, nil},
		{1, []int{4}, []int{4}},
		{2, []int{3}, nil},
		{2, []int{3, 5}, []int{3, 5}},
	} {
		req := semaphore.Request{Key: "k", Permits: 8, Weight: tc.weight, TTL: 30 * time.Second}
		l := st.newLease(req, protocol.NewKeys(testPrefix, "k"), "ID", 1, semaphore.Slots{Numbers: tc.slots}, clock.Now().Add(time.Hour), clock.Now(), 0, 0)
		if got := l.Slots().Numbers; !slices.Equal(got, tc.want) {
			t.Errorf("weight %d, slots %v answered: got lease slots %v, want %v", tc.weight, tc.slots, got, tc.want)
		}
	}
}
