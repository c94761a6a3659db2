//go:build unix

package localstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// What happened to a key (semaphore.Events) is two files of its
// directory, made with it:
//
//   - "events", its log: one JSON object a line (eventLine), oldest
//     first, its time "t" in µs on the wall clock, rising strictly from
//     line to line:
//
//     {"t":1764659143123456,"e":"release","id":"K3QZ7WAB2M","host":"ci-7","pid":4242,"cmd":"render","n":3,"w":1,"tok":1764659143100123,"exit":0,"held":5012}
//
//   - "stats", its counters (semaphore.Counts), the time of its log's
//     last line and how many lines the log has, one line of numbers
//     written in place (stats).
//
// Both are written under a flock of "stats", held for the microseconds
// one event takes, never under the grant lock: a grant's event is
// written once the grant lock is dropped, a release's once the permits
// are free. A writer that cannot take that lock within eventLockWait (a
// process stopped while it wrote), or write the files, drops the event:
// what it records never fails nor waits longer for it.
//
// The log keeps about semaphore.MaxEvents: once it has rewriteLines
// lines, or maxLogBytes, the writer replaces it with its newest
// MaxEvents lines (at most keepBytes) and the new one, whole under a
// draft name, "events-draft.*", renamed in place; a member of a group
// that shares the lock directory cannot replace another member's file
// (sticky), and writes it in place then. So a rewrite copies MaxEvents
// lines every MaxEvents/4 events. Readers read under a shared lock of
// "stats", bounded, and take only lines whose time rises (a rewrite in
// place cut short leaves older lines behind), the newest MaxEvents.
//
// Being made with the key's directory, they are its owner's; they are
// written, as its other files, only when they are the caller's or the
// directory owner's (open), and in a directory made before them, only
// its owner makes them. In a lock directory a group shares, every member
// may write them, and so anything in them: everything read back is
// bounded and checked, and a line or counters semrun could not have
// written are skipped. And no line is written while the file system has
// less than a quarter of its room free (at most 64MiB): a log must not
// take the room locks need, in a /run/lock of a few megabytes.
const (
	eventsFile        = "events"
	eventsDraftPrefix = "events-draft."
	statsFile         = "stats"
	statsVersion      = 2
	// maxStats bounds the stats file; maxEventLine a line of the log.
	maxStats     = 4 << 10
	maxEventLine = 8 << 10
	// rewriteLines and maxLogBytes bound the log: past either, it is
	// rewritten with its newest MaxEvents lines, at most keepBytes. The
	// bound in bytes is docs/watching.md's, which /run/lock, often a
	// tmpfs of a few MiB, must have room for, a log a key: 1,250 lines
	// of the usual 200 bytes fit, and 1,000 of up to 215 are kept.
	rewriteLines = semaphore.MaxEvents + semaphore.MaxEvents/4
	maxLogBytes  = 280 << 10
	keepBytes    = maxLogBytes * 3 / 4
	// readBound bounds what a reader reads of a log: its last bytes.
	readBound = maxLogBytes + maxEventLine
	// eventLockWait bounds a writer's wait for the lock of "stats", held
	// for microseconds unless its holder was stopped there;
	// readLockWait a reader's, who then reads without it.
	eventLockWait = 100 * time.Millisecond
	readLockWait  = 50 * time.Millisecond
	// maxInfoText bounds an event's host and command, which no request
	// checks: a host name or a file name is at most 255 bytes.
	maxInfoText = 255
	// maxAhead is how far ahead of the reader's clock a line's time may
	// be, for clocks that disagree; a line further ahead is no one's.
	maxAhead = 24 * time.Hour
	// roomKept is the most room a log leaves free on its file system.
	roomKept = 64 << 20
)

