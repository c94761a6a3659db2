//go:build unix

package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// A settings file that is no policy is skipped, with a line naming it:
// the key has no settings then, and is neither refused nor paused.
func TestLocalGarbageSettingsSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warnings semaphoretest.Warnings
	st := newLocal(t, dir, warnings.Warnf)
	later := time.Now().Add(100 * 24 * time.Hour).UnixMilli()
	for name, body := range map[string]string{
		"not JSON":         "paused, says I",
		"empty":            "",
		"another version":  `{"v":2,"capacity":1}`,
		"a capacity below": `{"v":1,"capacity":-1}`,
		"a capacity above": `{"v":1,"capacity":1000001}`,
		"a reason control": `{"v":1,"pause":{"reason":"x\u001b[2J"}}`,
		"a pause too long": fmt.Sprintf(`{"v":1,"pause":{"until_ms":%d}}`, later),
		"too long":         `{"v":1,"capacity":1,"x":"` + strings.Repeat("x", 1<<20) + `"}`, // past the most names
		"a FIFO":           "",
	} {
		t.Run(name, func(t *testing.T) {
			key := strings.ReplaceAll(name, " ", "-")
			req := semaphore.Request{Key: key, Permits: 2, TTL: time.Second}
			release(t, acquire(t, st, req)) // the key's directory
			path := filepath.Join(dir, key, "policy")
			if name == "a FIFO" {
				if err := syscall.Mkfifo(path, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			warnings.Take()

			a := acquire(t, st, req)
			b := acquire(t, st, req) // its own 2, no stored capacity
			release(t, a)
			release(t, b)
			got := warnings.Take()
			if len(got) != 2 {
				t.Errorf("warnings of two grants: got %q, want one each", got)
			}
			for _, w := range got {
				if !strings.Contains(w, "skipped its settings") || !strings.Contains(w, path) {
					t.Errorf("warning: got %q, want it saying %s was skipped", w, path)
				}
			}
			if s := statusOf(t, st, key); s.StoredCapacity != 0 || s.Paused != nil {
				t.Errorf("Status: got stored capacity %d, pause %+v; want neither", s.StoredCapacity, s.Paused)
			}
		})
	}
}

// The settings file as its doc comment says it, written by hand, is
// obeyed; and a pause whose end has passed is none.
func TestLocalSettingsFileAsDocumented(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 5, TTL: time.Second, NoWait: true}
	release(t, acquire(t, st, req))
	path := filepath.Join(dir, key, "policy")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	write(fmt.Sprintf(`{"v":1,"capacity":3,"pause":{"reason":"db upgrade","until_ms":%d}}`, time.Now().Add(time.Hour).UnixMilli()))
	_, err := acquireFor(t, st, 5*time.Second, req)
	var paused *semaphore.PausedError
	if !errors.As(err, &paused) || paused.Pause.Reason != "db upgrade" || paused.Pause.EndsIn <= 59*time.Minute {
		t.Fatalf("Acquire of a key paused for an hour: got %v, want a *PausedError, reason \"db upgrade\", an hour left", err)
	}
	if s := statusOf(t, st, key); s.StoredCapacity != 3 || s.Paused == nil {
		t.Errorf("Status: got stored capacity %d, pause %+v; want 3, paused", s.StoredCapacity, s.Paused)
	}

	write(fmt.Sprintf(`{"v":1,"capacity":1,"pause":{"until_ms":%d}}`, time.Now().Add(-time.Second).UnixMilli()))
	hold(t, st, req)
	if l, err := acquireFor(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) || errors.As(err, &paused) {
		if l != nil {
			release(t, l)
		}
		t.Errorf("Acquire (n=5) of a key of capacity 1, its pause ended, one holding: got %v, want busy, not paused", err)
	}
}

