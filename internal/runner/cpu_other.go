//go:build !linux

package runner

// onOneCPU runs f: only Linux lets semrun choose its threads' CPUs.
func onOneCPU(f func()) { f() }

// restoreCPUs has nothing to give back where onOneCPU changes nothing.
func restoreCPUs() {}
