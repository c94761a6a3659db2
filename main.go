// Command semrun runs a command while holding one of N fleet-wide permits.
package main

import (
	"os"

	"github.com/semrun/semrun/cmd"
)

func main() { os.Exit(cmd.Main()) }
