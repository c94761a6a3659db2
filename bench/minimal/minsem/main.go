// Command minsem makes one grant and release of the minimal semaphore
// (package minimal) on a connection of its own, and exits: the bench's
// cost part runs it as a process per grant, as semrun runs, with the same
// handshake (RESP2, HELLO, no CLIENT SETINFO).
//
//	minsem ADDR KEY ID
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/bench/minimal"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: minsem ADDR KEY ID")
		os.Exit(2)
	}
	c := redis.NewClient(&redis.Options{Addr: os.Args[1], Protocol: 2, DisableIdentity: true})
	err := minimal.GrantRelease(context.Background(), c, os.Args[2], os.Args[3])
	_ = c.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "minsem:", err)
		os.Exit(1)
	}
}
