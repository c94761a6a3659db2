//go:build !linux

package runner

// OnOneCPU runs f: only Linux lets semrun choose its threads' CPUs.
func OnOneCPU(f func()) { f() }

// restoreCPUs has nothing to give back where OnOneCPU changes nothing.
func restoreCPUs() {}
