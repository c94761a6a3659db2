package redisstore

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// TestAbsurdRepliesAreErrors: replies no Redis sends (lengths that would
// overflow, shapes the scripts never make) from a fake server give an
// error, at once, never a panic: before a run, one line and 125; during
// one, a failed renewal (the permit in doubt), not ErrLost.
func TestAbsurdRepliesAreErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, reply string }{
		{"a huge bulk length", "$9223372036854775807\r\n"},
		{"a huge array length", "*4611686018427387904\r\n"},
		{"an array length of three billion", "*3000000000\r\n"},
		{"a bulk length of three billion", "$3000000000\r\n"},
		{"deeply nested arrays", strings.Repeat("*1\r\n", 100000) + ":1\r\n"},
		{"a status-shaped reply with a huge count", "*3\r\n:1\r\n:2\r\n:4611686018427387904\r\n"},
		{"names without values", "*3\r\n$7\r\ngranted\r\n:1\r\n$5\r\ntoken\r\n"},
		{"a negative bulk length", "$-7\r\n"},
		{"not RESP", "hello\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := redistest.NewFake(t, func(cmd string, _ []string) string {
				if cmd == "EVALSHA" || cmd == "EVAL" {
					return tc.reply
				}
				return "-ERR fake\r\n"
			})
			st := newStore(t, fake.URL(), Options{ConnectTimeout: time.Second})
			start := time.Now()
			_, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: "k", Permits: 1, TTL: 30 * time.Second})
			if err == nil || strings.Contains(err.Error(), "\n") {
				t.Errorf("Acquire: got %v, want one line", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Acquire: took %v, want the error within the connect timeout", d)
			}
			l := st.newLease(semaphore.Request{Key: "k", TTL: 30 * time.Second}, protocol.NewKeys(testPrefix, "k"), "ID", 1, semaphore.Slots{}, clock.Now().Add(time.Hour), clock.Now(), 0, 0)
			if err := l.Renew(ctxTimeout(t, 5*time.Second)); err == nil || strings.Contains(err.Error(), semaphore.ErrLost.Error()) {
				t.Errorf("Renew: got %v, want an error that leaves the permit in doubt", err)
			}
			// The key is named as unreadable, or the store as failing: in one line.
			got, err := st.Status(ctxTimeout(t, 5*time.Second), []string{"k"})
			switch {
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Errorf("Status: got %v, want one line", err)
			case err == nil && (len(got) != 1 || got[0].Error == "" || strings.Contains(got[0].Error, "\n")):
				t.Errorf("Status: got %+v, want the key named as unreadable, in one line", got)
			}
		})
	}
}

// TestDoctorReadsAnyInfo: doctor reads an INFO reply without "# Server",
// or of lines that are not fields, as saying nothing: no panic.
func TestDoctorReadsAnyInfo(t *testing.T) {
	t.Parallel()
	for _, info := range []string{"redis_version:7.0.0\r\n", "", "#\r\n:\r\n::::\r\nno colon\r\n", strings.Repeat("x:y\r\n", 5000)} {
		fake := redistest.NewFake(t, func(cmd string, _ []string) string {
			switch cmd {
			case "INFO":
				return "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
			case "PING":
				return "+PONG\r\n"
			}
			return "-ERR fake\r\n"
		})
		st := newStore(t, fake.URL(), Options{ConnectTimeout: time.Second})
		if checks := st.Doctor(context.Background()); len(checks) == 0 {
			t.Errorf("doctor with INFO %.40q: got no checks", info)
		}
	}
	if got := parseInfo("# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:3\r\n"); got["redis_version"] != "7.0.15" || got["uptime_in_seconds"] != "3" || len(got) != 2 {
		t.Errorf("parseInfo: got %v", got)
	}
}

// TestNotRedisIsSaid: a server of another protocol at the address (a web
// server) is said to be one, at once and in one line, not an absurd Redis
// retried for the connect timeout.
func TestNotRedisIsSaid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer, want string }{
		{"HTTP", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", `not Redis: an HTTP server there answered "HTTP/1.1 400 Bad Request"`},
		{"HTTP/0.9", "<!DOCTYPE HTML>\n<html>", `not Redis: a server there answered "<!DOCTYPE HTML>"`},
		{"SSH", "SSH-2.0-OpenSSH_9.2\r\n", `not Redis: an SSH server there answered "SSH-2.0-OpenSSH_9.2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						_ = c.SetDeadline(time.Now().Add(5 * time.Second))
						buf := make([]byte, 512)
						_, _ = c.Read(buf)
						_, _ = c.Write([]byte(tc.answer))
					}()
				}
			}()
			st := newStore(t, "redis://"+ln.Addr().String()+"/0", Options{ConnectTimeout: 30 * time.Second})
			_, err = st.Acquire(ctxTimeout(t, 40*time.Second), semaphore.Request{Key: "k", Permits: 1, TTL: 30 * time.Second})
			// Not retried: well within the 30s connect timeout, whatever the load.
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "unreachable") {
				t.Errorf("Acquire: got %v, want one line saying %s", err, tc.want)
			}
		})
	}
}
