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

// seatWatch tells the first waiter in line that a seat may have been freed:
// inotify reports a close of the seats file (the last one of a holder gone,
// the kernel dropping its locks) and the change of times a release makes. Without
// inotify (no instance left), it looks at the seats every pollEvery.
type seatWatch struct{ f *os.File }

const pollEvery = 20 * time.Millisecond

func watchSeats(k *keyDir) *seatWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &seatWatch{}
	}
	// Through the descriptor, so the watch is on the directory checked.
	dir := fmt.Sprintf("/proc/self/fd/%d", k.dir.Fd())
	// The seats file is open read-only: its holder's last close is
	// IN_CLOSE_NOWRITE. An older semrun's seat files (seats_linux.go) are
	// open for writing.
	mask := uint32(unix.IN_CLOSE_NOWRITE | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_ONLYDIR)
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return &seatWatch{}
	}
	// Non-blocking, so reads go through the runtime's poller and can time out.
	return &seatWatch{f: os.NewFile(uintptr(fd), "inotify")}
}

func (w *seatWatch) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// wait returns true when a seat file was closed or released, false when d
// passed first, and ctx's error when ctx ends.
func (w *seatWatch) wait(ctx context.Context, d time.Duration) (bool, error) {
	if w.f == nil {
		return false, clock.Sleep(ctx, pollEvery)
	}
	if err := w.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		switch {
		case ctx.Err() != nil:
			return false, ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("read inotify: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+size]), "\x00")
			off += unix.SizeofInotifyEvent + size
			if mask&unix.IN_Q_OVERFLOW != 0 || name == seatsFile || strings.HasPrefix(name, seatFilePrefix) {
				return true, nil
			}
		}
	}
}

// ring wakes the first waiter in line after a seat was unlocked: touching
// the seats file's times is an event the watch reports.
func ring(seat *os.File) {
	_ = unix.Futimes(int(seat.Fd()), nil)
}
