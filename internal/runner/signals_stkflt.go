//go:build linux && !mips && !mipsle && !mips64 && !mips64le

package runner

import (
	"os"
	"syscall"
)

// stackFault is SIGSTKFLT, which Linux has on all but MIPS.
var stackFault = []os.Signal{syscall.SIGSTKFLT}
