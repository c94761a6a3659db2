package localstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"golang.org/x/sys/unix"
)

// permitWatch tells the first waiter in line that a permit may have been
// freed: inotify reports a close of the permits file (the last one of a
// holder gone, the kernel dropping its locks) and the change of times a
// release makes. Without inotify (no instance left), it looks at the
// permits every pollEvery.
type permitWatch struct{ f *os.File }

const pollEvery = 20 * time.Millisecond

func watchPermits(k *keyDir) *permitWatch { return watchPermitsOf([]*keyDir{k}) }

// watchPermitsOf watches the permits of every key of ks at once: a caller
// of several keys wakes when any of them frees one.
func watchPermitsOf(ks []*keyDir) *permitWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &permitWatch{}
	}
	for _, k := range ks {
		// Through the descriptor, so the watch is on the directory checked.
		dir := fmt.Sprintf("/proc/self/fd/%d", k.dir.Fd())
		// The permits file is open read-only: its holder's last close is
		// IN_CLOSE_NOWRITE. An older semrun's permit files (permits_linux.go) are
		// open for writing.
		mask := uint32(unix.IN_CLOSE_NOWRITE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_ONLYDIR)
		if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
			unix.Close(fd)
			return &permitWatch{}
		}
	}
	// Non-blocking, so reads go through the runtime's poller and can time out.
	return &permitWatch{f: os.NewFile(uintptr(fd), "inotify")}
}

func (w *permitWatch) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// wait returns true when a permit file was closed or released, false when d
// passed first, and ctx's error when ctx ends.
func (w *permitWatch) wait(ctx context.Context, d time.Duration) (bool, error) {
	if w.f == nil {
		return false, clock.Sleep(ctx, pollEvery)
	}
	return readInotify(ctx, w.f, d, func(_ int, mask uint32, name string) bool {
		return mask&unix.IN_Q_OVERFLOW != 0 || name == permitsFile || strings.HasPrefix(name, permitFilePrefix)
	})
}

// readInotify reads the events of the inotify instance f, passing each
// to match (its watch, mask and name), until a read has one match says
// is what the caller waits for: true then, false when d passed first,
// and ctx's error when ctx ends.
func readInotify(ctx context.Context, f *os.File, d time.Duration, match func(wd int, mask uint32, name string) bool) (bool, error) {
	if err := f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("read inotify: %w", err)
		}
		found := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+size]), "\x00")
			off += unix.SizeofInotifyEvent + size
			if match(wd, mask, name) {
				found = true
			}
		}
		if found {
			return true, nil
		}
	}
}

// logWatch tells a follower of key logs (Events) which of them changed:
// inotify reports a line added to a key's "events", and its
// replacement. Without inotify, it has the follower read them all every
// pollLogs.
type logWatch struct {
	f  *os.File
	fd int // f's, kept apart: f.Fd would make it blocking
}

const pollLogs = 250 * time.Millisecond

func newLogWatch() *logWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &logWatch{}
	}
	return &logWatch{f: os.NewFile(uintptr(fd), "inotify"), fd: fd}
}

// live tells whether the watch reports changes: else the follower polls.
func (w *logWatch) live() bool { return w.f != nil }

// add watches the key directory dir and returns the watch; -1 when it
// cannot. Each inode has one watch: a directory watched again keeps its.
func (w *logWatch) add(dir *os.File) int {
	if w.f == nil {
		return -1
	}
	// Through the descriptor, so the watch is on the directory checked.
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", dir.Fd()),
		unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_ONLYDIR)
	if err != nil {
		return -1
	}
	return wd
}

// wait waits at most d for logs to change, and returns the watches of
// those that did; every is true when any may have (the kernel dropped
// events, or there is no watch).
func (w *logWatch) wait(ctx context.Context, d time.Duration) (changed map[int]bool, every bool, err error) {
	if w.f == nil {
		return nil, true, clock.Sleep(ctx, min(d, pollLogs))
	}
	changed = map[int]bool{}
	_, err = readInotify(ctx, w.f, d, func(wd int, mask uint32, name string) bool {
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			every = true
		case name == eventsFile:
			changed[wd] = true
		default:
			return false
		}
		return true
	})
	return changed, every, err
}

func (w *logWatch) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// ring wakes the first waiter in line after a permit was unlocked: touching
// the permits file's times is an event the watch reports.
func ring(f *os.File) {
	_ = unix.Futimes(int(f.Fd()), nil)
}