// eventLine is one line of a key's log: a semaphore.Event, in fewer
// bytes, without its key (the directory's). Durations are in ms.
type eventLine struct {
	T        int64               `json:"t"`
	Kind     semaphore.EventKind `json:"e"`
	ID       string              `json:"id,omitempty"`
	Host     string              `json:"host,omitempty"`
	PID      int                 `json:"pid,omitempty"`
	Cmd      string              `json:"cmd,omitempty"`
	Hold     bool                `json:"hold,omitempty"`
	Label    string              `json:"label,omitempty"`
	Req      string              `json:"req,omitempty"`
	Permits  int                 `json:"n,omitempty"`
	Weight   int                 `json:"w,omitempty"`
	Token    int64               `json:"tok,omitempty"`
	Exit     *int                `json:"exit,omitempty"`
	HeldMS   int64               `json:"held,omitempty"`
	WaitedMS int64               `json:"waited,omitempty"`
	CoolMS   int64               `json:"cool,omitempty"`
	UntilMS  int64               `json:"until,omitempty"`
	Capacity int                 `json:"cap,omitempty"`
	Reason   string              `json:"why,omitempty"`
	Forced   bool                `json:"forced,omitempty"`
	// Slots and SlotNames are the holder's slots, as
	// semaphore.Slots.NumbersText and NamesText write them; a line too
	// long for them leaves the names out, then the numbers (encode).
	Slots     string `json:"s,omitempty"`
	SlotNames string `json:"sn,omitempty"`
}

// lineOf is e as a line of the log says it, its texts and numbers
// bounded as readers check them (check): a loss is told from the file
// its holder left, which any member may have written, and a line readers
// skip would hide it. A number out of bounds is unknown (0).
func lineOf(e semaphore.Event) eventLine {
	l := eventLine{
		Kind: e.Kind, Host: boundText(e.Host, maxInfoText), PID: within(e.PID, math.MaxInt32),
		Cmd: boundText(e.Command, maxInfoText), Hold: e.Hold, Label: boundText(e.Label, semaphore.MaxLabel),
		Req:     boundText(e.Request, semaphore.MaxRequestID),
		Permits: within(e.Permits, semaphore.MaxPermits), Weight: within(e.Weight, semaphore.MaxPermits), Token: max(e.Token, 0),
		HeldMS: max(e.Held, 0).Milliseconds(), WaitedMS: max(e.Waited, 0).Milliseconds(),
		CoolMS: max(e.Cooling, 0).Milliseconds(), UntilMS: max(e.Until, 0).Milliseconds(),
		Capacity: within(e.Capacity, semaphore.MaxPermits), Reason: boundText(e.Reason, semaphore.MaxReason), Forced: e.Forced,
	}
	// As readers check them: unnamed rather than misnamed.
	if _, err := semaphore.ParseSlotNumbers(e.NumbersText()); err == nil {
		l.Slots = e.NumbersText()
		if named := semaphore.NamedSlots(e.Numbers, e.Names); named.Names != nil {
			l.SlotNames = named.NamesText()
		}
	}
	if validID(e.Holder) {
		l.ID = e.Holder
	}
	if x := e.ExitStatus; x != nil && *x >= 0 && *x <= 255 {
		status := *x
		l.Exit = &status
	}
	return l
}

// event is the event l says of key.
func (l eventLine) event(key string) semaphore.Event {
	e := semaphore.Event{
		Time: time.UnixMicro(l.T), Key: key, Kind: l.Kind, Holder: l.ID,
		HolderInfo: semaphore.HolderInfo{Host: l.Host, PID: l.PID, Command: l.Cmd, Hold: l.Hold, Label: l.Label, Request: l.Req},
		Permits:    l.Permits, Weight: l.Weight, Token: l.Token,
		Held: ms(l.HeldMS), Waited: ms(l.WaitedMS), Cooling: ms(l.CoolMS), Until: ms(l.UntilMS),
		Capacity: l.Capacity, Reason: l.Reason, Forced: l.Forced,
	}
	// check has read the numbers.
	numbers, _ := semaphore.ParseSlotNumbers(l.Slots)
	e.Slots = semaphore.NamedSlots(numbers, semaphore.ParseSlotNames(l.SlotNames))
	if l.Exit != nil {
		status := *l.Exit
		e.ExitStatus = &status
	}
	return e
}

