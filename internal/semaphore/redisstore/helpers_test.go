package redisstore

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// TestContract: a Redis store obeys the rules of every store.
func TestContract(t *testing.T) {
	semaphoretest.Run(t, semaphoretest.Kind{
		Name: "Redis", Leases: true, InLine: true,
		Start: func(t *testing.T) *semaphoretest.Backend {
			srv := redistest.New(t)
			raw := rawClient(t, srv.Addr)
			return &semaphoretest.Backend{
				Open: func(warnf func(string, ...any)) semaphore.Store {
					return newStore(t, srv.URL(), Options{Warnf: warnf})
				},
				Written: func() []string { return scanKeys(t, raw, "*") },
			}
		},
	})
}

// The helpers every store's tests share.
var (
	uniqueKey    = semaphoretest.UniqueKey
	ctxTimeout   = semaphoretest.Context
	acquire      = semaphoretest.Acquire
	hold         = semaphoretest.Hold
	release      = semaphoretest.Release
	startAcquire = semaphoretest.StartAcquire
	receive      = semaphoretest.Receive
	signal       = semaphoretest.Signal
	waitFor      = semaphoretest.WaitFor
	statusOf     = semaphoretest.StatusOf
)

// testPrefix namespaces every key the tests write.
const testPrefix = "test:"

// testNames name a setting "<setting>" in messages, so that a test sees
// where one names a setting, and that it went through Names.
type testNames struct{}

func (testNames) Name(s semaphore.Setting) string { return "<" + string(s) + ">" }

func (testNames) Ways(s semaphore.Setting, value string) string {
	if value == "" {
		return "<" + string(s) + ">"
	}
	return "<" + string(s) + "=" + value + ">"
}

// withDefaults is o with the test prefix, a short connect timeout and
// testNames, where o sets none.
func withDefaults(o Options) Options {
	if o.Names == nil {
		o.Names = testNames{}
	}
	if o.Prefix == "" {
		o.Prefix = testPrefix
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	return o
}

// newStore returns a store for url (see withDefaults), closed when t ends.
func newStore(t testing.TB, url string, o Options) *Store {
	t.Helper()
	o.URL = url
	s, err := New(withDefaults(o))
	if err != nil {
		t.Fatalf("New(%q): got error %v, want nil", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// wrapStore returns a store over c, closed when t ends, as New would make
// one for o: the way a test puts a hook between the store and Redis.
func wrapStore(t testing.TB, c *redis.Client, o Options) *Store {
	t.Helper()
	s := NewWithClient(ServerClient(c), c.Options().Addr, withDefaults(o))
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

// runScript runs one of the store's scripts on c, as the store does.
func runScript(t testing.TB, c redis.Scripter, k protocol.Keys, a protocol.Args) any {
	t.Helper()
	res, err := protocol.Run(context.Background(), c, k, a)
	if err != nil {
		t.Fatalf("%T: got error %v, want a reply", a, err)
	}
	return res
}

// runAcquireArgs runs acquire.lua with a on c and returns its reply.
func runAcquireArgs(t testing.TB, c redis.Scripter, k protocol.Keys, a protocol.AcquireArgs) protocol.AcquireReply {
	t.Helper()
	a.Weight = max(a.Weight, 1)
	r, err := protocol.DecodeAcquire(runScript(t, c, k, a))
	if err != nil {
		t.Fatalf("acquire.lua for %q: got %v, want its reply", a.ID, err)
	}
	return r
}

// enqueue runs acquire.lua as a caller that asks once to wait, with a
// waiter lease of wlease and weight 1, and then vanishes: it never asks
// again. It returns the caller's place in line (0: it was granted a permit
// of the same lease instead).
func enqueue(t testing.TB, c redis.Scripter, key, id string, n int, wlease time.Duration) int64 {
	t.Helper()
	return runAcquireArgs(t, c, protocol.NewKeys(testPrefix, key), protocol.AcquireArgs{ID: id, Permits: n, TTL: wlease, Wait: wlease}).Position
}

// scanKeys lists the keys matching pattern, by SCAN.
func scanKeys(t testing.TB, c *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, pattern, 100).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN %s: got error %v, want nil", pattern, err)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// stateKeys are keys less those of what happened to semaphores (their
// logs and counters, which outlive them by protocol.EventLife) and the
// index of them, under prefix.
func stateKeys(prefix string, keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return protocol.IsPast(k) || k == protocol.Index(prefix) })
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

// scriptNamed is the store's script in name.lua.
func scriptNamed(t testing.TB, name string) *protocol.Script {
	t.Helper()
	for _, sc := range protocol.Scripts() {
		if sc.Name() == name+".lua" {
			return sc
		}
	}
	t.Fatalf("no script %s.lua", name)
	return nil
}
