//go:build linux && (mips || mipsle || mips64 || mips64le)

package runner

import "os"

// stackFault is empty: Linux on MIPS has no SIGSTKFLT.
var stackFault []os.Signal
