package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// On a Cluster no script sees every key: AcquireAll says so, holding
// nothing, and the caller takes the keys one after another instead. (The
// rules of several keys in one step are semaphoretest's, rules_several.go.)
func TestAcquireAllNotOnACluster(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, srv.URL(), Options{})
	st.cluster = true
	reqs := []semaphore.Request{{Key: "ca", Permits: 1, TTL: 5 * time.Second}, {Key: "cb", Permits: 1, TTL: 5 * time.Second}}
	if _, err := st.AcquireAll(context.Background(), reqs); !errors.Is(err, semaphore.ErrNotAtOnce) {
		t.Fatalf("on a cluster: got %v, want ErrNotAtOnce", err)
	}
}