// within is n when it is from 0 to most, else 0.
func within(n, most int) int {
	if n < 0 || n > most {
		return 0
	}
	return n
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// maxMS is the longest duration in ms a time.Duration holds.
const maxMS = math.MaxInt64 / int64(time.Millisecond)

// check says what is wrong with a line read back at nowUS, if anything.
func (l eventLine) check(nowUS int64) error {
	switch {
	case l.T <= 0 || l.T > nowUS+maxAhead.Microseconds():
		return fmt.Errorf("time %d", l.T)
	case !knownKind(l.Kind):
		return fmt.Errorf("event %q", l.Kind)
	case l.ID != "" && !validID(l.ID):
		return errors.New("its holder's id is no holder's")
	case !plainText(l.Host, maxInfoText) || !plainText(l.Cmd, maxInfoText) || !plainText(l.Label, semaphore.MaxLabel) || !plainText(l.Reason, semaphore.MaxReason) || !plainText(l.Req, semaphore.MaxRequestID):
		return errors.New("a text too long, not UTF-8 or with control characters")
	case l.PID < 0 || l.PID > math.MaxInt32 || l.Token < 0:
		return fmt.Errorf("pid %d, token %d", l.PID, l.Token)
	case l.Permits < 0 || l.Permits > semaphore.MaxPermits || l.Weight < 0 || l.Weight > semaphore.MaxPermits || l.Capacity < 0 || l.Capacity > semaphore.MaxPermits:
		return fmt.Errorf("%d of %d permits, capacity %d", l.Weight, l.Permits, l.Capacity)
	case l.Exit != nil && (*l.Exit < 0 || *l.Exit > 255):
		return fmt.Errorf("exit status %d", *l.Exit)
	}
	if _, err := semaphore.ParseSlotNumbers(l.Slots); err != nil {
		return err
	}
	for _, d := range []int64{l.HeldMS, l.WaitedMS, l.CoolMS, l.UntilMS} {
		if d < 0 || d > maxMS {
			return fmt.Errorf("a duration of %dms", d)
		}
	}
	return nil
}

func knownKind(k semaphore.EventKind) bool {
	switch k {
	case semaphore.EventGrant, semaphore.EventRelease, semaphore.EventBusy, semaphore.EventTimeout, semaphore.EventLeave,
		semaphore.EventLost, semaphore.EventRevoke, semaphore.EventPause, semaphore.EventResume, semaphore.EventCapacity:
		return true
	}
	return false
}

// encode is l as a line of the log; an error when it would be longer
// than maxEventLine even without its slots' names and numbers, which may
// take most of it.
func (l eventLine) encode() ([]byte, error) {
	b, err := l.encodeAll()
	switch {
	case err != nil && l.SlotNames != "":
		l.SlotNames = ""
		return l.encode()
	case err != nil && l.Slots != "":
		l.Slots = ""
		return l.encode()
	}
	return b, err
}

// encodeAll is encode, with all of l.
func (l eventLine) encodeAll() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a label's & is one byte, not six
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	if b.Len() > maxEventLine {
		return nil, fmt.Errorf("an event of %d bytes", b.Len())
	}
	return b.Bytes(), nil
}

// boundText is s as an event keeps it: valid UTF-8 without control
// characters, at most n bytes.
func boundText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// plainText tells whether s could be boundText's, of at most n bytes.
func plainText(s string, n int) bool {
	if len(s) > n || !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}

// stats is a key's stats file: its counters, and what a writer of its
// log needs. It is one line of numbers, as every grant and release reads
// and writes it (as JSON, that took a fifth of an event's time):
//
//	2 LAST LINES GRANTS BUSY TIMEOUTS LOSSES REVOKES RECENT WAITSUM W0 ... W20 HELDSUM H0 ... H20
//
// 2 is its version; LAST the time of the log's last line, in µs; LINES
// how many lines the log has (since it was last rewritten); RECENT and
// the sums are in ns; W0... and H0... are the counts of the histograms'
// buckets (semaphore.Buckets). Version 1, written before the buckets
// began at 10ms, counted in semaphore.OldBuckets (W0 ... W14): it is
// read still, each count in the bucket of its bound, and written as
// version 2 at the next event, so that no count goes down.
type stats struct {
	Last, Lines int64
	semaphore.Counts
}

// statsFields is how many numbers a stats file has whose histograms have
// buckets buckets.
func statsFields(buckets int) int { return 9 + 2*(2+buckets) }

