package semaphore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// bug reports a known defect of the code under test. It skips the test so
// the suite stays green, unless SEMRUN_SHOW_BUGS is set, when it fails it.
func bug(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := "BUG: " + fmt.Sprintf(format, args...)
	if os.Getenv("SEMRUN_SHOW_BUGS") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// testPrefix namespaces every key the tests write.
const testPrefix = "test:"

var keySeq atomic.Int64

// uniqueKey returns a semaphore key no other test uses.
func uniqueKey(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), keySeq.Add(1))
}

// newStore returns a store for url with the test prefix and a short connect
// timeout, closed when t ends.
func newStore(t testing.TB, url string, o semaphore.RedisOptions) *semaphore.Redis {
	t.Helper()
	o.URL = url
	if o.Prefix == "" {
		o.Prefix = testPrefix
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	s, err := semaphore.NewRedis(o)
	if err != nil {
		t.Fatalf("NewRedis(%q): got error %v, want nil", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient talks to the server behind the store's back.
func rawClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// storeKeys are the Redis keys of a semaphore, as documented in lib.lua,
// and its wake-up channel. The tests find keys by scanning, never by
// trusting this naming alone.
type storeKeys struct{ holders, info, token, queue, waiters, channel string }

func keysOf(prefix, escaped string) storeKeys {
	base := prefix + "{" + escaped + "}:"
	return storeKeys{base + "holders", base + "info", base + "token", base + "queue", base + "waiters", base + "wake"}
}

// all are the keys in the order every script takes them.
func (k storeKeys) all() []string { return []string{k.holders, k.info, k.token, k.queue, k.waiters} }

// luaScript is one of the store's scripts, read from its files as the
// store embeds it: lib.lua, then the script's own.
func luaScript(t testing.TB, name string) *redis.Script {
	t.Helper()
	lib, err := os.ReadFile("lib.lua")
	if err != nil {
		t.Fatalf("read lib.lua: got error %v, want nil", err)
	}
	body, err := os.ReadFile(name + ".lua")
	if err != nil {
		t.Fatalf("read %s.lua: got error %v, want nil", name, err)
	}
	return redis.NewScript(string(lib) + string(body))
}

// enqueue runs acquire.lua as a caller that asks once to wait, with a
// waiter lease of wlease and weight 1, and then vanishes: it never asks
// again. It returns the caller's place in line (0: it was granted a permit
// of the same lease instead). The reply is acquire.lua's 11 integers.
func enqueue(t testing.TB, c *redis.Client, key, id string, n int, wlease time.Duration) int64 {
	t.Helper()
	k := keysOf(testPrefix, key)
	res, err := luaScript(t, "acquire").Run(context.Background(), c, k.all(),
		id, n, wlease.Milliseconds(), "", 1, wlease.Milliseconds(), k.channel).Int64Slice()
	if err != nil || len(res) != 11 {
		t.Fatalf("acquire.lua for %q: got (%v, %v), want 11 integers", id, res, err)
	}
	return res[5]
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes a permit with NoWait and fails t if none is granted.
func acquire(t testing.TB, s semaphore.Store, req semaphore.Request) semaphore.Lease {
	t.Helper()
	req.NoWait = true
	l, err := s.Acquire(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatalf("Acquire(key %q, n=%d): got error %v, want a permit", req.Key, req.Permits, err)
	}
	return l
}

// waitFor polls cond every 20ms until it holds or bound passes.
func waitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still false after %v, want true", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverMicros is the server's clock in microseconds.
func serverMicros(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: got error %v, want nil", err)
	}
	return now.UnixMicro()
}

// crc16 is CRC-16/XMODEM (poly 0x1021, init 0), the checksum of the Redis
// Cluster key-slot algorithm.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// hashSlot is the Redis Cluster slot of key: only the part between the first
// '{' and the first '}' after it is hashed, if that part is not empty.
func hashSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % 16384)
}

func TestHashSlotMatchesClusterSpec(t *testing.T) {
	// Reference values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789): got %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo":                  12182,
		"bar":                  5061,
		"{foo}bar":             12182,
		"a{foo}b{bar}":         12182,
		"{user1000}.following": hashSlot("user1000"),
	} {
		if got := hashSlot(key); got != want {
			t.Errorf("hashSlot(%q): got %d, want %d", key, got, want)
		}
	}
	if hashSlot("{}foo") == hashSlot("foo") {
		t.Errorf("hashSlot({}foo) == hashSlot(foo): an empty tag must hash the whole key")
	}
}

// warnings collects what a store passes to Warnf.
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) Warnf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, fmt.Sprintf(format, args...))
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

func release(t testing.TB, l semaphore.Lease) {
	t.Helper()
	if err := l.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("Release: got error %v, want nil", err)
	}
}

// hold takes a permit with NoWait, fails t if none is granted, and gives it
// back when t ends (releasing twice is harmless).
func hold(t testing.TB, s semaphore.Store, req semaphore.Request) semaphore.Lease {
	t.Helper()
	l := acquire(t, s, req)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(ctx)
	})
	return l
}

// acquired is what a background Acquire returned.
type acquired struct {
	l   semaphore.Lease
	err error
}

// startAcquire runs Acquire in a goroutine with a context of its own that
// ends after bound or when stop is called. When t ends, that context is
// canceled, the goroutine is waited for and a permit it got is released.
func startAcquire(t testing.TB, s semaphore.Store, req semaphore.Request, bound time.Duration) (result <-chan acquired, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	out := make(chan acquired, 1)
	done := make(chan struct{})
	var got semaphore.Lease
	go func() {
		defer close(done)
		l, err := s.Acquire(ctx, req)
		got = l
		out <- acquired{l, err}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if got != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = got.Release(ctx)
		}
	})
	return out, cancel
}

// receive waits up to bound for a background Acquire to return. The bound
// only catches a hang.
func receive(t testing.TB, ch <-chan acquired, bound time.Duration, what string) acquired {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(bound):
		t.Fatalf("%s: still waiting after %v, want it to return", what, bound)
		return acquired{}
	}
}

// signal returns a func that closes the returned channel on its first call.
func signal() (func(), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }, ch
}
