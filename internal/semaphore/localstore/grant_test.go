//go:build unix

package localstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// Callers that will not wait, taking and giving back permits that are free,
// are never told the key is busy because another holds its grant lock for
// a moment.
func TestLocalNoWaitIsNotBusyWhilePermitsAreFree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	const holders, callers, tries = 20, 4, 100
	req := semaphore.Request{Key: key, Permits: holders + callers, TTL: time.Second, NoWait: true}
	for range holders {
		hold(t, st, req)
	}
	var busy, failed atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tries {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := st.Acquire(ctx, req)
				cancel()
				tally(l, err, &busy, &failed)
			}
		}()
	}
	wg.Wait()
	if busy.Load() != 0 || failed.Load() != 0 {
		t.Errorf("no-wait Acquires of %d callers with a permit free for each: got %d busy and %d failed of %d, want none", callers, busy.Load(), failed.Load(), callers*tries)
	}
}

// The files of holders that are gone are removed by a later grant, once
// there are more of them than permits.
func TestLocalGrantSweepsGoneHoldersFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 2, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req))
	// As a holder killed with its command leaves them: locked by no one.
	for _, name := range []string{"held.AAAAAAAAAAAAAAAA", "held.BBBBBBBBBBBBBBBB", "held.CCCCCCCCCCCCCCCC", "taking.DDDDDDDDDDDDDDDD"} {
		if err := os.WriteFile(filepath.Join(dir, key, name), []byte("{}\n"), 0o600); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	l := hold(t, st, req)
	var records []string
	for _, name := range dirNames(t, filepath.Join(dir, key)) {
		if strings.HasPrefix(name, "held.") {
			records = append(records, name)
		}
	}
	if len(records) != 1 {
		t.Errorf("holders' files after a grant, 3 of holders gone beside it: got %q, want only the new holder's", records)
	}
	if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != l.Token() {
		t.Errorf("Status: got %+v, want the one holder", s)
	}
}
