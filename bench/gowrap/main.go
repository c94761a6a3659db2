// Command gowrap is the floor of any wrapper written in Go: it runs its
// arguments as a command with os/exec, passing the standard streams and
// the exit status on, and does nothing else. The bench builds it as it
// builds semrun, and shows semrun's start-up beside it as well as beside
// flock(1): what semrun costs beyond it is semrun's own doing.
//
//	gowrap COMMAND [ARG...]
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gowrap COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "gowrap:", err)
		os.Exit(127)
	}
}
