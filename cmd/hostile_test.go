//go:build unix

package cmd

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// holdReply is hold.lua's reply, as a hostile or broken server may send
// it: a hold that ended in state, for why.
func holdReply(state, why string) string {
	fields := []string{"state", state, "why", why, "meta", ""}
	ints := []string{"at", "now", "permits", "weight", "token", "ttl", "replicas", "released", "left", "hard", "fresh"}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", 2*(len(fields)/2+len(ints)+2))
	for i := 0; i < len(fields); i += 2 {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n$%d\r\n%s\r\n", len(fields[i]), fields[i], len(fields[i+1]), fields[i+1])
	}
	for _, name := range ints {
		v := "0"
		switch name {
		case "permits", "weight", "token":
			v = "1"
		case "ttl":
			v = "30000"
		}
		fmt.Fprintf(&b, "$%d\r\n%s\r\n:%s\r\n", len(name), name, v)
	}
	b.WriteString("$3\r\nbad\r\n*0\r\n$6\r\nhanded\r\n*0\r\n")
	return b.String()
}

// What a store sends back reaches semrun's lines bounded, however long a
// co-tenant or a broken server made it, and a hold's state semrun does not
// know is said as such, never taken for one it knows.
func TestStoreTextIsBoundedInLines(t *testing.T) {
	t.Parallel()
	handle := semaphore.Handle{Store: semaphore.RedisStore, Key: "k", Secret: semaphore.NewSecret()}.String()
	for _, tc := range []struct {
		name, state, why string
		code             int
		want             string
	}{
		{"a 100 KB why", "lost", strings.Repeat("x", 100<<10), defaultLostExitCode, `^semrun: the hold of key "k" was lost: x{200}… \(102200 bytes more\), before this release: what ran under it may have run without the permit\n$`},
		{"an unknown state", "vanished", "who knows", defaultLostExitCode, `^semrun: the hold of key "k" ended in a state semrun does not know \("vanished"\): who knows, before this release: what ran under it may have run without the permit\n$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reply := holdReply(tc.state, tc.why)
			fake := redistest.NewFake(t, func(cmd string, _ []string) string {
				switch cmd {
				case "EVALSHA", "EVAL":
					return reply
				case "PING":
					return "+PONG\r\n"
				}
				return "-ERR fake\r\n"
			})
			code, _, stderr := run(t, testFactory(t, "SEMRUN_REDIS_URL="+fake.URL()), "release", handle)
			if code != tc.code || !regexp.MustCompile(tc.want).MatchString(stderr) {
				t.Errorf("semrun release: got %d, %.300q; want %d, %s", code, stderr, tc.code, tc.want)
			}
		})
	}
}
