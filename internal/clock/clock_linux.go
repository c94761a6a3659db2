package clock

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// now reads CLOCK_BOOTTIME: the monotonic clock plus the time suspended.
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock: CLOCK_BOOTTIME: " + err.Error()) // Linux has had it since 2.6.39
	}
	return ts.Nano()
}

// alarm arms a timerfd on CLOCK_BOOTTIME for the absolute instant at: the
// kernel fires it on waking when the host slept past it, where a Go timer
// would wait out the rest of its duration first. Read through the runtime's
// poller, it holds no thread while it waits. Without a timerfd (out of
// descriptors) it falls back to a Go timer.
func alarm(at Instant, fire func()) (stop func()) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return timerAlarm(at, fire)
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at.ns)}
	if err := unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		_ = unix.Close(fd)
		return timerAlarm(at, fire)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	var closeOnce sync.Once
	closeFile := func() { closeOnce.Do(func() { _ = f.Close() }) }
	var stopped atomic.Bool
	go func() {
		var expirations [8]byte
		_, err := f.Read(expirations[:]) // a Stop closes f, which ends the read in error
		closeFile()
		if err == nil && !stopped.Load() {
			fire()
		}
	}()
	return func() {
		stopped.Store(true)
		closeFile()
	}
}