// Settings stay until unset, however long the key is unused: status
// lists the key, and removes its directory only once they are unset.
func TestLocalSettingsKeepKeyDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := st.SetCapacity(ctx, "capped", 2); err != nil {
		t.Fatal(err)
	}
	if err := st.Pause(ctx, "paused", "", 0); err != nil {
		t.Fatal(err)
	}
	release(t, acquire(t, st, semaphore.Request{Key: "plain", Permits: 1, TTL: time.Second}))
	if err := st.SetCapacity(ctx, "never", 0); err != nil {
		t.Fatalf("SetCapacity(0) of a key never used: got %v, want nil", err)
	}
	if err := st.Resume(ctx, "never"); err != nil {
		t.Fatalf("Resume of a key never used: got %v, want nil", err)
	}
	if got, want := dirNames(t, dir), []string{"capped", "paused", "plain"}; !slices.Equal(got, want) {
		t.Fatalf("entries of the lock directory: got %q, want %q (unsetting makes nothing)", got, want)
	}

	listed := func() []string {
		t.Helper()
		for _, name := range dirNames(t, dir) {
			age(t, filepath.Join(dir, name), semaphore.EventLife+time.Minute)
		}
		status, err := st.Status(ctxTimeout(t, 5*time.Second), nil)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		var keys []string
		for _, s := range status {
			keys = append(keys, s.Key)
			if s.Key == "capped" && s.StoredCapacity != 2 || s.Key == "paused" && s.Paused == nil {
				t.Errorf("Status of %q: got %+v, want its setting", s.Key, s)
			}
		}
		return keys
	}
	if got, want := listed(), []string{"capped", "paused"}; !slices.Equal(got, want) {
		t.Errorf("keys Status lists, all unused for long: got %q, want those with settings, %q", got, want)
	}
	if got, want := dirNames(t, dir), []string{"capped", "paused"}; !slices.Equal(got, want) {
		t.Errorf("entries of the lock directory: got %q, want %q", got, want)
	}
	if err := st.SetCapacity(ctx, "capped", 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Resume(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if got := listed(); len(got) != 0 {
		t.Errorf("keys Status lists once unset: got %q, want none", got)
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("entries of the lock directory once unset: got %q, want none", got)
	}
}

// A waiter is woken when the pause it waits behind is resumed, or ends
// by itself, as by a release: not at its next look, seconds later.
func TestLocalPauseEndWakesTheWaiter(t *testing.T) {
	t.Parallel()
	st := newLocal(t, t.TempDir(), nil)
	for _, resume := range []bool{true, false} {
		key := uniqueKey(t)
		d := 700 * time.Millisecond
		if resume {
			d = 0
		}
		if err := st.Pause(ctxTimeout(t, 5*time.Second), key, "", d); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		told, paused := signal()
		got, _ := startAcquire(t, st, semaphore.Request{
			Key: key, Permits: 1, TTL: time.Second,
			OnWait: func(s semaphore.WaitState) {
				if s.Paused {
					told()
				}
			},
		}, 30*time.Second)
		select {
		case <-paused:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter: not told of the pause within 10s")
		}
		if resume {
			// Its next look is 2s away.
			time.Sleep(300 * time.Millisecond)
			start = time.Now()
			if err := st.Resume(ctxTimeout(t, 5*time.Second), key); err != nil {
				t.Fatal(err)
			}
			d = 0
		}
		if r := receive(t, got, 10*time.Second, "waiter"); r.Err != nil {
			t.Fatalf("waiter (resumed %v): got %v, want a permit", resume, r.Err)
		}
		if took := time.Since(start); took > d+time.Second {
			t.Errorf("waiter (resumed %v) granted %v after the pause's end, want within a second: woken, not found at its next look", resume, took-d)
		}
	}
}

// A revoked holder's semrun learns of it within about a second, whatever
// its TTL, and stops its command; the permit is free once it let go.
func TestLocalRevokedHolderLearnsWithinASecond(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	op := newLocal(t, dir, nil) // the operator's semrun
	key := uniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: time.Minute}
	l := hold(t, st, req)

	done := make(chan struct{})
	var res runner.Result
	var runErr error
	go func() {
		defer close(done)
		res, runErr = runner.Run(context.Background(), runner.Spec{
			Args: []string{"sleep", "60"}, TTL: req.TTL, KillAfter: 5 * time.Second, Warnf: t.Logf,
		}, l)
	}()
	s := statusOf(t, op, key)
	if len(s.Holders) != 1 || s.Holders[0].ID == "" {
		t.Fatalf("Status: got holders %+v, want one, with an id", s.Holders)
	}
	// Its first look is after a second: between two looks, not at one.
	time.Sleep(200 * time.Millisecond)
	revoked := time.Now()
	if err := op.Revoke(ctxTimeout(t, 5*time.Second), key, s.Holders[0].ID, "rotate keys", false); err != nil {
		t.Fatalf("Revoke: got %v, want nil", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the command under a revoked permit still runs 5s after the revoke, want it stopped within a second")
	}
	var rev *semaphore.RevokedError
	if runErr != nil || !res.Terminated || res.Signal != syscall.SIGTERM || !errors.As(res.Lost, &rev) || rev.Reason != "rotate keys" {
		t.Fatalf("Run: got %+v, %v; want the command terminated for a revoke, reason \"rotate keys\"", res, runErr)
	}
	if took := time.Since(revoked); took > 2*time.Second {
		t.Errorf("the command stopped %v after the revoke, want within about a second (a look every second, then SIGTERM)", took)
	}
	if _, err := acquireFor(t, op, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire before the revoked holder let go: got %v, want ErrBusy", err)
	}
	release(t, l)
	release(t, acquire(t, op, semaphore.Request{Key: key, Permits: 1, TTL: time.Second}))
	for _, name := range dirNames(t, filepath.Join(dir, key)) {
		if strings.HasPrefix(name, "revoke") {
			t.Errorf("entries of the key's directory once the revoked holder let go: got %s, want its revoke removed", name)
		}
	}
}

// force cannot take a lock from a live process: the holder is revoked as
// without it, and the operator told so.
func TestLocalForcedRevokeOfLiveHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var warnings semaphoretest.Warnings
	st := newLocal(t, dir, warnings.Warnf)
	key := uniqueKey(t)
	l := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, Holder: semaphore.HolderInfo{Host: "ci-7", PID: 4242}})
	id := statusOf(t, st, key).Holders[0].ID
	if err := st.Revoke(ctxTimeout(t, 5*time.Second), key, id, "", true); err != nil {
		t.Fatalf("Revoke with force: got %v, want nil", err)
	}
	if got := warnings.Take(); len(got) != 1 || !strings.Contains(got[0], "pid 4242 on ci-7") || !strings.Contains(got[0], "is alive") {
		t.Errorf("warnings: got %q, want one saying the holder, pid 4242 on ci-7, is alive", got)
	}
	var rev *semaphore.RevokedError
	if err := l.Renew(ctxTimeout(t, 5*time.Second)); !errors.As(err, &rev) {
		t.Errorf("Renew after a forced revoke: got %v, want a *RevokedError", err)
	}
	if _, err := acquireFor(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire after a forced revoke, before the holder let go: got %v, want ErrBusy", err)
	}
}