// encode is st as its file says it.
func (st *stats) encode() []byte {
	c := &st.Counts
	b := strconv.AppendInt(make([]byte, 0, 512), statsVersion, 10)
	for _, n := range []int64{st.Last, st.Lines, c.Grants, c.Busy, c.Timeouts, c.Losses, c.Revokes, int64(c.RecentHold)} {
		b = strconv.AppendInt(append(b, ' '), n, 10)
	}
	for _, h := range []semaphore.Histogram{c.Wait, c.Held} {
		b = strconv.AppendInt(append(b, ' '), int64(h.Sum), 10)
		for i := range len(semaphore.Buckets) + 1 {
			n := uint64(0)
			if h.Counts != nil {
				n = h.Counts[i]
			}
			b = strconv.AppendUint(append(b, ' '), n, 10)
		}
	}
	return append(b, '\n')
}

// decodeStats decodes the stats b says: none (zero counts) when b is
// empty, a *badFileError when it is not stats semrun could have written.
func decodeStats(b []byte, shown string) (stats, error) {
	var st stats
	if len(bytes.TrimSpace(b)) == 0 {
		return st, nil
	}
	bad := func(why string) (stats, error) {
		return stats{}, &badFileError{msg: fmt.Sprintf("stats file %s: %s", shown, why)}
	}
	if len(b) > maxStats {
		return bad(fmt.Sprintf("longer than %d bytes", maxStats))
	}
	fields := bytes.Fields(b)
	// slot is the bucket of semaphore.Buckets the file's bucket i is.
	buckets, slot := len(semaphore.Buckets), func(i int) int { return i }
	if len(fields) > 0 && string(fields[0]) == "1" {
		buckets, slot = len(semaphore.OldBuckets), func(i int) int {
			if i == len(semaphore.OldBuckets) {
				return len(semaphore.Buckets)
			}
			return semaphore.Bucket(semaphore.OldBuckets[i])
		}
	} else if len(fields) == 0 || string(fields[0]) != strconv.Itoa(statsVersion) {
		return bad(fmt.Sprintf("not version %d", statsVersion))
	}
	if len(fields) != statsFields(buckets) {
		return bad(fmt.Sprintf("not %d numbers", statsFields(buckets)))
	}
	nums := make([]int64, len(fields)-1)
	for i, f := range fields[1:] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil || n < 0 {
			return bad(fmt.Sprintf("%q is no count", f))
		}
		nums[i] = n
	}
	c := &st.Counts
	st.Last, st.Lines, c.Grants, c.Busy, c.Timeouts, c.Losses, c.Revokes = nums[0], nums[1], nums[2], nums[3], nums[4], nums[5], nums[6]
	c.RecentHold = time.Duration(nums[7])
	nums = nums[8:]
	for _, h := range []*semaphore.Histogram{&c.Wait, &c.Held} {
		h.Sum = time.Duration(nums[0])
		h.Counts = make([]uint64, len(semaphore.Buckets)+1)
		for i := range buckets + 1 {
			h.Counts[slot(i)] = uint64(nums[1+i])
		}
		if h.Count() == 0 {
			h.Counts = nil // none yet, as semaphore.Histogram says
		}
		nums = nums[buckets+2:]
	}
	return st, nil
}

// readStats reads the stats in the file fd and how many bytes it had,
// up to maxStats+1; zero counts when it has none or garbage.
func readStats(fd int, shown string) (stats, int) {
	b := make([]byte, maxStats+1)
	n, err := unix.Pread(fd, b, 0) // a regular file: all there is, at once
	if err != nil {
		return stats{}, 0
	}
	st, _ := decodeStats(b[:n], shown)
	return st, n
}

// write puts st in the file fd, which had size bytes, in their place.
func (st *stats) write(fd, size int) error {
	b := st.encode()
	if _, err := unix.Pwrite(fd, b, 0); err != nil {
		return err
	}
	if len(b) < size {
		return unix.Ftruncate(fd, int64(len(b)))
	}
	return nil
}

// count counts e in c. A counter at its limit stays there.
func count(c *semaphore.Counts, e semaphore.Event) {
	inc := func(n *int64) {
		if *n < math.MaxInt64 {
			*n++
		}
	}
	switch e.Kind {
	case semaphore.EventGrant:
		inc(&c.Grants)
		observe(&c.Wait, e.Waited)
	case semaphore.EventBusy:
		inc(&c.Busy)
	case semaphore.EventTimeout:
		inc(&c.Timeouts)
	case semaphore.EventLost:
		inc(&c.Losses)
	case semaphore.EventRevoke:
		inc(&c.Revokes)
	case semaphore.EventRelease:
		observe(&c.Held, e.Held)
		c.RecentHold = semaphore.NextRecent(c.RecentHold, max(e.Held, 0))
	}
}

