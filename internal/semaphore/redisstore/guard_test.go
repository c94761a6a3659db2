package redisstore

import (
	"strconv"
	"strings"
	"testing"
)

// TestReplyGuardFollowsReplies: replies Redis sends pass, however the
// stream is cut into reads; absurd ones fail at their header.
func TestReplyGuardFollowsReplies(t *testing.T) {
	t.Parallel()
	valid := strings.Join([]string{
		"+OK\r\n", "-ERR no\r\n", ":42\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n", "$0\r\n\r\n",
		"$5\r\nhe\nlo\r\n",
		"*3\r\n*2\r\n$1\r\na\r\n:1\r\n*0\r\n*1\r\n*1\r\n+x\r\n",
		strings.Repeat("*1\r\n", maxReplyDepth) + ":1\r\n",
		// RESP3, which go-redis speaks to sentinels.
		"_\r\n", ",1.5\r\n", "#t\r\n", "(12345678901234567890\r\n", "=7\r\ntxt:abc\r\n", "!3\r\nERR\r\n",
		"%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n:1\r\n:2\r\n", "~1\r\n:1\r\n", ">2\r\n+m\r\n+x\r\n",
	}, "")
	// Arrays of one reply add up to the most a reply may declare; the next
	// reply starts from nothing. (24MB: read in pieces of a few sizes, not
	// byte by byte, which took minutes under -race on a loaded machine.)
	full := "*2\r\n*" + strconv.Itoa(maxReplyElements/2) + "\r\n" + strings.Repeat(":1\r\n", maxReplyElements/2) + "*0\r\n" +
		"*" + strconv.Itoa(maxReplyElements) + "\r\n" + strings.Repeat(":1\r\n", maxReplyElements)
	for _, c := range []struct {
		replies string
		sizes   []int
	}{
		{valid, []int{1, 2, 7, 4096, len(valid)}},
		{valid + full + valid, []int{4093, len(valid) + len(full) + len(valid)}},
	} {
		for _, size := range c.sizes {
			var g replyGuard
			for b := []byte(c.replies); len(b) > 0; {
				n := min(size, len(b))
				if err := g.scan(b[:n]); err != nil {
					t.Fatalf("reads of %d bytes: %v at %d bytes from the end", size, err, len(b))
				}
				b = b[n:]
			}
			if len(g.open) != 0 || g.body != 0 || len(g.line) != 0 {
				t.Errorf("reads of %d bytes: the guard is within a reply at the end: %+v", size, g)
			}
		}
	}
	for _, absurd := range []string{
		"*3000000000\r\n",
		"$3000000000\r\n",
		"$16777217\r\n",
		"*9223372036854775807\r\n",
		"*2\r\n*" + strconv.Itoa(maxReplyElements) + "\r\n",
		strings.Repeat("*1\r\n", maxReplyDepth+1),
		"*-2\r\n",
		"%2305843009213693952\r\n",
		"?1\r\n",
		// Attributes: go-redis skips them by recursion, a nil one too.
		"*1\r\n|-1\r\n*1\r\n|-1\r\n:1\r\n",
		"|0\r\n:1\r\n",
		":1\n",
		"+" + strings.Repeat("x", maxReplyLine),
	} {
		var g replyGuard
		if err := g.scan([]byte(absurd)); err == nil {
			t.Errorf("%.40q: passed", absurd)
		}
	}
}
