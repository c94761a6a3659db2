package protocol

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// AtLimit explains an error of acquire.lua that says a counter of the key
// cannot be raised (someone wrote it, or it was used up), with the
// repair; nil for other errors.
func AtLimit(err error, k Keys) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return nil
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "TOKENLIMIT "):
		return fmt.Errorf("%s: no permit of this key can be granted; to repair, DEL %s (tokens then start again from Redis's clock)",
			strings.TrimPrefix(msg, "TOKENLIMIT "), k.Token)
	case strings.HasPrefix(msg, "COUNTERLIMIT "):
		return fmt.Errorf("%s: nobody can join this key's line; to repair, HDEL %s #seq",
			strings.TrimPrefix(msg, "COUNTERLIMIT "), k.Waiters)
	}
	return nil
}
