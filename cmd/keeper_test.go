//go:build linux

package cmd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
)

// TestMain lets this test binary be the keeper semrun acquire starts
// (Factory.Self): started so, it runs semrun, which reads the rest from
// its pipe.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == keeperArg {
		f := &Factory{Streams: SystemStreams(), Environ: os.Environ(), DefaultRedisURL: "redis://127.0.0.1:1/0"}
		os.Exit(Run(context.Background(), os.Args[1:], f))
	}
	os.Exit(m.Run())
}

// TestKeeperLeavesItsCallersDirectory: a hold's keeper runs in /, not in
// the directory of the acquire that started it, and the settings that
// named files there by relative paths (a config file, the lock directory
// it names, TLS files, a password file; from flags, variables and files)
// still name them: the keeper opens its store with them, and keeps the
// hold. Not parallel: it changes the test's directory, where the keeper
// starts.
func TestKeeperLeavesItsCallersDirectory(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// settings writes the files of a store in the directory dir (the
		// current one) and returns the environment and the flags that
		// name them relative to it.
		settings func(t *testing.T, dir string) (env, flags []string)
	}{
		{"a config file naming a lock directory", func(t *testing.T, dir string) ([]string, []string) {
			write(t, filepath.Join(dir, "semrun.yaml"), "local: true\nlock-dir: locks\n", 0o600)
			if err := os.Mkdir(filepath.Join(dir, "locks"), 0o700); err != nil {
				t.Fatal(err)
			}
			return nil, []string{"--config", "semrun.yaml"}
		}},
		{"TLS files", func(t *testing.T, dir string) ([]string, []string) {
			pki, err := redistest.WritePKI(dir)
			if err != nil {
				t.Fatal(err)
			}
			r := redistest.NewTLS(t, pki.TLSFiles(true))
			return []string{"SEMRUN_REDIS_URL=" + r.URL()}, []string{"--tls-ca", "ca.pem", "--tls-cert", "client.pem", "--tls-key", "client-key.pem"}
		}},
		{"a password file", func(t *testing.T, dir string) ([]string, []string) {
			r := redistest.New(t)
			c := redis.NewClient(&redis.Options{Addr: r.Addr})
			defer c.Close()
			if err := c.ConfigSet(t.Context(), "requirepass", "s3cret").Err(); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "password"), "s3cret\n", 0o600)
			return []string{"SEMRUN_REDIS_URL=" + r.URL(), "SEMRUN_REDIS_PASSWORD_FILE=password"}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			env, flags := tc.settings(t, dir)
			env = append(env, "SEMRUN_RESTART_FENCE=0")
			f := testFactory(t, env...)
			f.Self = self
			code, out, errOut := run(t, f, append([]string{"acquire", "-k", "k", "--json"}, flags...)...)
			if code != 0 {
				t.Fatalf("acquire: got status %d, stderr %q; want 0", code, errOut)
			}
			var hold struct {
				Handle string `json:"handle"`
				Keeper int    `json:"keeper_pid"`
			}
			if err := json.Unmarshal([]byte(out), &hold); err != nil {
				t.Fatalf("acquire's output %q: %v", out, err)
			}
			defer func() { // not left behind by a test that failed
				if p, err := os.FindProcess(hold.Keeper); err == nil {
					_ = p.Kill()
				}
			}()
			if cwd, err := os.Readlink("/proc/" + strconv.Itoa(hold.Keeper) + "/cwd"); err != nil || cwd != "/" {
				t.Errorf("the keeper's directory: got %q (%v), want /", cwd, err)
			}
			if code, _, errOut := run(t, testFactory(t, env...), append([]string{"-k", "k", "--no-wait"}, append(flags, "--", "true")...)...); code != 75 {
				t.Errorf("a run beside the hold: got status %d, stderr %q; want 75, the key held", code, errOut)
			}
			if code, _, errOut := run(t, testFactory(t, env...), append([]string{"release", hold.Handle}, flags...)...); code != 0 || errOut != "" {
				t.Errorf("release: got status %d, stderr %q; want 0 and nothing said, the hold kept until then", code, errOut)
			}
		})
	}
}

// write writes a file of the test's.
func write(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}
