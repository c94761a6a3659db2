//go:build unix

package localstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// Keys implements semaphore.Events: the keys with a directory, which
// keeps their log and counters (eventlog.go), that the caller may use.
// One read of the lock directory, and an open of each key's.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	entries, err := s.entries()
	if err != nil {
		return nil, err
	}
	keys := []string{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if strings.HasPrefix(e.Name(), ".") || !e.IsDir() {
			continue // being made or removed, or not a key's
		}
		if key, ok := s.keyOf(e.Name()); ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// keyOf is the key whose directory is name, when the caller may use it.
// A name no key could have (a control character, bytes not UTF-8) is a
// directory someone else made there: semrun makes none for such a key.
func (s *Store) keyOf(name string) (string, bool) {
	k, err := s.openKeyDir(name)
	if err != nil {
		return "", false // gone meanwhile, or not the caller's to use
	}
	defer k.close()
	key, ok := keyFromDirName(name)
	if !ok && strings.HasPrefix(name, "#") {
		key, ok = k.readKey()
	}
	return key, ok && semaphore.CheckKey(key) == nil
}

// How often a follower reads every log it follows, though no watch said
// it changed (a change unseen, a key's directory made anew), and looks
// for keys that came.
const followEvery = time.Second

// Events implements semaphore.Events: it reads each key's log, and, to
// follow them, reads again those a watch says changed, and all of them
// every followEvery, taking only the lines past the last one it took
// (logPos).
func (s *Store) Events(ctx context.Context, q semaphore.EventQuery, each func(semaphore.Event) error) error {
	for _, key := range q.Keys {
		if err := semaphore.CheckKey(key); err != nil {
			return &semaphore.SettingError{Setting: semaphore.KeySetting, Value: fmt.Sprintf("%q", key), Err: err}
		}
	}
	f := &follower{s: s, every: len(q.Keys) == 0, tails: map[string]*tail{}, watches: map[int]*tail{}, watch: &logWatch{}}
	if q.Follow {
		f.watch = newLogWatch()
	}
	defer func() { f.watch.close() }()
	keys := q.Keys
	if f.every {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return err
		}
	}
	var since time.Time
	if q.Since > 0 {
		since = time.Now().Add(-q.Since)
	}
	var history []semaphore.Event
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			if q.Follow {
				return nil // followed until ctx ended
			}
			return err
		}
		t := f.add(key)
		if t == nil {
			continue // named twice
		}
		got := f.read(t)
		got = got[max(len(got)-semaphore.MaxEvents, 0):]
		for _, e := range got {
			if !e.Time.Before(since) {
				history = append(history, e)
			}
		}
	}
	if err := emit(history, each); err != nil || !q.Follow {
		return err
	}
	return f.follow(ctx, each)
}

// emit calls each with events, oldest first.
func emit(events []semaphore.Event, each func(semaphore.Event) error) error {
	slices.SortStableFunc(events, func(a, b semaphore.Event) int { return a.Time.Compare(b.Time) })
	for _, e := range events {
		if err := each(e); err != nil {
			return err
		}
	}
	return nil
}

// follower follows the logs of keys.
type follower struct {
	s *Store
	// every: it follows every key, and looks for new ones.
	every   bool
	tails   map[string]*tail
	watch   *logWatch
	watches map[int]*tail
}

// tail is where a follower is in one key's log.
type tail struct {
	key, name string
	dev, ino  uint64 // the key's directory, as last opened; 0 before
	pos       logPos
	warned    bool
}

// add follows key from the start of its log; nil when it does already.
func (f *follower) add(key string) *tail {
	if f.tails[key] != nil {
		return nil
	}
	t := &tail{key: key, name: keyDirName(key), pos: logPos{start: -1}}
	f.tails[key] = t
	return t
}

// read returns the events of t's log past those read before; none while
// its key has no directory the caller may use. Why it cannot read the
// log, but that there is none yet, is said to warnf once.
func (f *follower) read(t *tail) []semaphore.Event {
	warn := func(err error) {
		if !t.warned {
			t.warned = true
			f.s.warnf("key %q: no events: %v", t.key, err)
		}
	}
	k, err := f.s.openKeyDir(t.name)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			warn(err)
		}
		return nil
	}
	defer k.close()
	if k.dev != t.dev || k.ino != t.ino {
		t.dev, t.ino = k.dev, k.ino
		if wd := f.watch.add(k.dir); wd >= 0 {
			f.watches[wd] = t
		}
	}
	got, err := k.readLog(&t.pos, t.key)
	if err != nil {
		warn(err)
	}
	return got
}