// A holder that died let go of its permit: it is no holder any more, and
// its id is ErrNoHolder even with force.
func TestLocalRevokeOfDeadHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	key := uniqueKey(t)
	p := startHolder(t, dir, key)
	s := statusOf(t, st, key)
	if len(s.Holders) != 1 || s.Holders[0].Token != p.token {
		t.Fatalf("Status: got holders %+v, want the helper process", s.Holders)
	}
	p.kill(t)
	err := st.Revoke(ctxTimeout(t, 5*time.Second), key, s.Holders[0].ID, "", true)
	if !errors.Is(err, semaphore.ErrNoHolder) {
		t.Errorf("Revoke with force of a holder killed: got %v, want ErrNoHolder", err)
	}
}

// Operator calls refuse what no store should keep, before anything.
func TestLocalOperatorRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := newLocal(t, dir, nil)
	ctx := ctxTimeout(t, 5*time.Second)
	for what, err := range map[string]error{
		"SetCapacity(-1)":              st.SetCapacity(ctx, "k", -1),
		"SetCapacity(MaxPermits+1)":    st.SetCapacity(ctx, "k", semaphore.MaxPermits+1),
		"SetCapacity of key \"\"":      st.SetCapacity(ctx, "", 1),
		"Pause for -1s":                st.Pause(ctx, "k", "", -time.Second),
		"Pause past MaxPause":          st.Pause(ctx, "k", "", semaphore.MaxPause+time.Second),
		"Pause with a reason too long": st.Pause(ctx, "k", strings.Repeat("x", semaphore.MaxReason+1), 0),
		"Pause with a control":         st.Pause(ctx, "k", "a\nb", 0),
		"Revoke with a control":        st.Revoke(ctx, "k", "AAAAAAAAAA", "a\x1bb", false),
	} {
		if err == nil {
			t.Errorf("%s: got nil, want an error", what)
		}
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("entries of the lock directory: got %q, want none", got)
	}
	var bad *semaphore.SettingError
	if err := st.SetCapacity(ctx, "k", -1); !errors.As(err, &bad) || bad.Setting != semaphore.PermitsSetting {
		t.Errorf("SetCapacity(-1): got %v, want a *SettingError of the permits", err)
	}
}

// The helper process of the tests of members' settings: it does, to the
// key helperKeyEnv of the lock directory helperDirEnv, what
// helperOperateEnv says ("pause REASON", "resume", "capacity N"), and
// says "done" or "error ...".
const helperOperateEnv = "SEMRUN_TEST_OPERATE"

func TestHelperOperator(t *testing.T) {
	op := os.Getenv(helperOperateEnv)
	if op == "" {
		return // not the helper process
	}
	st, err := localstore.New(localstore.Options{Dir: os.Getenv(helperDirEnv)})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		key := os.Getenv(helperKeyEnv)
		verb, arg, _ := strings.Cut(op, " ")
		switch verb {
		case "pause":
			err = st.Pause(ctx, key, arg, 0)
		case "resume":
			err = st.Resume(ctx, key)
		case "capacity":
			n, _ := strconv.Atoi(arg)
			err = st.SetCapacity(ctx, key, n)
		default:
			err = fmt.Errorf("no such operation %q", verb)
		}
	}
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	fmt.Println("done")
}

// operateAs has a helper process running as uid do op to key in dir
// (see TestHelperOperator), and fails t unless it is done.
func operateAs(t *testing.T, bin string, uid int, dir, key, op string) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperOperator$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperKeyEnv+"="+key, helperOperateEnv+"="+op)
	cmd.SysProcAttr = asMember(uid)
	out, err := cmd.Output()
	if got, _, _ := strings.Cut(string(out), "\n"); err != nil || got != "done" {
		t.Fatalf("%s as uid %d: got %q (%v), want it done", op, uid, got, err)
	}
}
