package semaphore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// TestRequestValidate: a request that no store should serve is refused
// with a *SettingError naming the setting at fault and its value.
func TestRequestValidate(t *testing.T) {
	ok := semaphore.Request{Key: "k", Permits: 3, TTL: 30 * time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v): got %v, want nil", ok, err)
	}
	for _, tc := range []struct {
		edit func(*semaphore.Request)
		want string
	}{
		{func(r *semaphore.Request) { r.Key = "" }, `key "": must not be empty`},
		{func(r *semaphore.Request) { r.Key = strings.Repeat("k", semaphore.MaxKeyLen+1) }, "is 201 bytes long"},
		{func(r *semaphore.Request) { r.Permits = 0 }, "permits 0: must be from 1 to 1000000"},
		{func(r *semaphore.Request) { r.Permits = semaphore.MaxPermits + 1 }, "permits 1000001: must be from 1 to 1000000"},
		{func(r *semaphore.Request) { r.Weight = 4 }, "weight 4: must be from 1 to 3 permits"},
		{func(r *semaphore.Request) { r.Weight = -1 }, "weight -1: must be from 1 to 3 permits"},
		{func(r *semaphore.Request) { r.TTL = 999 * time.Millisecond }, "lease 999ms: must be from 1s to 24h0m0s"},
		{func(r *semaphore.Request) { r.TTL = 25 * time.Hour }, "lease 25h0m0s: must be from 1s to 24h0m0s"},
		{func(r *semaphore.Request) { r.TTL = time.Second + time.Microsecond }, "lease 1.000001s: must be whole milliseconds"},
		{func(r *semaphore.Request) { r.RestartFence = -time.Second }, "restart fence -1s: must be from 0 to 24h0m0s"},
		{func(r *semaphore.Request) { r.MinReplicas = semaphore.MaxReplicas + 1 }, "min replicas 1001: must be from 0 to 1000"},
		{func(r *semaphore.Request) { r.MinHoldAfter = "failure" }, `min hold after "failure": must be success or any`},
		{func(r *semaphore.Request) { r.MinHoldAfter = "Success" }, `min hold after "Success": must be success or any`},
	} {
		req := ok
		tc.edit(&req)
		err := req.Validate()
		var refused *semaphore.SettingError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v): got %v, want a *SettingError saying %q", req, err, tc.want)
		}
	}
	for _, a := range []semaphore.CoolAfter{"", semaphore.CoolAfterAny, semaphore.CoolAfterSuccess} {
		req := ok
		req.MinHoldAfter = a
		if err := req.Validate(); err != nil {
			t.Errorf("Validate with MinHoldAfter %q: got %v, want nil", a, err)
		}
	}
	if got := (semaphore.Request{Weight: 0}).Takes(); got != 1 {
		t.Errorf("Takes of weight 0: got %d, want 1", got)
	}
	if got := (semaphore.Request{Weight: 2}).Takes(); got != 2 {
		t.Errorf("Takes of weight 2: got %d, want 2", got)
	}
}

// TestCoolAfter: with CoolAfterSuccess only a success cools, and a status
// unknown, which may be one; otherwise every end cools.
func TestCoolAfter(t *testing.T) {
	for _, tc := range []struct {
		after  semaphore.CoolAfter
		status int
		want   bool
	}{
		{"", 1, true},
		{semaphore.CoolAfterAny, 0, true},
		{semaphore.CoolAfterAny, 143, true},
		{semaphore.CoolAfterSuccess, 0, true},
		{semaphore.CoolAfterSuccess, -1, true},
		{semaphore.CoolAfterSuccess, 1, false},
		{semaphore.CoolAfterSuccess, 124, false},
	} {
		if got := tc.after.Cools(tc.status); got != tc.want {
			t.Errorf("CoolAfter(%q).Cools(%d): got %v, want %v", tc.after, tc.status, got, tc.want)
		}
	}
}
