package runner

import (
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startCPUs are the CPUs semrun's threads had before onOneCPU first
// narrowed them for a while: the command gets those, whichever thread
// starts it. Read once: a second onOneCPU (tests run several semruns in
// one process) must not take a set another one narrowed for the process's.
var startCPUs = sync.OnceValues(func() (unix.CPUSet, bool) {
	var set unix.CPUSet
	return set, unix.SchedGetaffinity(0, &set) == nil
})

// onOneCPU runs f with every thread of semrun on the CPU the caller runs
// on, then gives each thread the CPUs it had. Asking for a signal
// (signal.Notify) is a round trip between the caller's thread and the
// runtime's signal thread, per signal: on one CPU that is a switch of
// threads, across two a wake-up of an idle CPU. BenchmarkCatchSignals
// measures it (0.77 against 1.17ms for the signals semrun catches, on a
// 2-CPU VM), and a whole --local run is 1.1ms faster with it (6.9
// against 7.9ms, 400 interleaved runs). A thread that escapes the
// narrowing, or the widening, only makes f slower or semrun's own threads
// narrower: the command starts with startCPUs (restoreCPUs), as cpus.txtar
// checks on every CPU and inside a set taskset restricts.
func onOneCPU(f func()) {
	start, ok := startCPUs()
	if !ok {
		f()
		return
	}
	var cpu int
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		f()
		return
	}
	var one unix.CPUSet
	one.Set(cpu)
	setThreadsCPUs(&one)
	defer setThreadsCPUs(&start)
	f()
}

// setThreadsCPUs puts every thread of semrun on set; best effort.
func setThreadsCPUs(set *unix.CPUSet) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = unix.SchedSetaffinity(tid, set)
		}
	}
}

// restoreCPUs gives the calling thread the CPUs semrun started with, so
// that the command, which inherits them from it, has them too.
func restoreCPUs() {
	if start, ok := startCPUs(); ok {
		_ = unix.SchedSetaffinity(0, &start)
	}
}