// counted tells whether count counts events of kind k.
func counted(k semaphore.EventKind) bool {
	switch k {
	case semaphore.EventGrant, semaphore.EventBusy, semaphore.EventTimeout, semaphore.EventLost, semaphore.EventRevoke, semaphore.EventRelease:
		return true
	}
	return false
}

// observe is h.Observe(d), its sum and counts stopping at their limits.
func observe(h *semaphore.Histogram, d time.Duration) {
	d = max(d, 0)
	if h.Counts == nil {
		h.Counts = make([]uint64, len(semaphore.Buckets)+1)
	}
	if i := semaphore.Bucket(d); h.Counts[i] < math.MaxUint64 {
		h.Counts[i]++
	}
	h.Sum = time.Duration(min(int64(h.Sum), math.MaxInt64-int64(d)) + int64(d))
}

// note records e in k: it counts it, and logs it unless the store keeps
// no log (Options.NoEvents). It never fails: an event that cannot be
// recorded is dropped. It uses bare descriptors, as every grant and
// release does it (openFd).
func (k *keyDir) note(e semaphore.Event) { k.noteAll([]semaphore.Event{e}) }

// noteAll notes events, in order, under one lock of the stats file: a
// sweep that finds many holders gone (or files planted to look like
// theirs) waits at most eventLockWait for it, not that for each.
func (k *keyDir) noteAll(events []semaphore.Event) {
	logged := !k.noEvents
	if len(events) == 0 || !logged && !slices.ContainsFunc(events, func(e semaphore.Event) bool { return counted(e.Kind) }) {
		return
	}
	fd, err := k.openFd(statsFile, k.logFlags(), false, nil)
	if err != nil || !lockFd(fd, unix.LOCK_EX, eventLockWait) {
		return // lockFd closed fd
	}
	defer unix.Close(fd) // and drops the lock
	st, size := readStats(fd, k.path+"/"+statsFile)
	for _, e := range events {
		count(&st.Counts, e)
		if logged {
			k.appendEvent(&st, e)
		}
	}
	_ = st.write(fd, size)
}

// logFlags are the flags a writer opens k's events and stats files with:
// only the directory's owner makes one that is missing (in a directory
// made before them), as only it makes a missing permits file, so that
// every member may write them (see open).
func (k *keyDir) logFlags() int {
	if k.owner == me() {
		return os.O_RDWR | os.O_CREATE
	}
	return os.O_RDWR
}

// appendEvent adds e to k's log, rewriting it when it is full, and keeps
// in st what it did; under the lock of the stats file.
func (k *keyDir) appendEvent(st *stats, e semaphore.Event) {
	now := time.Now().UnixMicro()
	line := lineOf(e)
	line.T = now
	if st.Last < now+maxAhead.Microseconds() { // else no one's: readers skip it too
		line.T = max(st.Last+1, now)
	}
	b, err := line.encode()
	if err != nil {
		return
	}
	var fst unix.Stat_t
	fd, err := k.openFd(eventsFile, k.logFlags(), false, &fst)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	size, n := fst.Size, int64(len(b))
	// The room is looked at when the log takes another block, which is
	// when it takes room.
	if size%logBlock+n > logBlock && !roomLeft(fd, n) {
		return
	}
	if st.Lines >= rewriteLines || size+n > maxLogBytes {
		lines, err := k.rewriteLog(fd, size, b)
		if err == nil {
			st.Last, st.Lines = line.T, int64(lines)
			return
		}
		if size+n > maxLogBytes {
			return // never past its bound
		}
	}
	// At the end as the lock's holder found it: any other writer holds
	// the lock to write.
	if w, err := unix.Pwrite(fd, b, size); err != nil || int64(w) != n {
		_ = unix.Ftruncate(fd, size) // no half line for the next one to follow
		return
	}
	st.Last, st.Lines = line.T, st.Lines+1
}

// logBlock is about the room a file system gives a file at a time.
const logBlock = 4 << 10