// follow tells each of every new event of the keys followed, until ctx
// ends (nil then) or each fails.
func (f *follower) follow(ctx context.Context, each func(semaphore.Event) error) error {
	every := followEvery
	if !f.watch.live() {
		every = pollLogs
	}
	lastAll, lastScan := time.Now(), time.Now()
	for {
		changed, all, werr := f.watch.wait(ctx, every-time.Since(lastAll))
		if ctx.Err() != nil {
			return nil
		}
		if werr != nil {
			// The watch failed: poll from now on.
			f.watch.close()
			f.watch, every, all = &logWatch{}, pollLogs, true
		}
		var due []*tail
		if all || time.Since(lastAll) >= every {
			lastAll = time.Now()
			for _, t := range f.tails {
				due = append(due, t)
			}
		} else {
			for wd := range changed {
				if t := f.watches[wd]; t != nil {
					due = append(due, t)
				}
			}
		}
		if f.every && time.Since(lastScan) >= followEvery {
			lastScan = time.Now()
			due = append(due, f.rescan(ctx)...)
		}
		var news []semaphore.Event
		for _, t := range due {
			news = append(news, f.read(t)...)
		}
		if err := emit(news, each); err != nil {
			return err
		}
	}
}

// rescan follows the keys that came since it last looked, from the start
// of their logs (their directories are new), and returns them. A key
// whose directory is gone is followed still: if it comes back, its log
// is a new one, whose lines all come after those taken.
func (f *follower) rescan(ctx context.Context) []*tail {
	keys, err := f.s.Keys(ctx)
	if err != nil {
		return nil
	}
	var added []*tail
	for _, key := range keys {
		if t := f.add(key); t != nil {
			added = append(added, t)
		}
	}
	return added
}

// logPos is where a reader is in a key's log.
type logPos struct {
	dev, ino uint64 // the log's, as last read
	// start is where the last line taken starts, -1 before the first;
	// end where the last whole line read ends.
	start, end int64
	// last is the time of the last line taken: a line not past it is one
	// taken before, or no one's.
	last int64
}

// readLog returns the events of k's log, key's, past pos, which it moves
// on. It reads on from the last line taken when that line is still
// there, else the log's last readBound bytes.
func (k *keyDir) readLog(pos *logPos, key string) ([]semaphore.Event, error) {
	f, err := k.open(eventsFile, os.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	size := st.Size
	from := pos.end
	if pos.start >= 0 {
		from = pos.start
	}
	if uint64(st.Dev) != pos.dev || uint64(st.Ino) != pos.ino || size < pos.end || size < from || size-from > readBound {
		from = -1 // another file, or one rewritten in place
	}
	for range 2 {
		whole := from < 0
		if whole {
			from = max(size-readBound, 0)
		}
		var b []byte
		k.readLocked(func() {
			b = make([]byte, size-from)
			n, _ := f.ReadAt(b, from)
			b = b[:n]
		})
		lines, end := splitLines(b, from, whole && from > 0)
		if !whole && pos.start >= 0 && (len(lines) == 0 || lines[0].at != pos.start || lines[0].err != nil || lines[0].line.T != pos.last) {
			from = -1 // the last line taken is not where it was: rewritten in place
			continue
		}
		pos.dev, pos.ino, pos.end = uint64(st.Dev), uint64(st.Ino), end
		if whole {
			pos.start = -1 // where it was says nothing of this file
		}
		var out []semaphore.Event
		for _, l := range lines {
			switch {
			case l.err != nil:
			case l.line.T > pos.last:
				pos.start, pos.last = l.at, l.line.T
				out = append(out, l.line.event(key))
			case l.line.T == pos.last:
				pos.start = l.at // the last line taken, still there
			}
		}
		return out, nil
	}
	return nil, nil
}

// logLine is one whole line of a log, as read.
type logLine struct {
	at   int64 // where it starts in the file
	line eventLine
	err  error // it is no event semrun could have written
}

// splitLines decodes the whole lines of b, read at from in a log, and
// returns them and where the last ends; cut: b starts inside a line,
// which is not whole.
func splitLines(b []byte, from int64, cut bool) ([]logLine, int64) {
	now := time.Now().UnixMicro()
	var lines []logLine
	off := 0
	if cut {
		off = bytes.IndexByte(b, '\n') + 1
		if off == 0 {
			return nil, from
		}
	}
	for {
		n := bytes.IndexByte(b[off:], '\n')
		if n < 0 {
			return lines, from + int64(off) // a line still being written, or cut short
		}
		l := logLine{at: from + int64(off)}
		if n > maxEventLine {
			l.err = fmt.Errorf("a line of %d bytes", n)
		} else if l.err = json.Unmarshal(b[off:off+n], &l.line); l.err == nil {
			l.err = l.line.check(now)
		}
		lines = append(lines, l)
		off += n + 1
	}
}