// rewriteLog makes k's log its newest lines, at most MaxEvents with
// line, and line; fd is the log, of size bytes. It returns how many
// lines the log has then.
func (k *keyDir) rewriteLog(fd int, size int64, line []byte) (int, error) {
	if !roomLeft(fd, keepBytes) {
		return 0, errors.New("no room for a new log")
	}
	from := max(size-readBound, 0)
	b := make([]byte, size-from)
	if err := preadFull(fd, b, from); err != nil {
		return 0, err
	}
	kept, n := newestLines(b, from > 0, semaphore.MaxEvents-1, keepBytes-len(line))
	out := append(append(make([]byte, 0, len(kept)+len(line)), kept...), line...)
	err := k.writeWhole(eventsFile, eventsDraftPrefix, out, renameOver)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		err = k.writeInPlace(eventsFile, out)
	}
	if err != nil {
		return 0, fmt.Errorf("event log in %s: %w", k.path, err)
	}
	return n + 1, nil
}

// newestLines are the last whole lines of b, at most n and most bytes,
// and how many; cut: b starts inside a line, which is not whole.
func newestLines(b []byte, cut bool, n, most int) ([]byte, int) {
	end := bytes.LastIndexByte(b, '\n') + 1 // a line cut short is none
	start, count := end, 0
	for count < n && start > 0 {
		prev := bytes.LastIndexByte(b[:start-1], '\n') + 1
		if prev == 0 && cut || end-prev > most {
			break
		}
		start = prev
		count++
	}
	return b[start:end], count
}

// preadFull reads len(b) bytes of the file fd at off.
func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// lockFd takes the lock how of the file fd, waiting at most d, in the
// kernel, which wakes the waiter the moment the lock is dropped. When it
// cannot, it closes fd, which drops a lock granted after d.
func lockFd(fd, how int, d time.Duration) bool {
	err := flockFd(fd, how|unix.LOCK_NB)
	if err == nil {
		return true
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		unix.Close(fd)
		return false
	}
	// A wait given up goes on in a thread of its own until the lock comes:
	// a process stopped with it held must not cost a thread per event.
	if lockWaits.Add(1) > maxLockWaits {
		lockWaits.Add(-1)
		unix.Close(fd)
		return false
	}
	got := make(chan error, 1)
	go func() {
		defer lockWaits.Add(-1)
		got <- flockFd(fd, how)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			unix.Close(fd)
		}
		return err == nil
	case <-timer.C:
		go func() {
			<-got
			unix.Close(fd)
		}()
		return false
	}
}

// lockWaits counts the waits of lockFd under way, at most maxLockWaits.
var lockWaits atomic.Int64

const maxLockWaits = 64

// flockFd is flock(2) of fd, again when a signal cut it short.
func flockFd(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// readLocked calls read under a shared lock of k's stats file, which
// writers of its log hold, unless it cannot be had within readLockWait
// (a writer stopped there, or a file that is no lock): read then reads
// without it, and checks what it reads as it always does.
func (k *keyDir) readLocked(read func()) {
	if f, err := k.open(statsFile, os.O_RDONLY); err == nil {
		defer f.Close() // and drops the lock
		deadline := time.Now().Add(readLockWait)
		for {
			ok, err := flock(f, unix.LOCK_SH|unix.LOCK_NB)
			if ok || err != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	read()
}

// counts are k's counters; nil when it has none, or they cannot be read,
// said to warnf then.
func (k *keyDir) counts(warnf func(string, ...any)) *semaphore.Counts {
	var b []byte
	var err error
	k.readLocked(func() { b, err = k.readBounded(statsFile, maxStats) })
	var st stats
	if err == nil {
		st, err = decodeStats(b, k.path+"/"+statsFile)
	}
	if err != nil {
		if warnf != nil && !errors.Is(err, unix.ENOENT) { // none: none counted yet
			warnf("skipped %s", err)
		}
		return nil
	}
	return &st.Counts
}

// recentHold is how long k's recent holds lasted (Counts.RecentHold); 0
// when unknown.
func (k *keyDir) recentHold() time.Duration {
	if c := k.counts(nil); c != nil {
		return c.RecentHold
	}
	return 0
}

// readBounded reads k's file name, at most most+1 bytes: more is more
// than most.
func (k *keyDir) readBounded(name string, most int) ([]byte, error) {
	f, err := k.open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(most)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return b, nil
}
