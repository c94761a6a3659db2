//go:build unix

package localstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// A hold (semaphore.Holds) is a grant whose permits are held by every
// process attached to it: each takes its own read locks on the hold's
// permit bytes, which count permits, not lockers, so a hold takes its
// weight however many are attached, and the kernel frees its permits once
// the last of them is gone. Each also locks the hold's mark, one byte
// past every permit at an offset drawn from the hold's record name and
// permits (markOf): that its mark is held tells a live hold from one
// whose permits, freed when its last process died, someone else was
// granted since, and which no one may join. Its mark and permits are
// locked through one open file and so dropped at once.
//
// The key's directory keeps a record of each hold, "hold." and a hash of
// its secret (holdName): whoever can read the directory learns nothing
// that lets them attach. It says what the hold was granted, its keeper,
// and, once it has ended, how, as a JSON object on one line:
//
//	{"v":1,"state":"held","key":"deploy","id":"K3QZ7WAB2M","permits":3,
//	 "weight":1,"token":1764659143123456,"since_ms":1764659143123,
//	 "seats":[[2,1]],"keeper":{"host":"ci-7","pid":4242,"command":"semrun acquire"}}
//
// "id" is the holder's public id (semaphore.Holder.ID), the one its
// permit had (absent in a record of a semrun before ids); once ended it
// has "state" the end's, "why" and "ended_ms" (an operator's revoke
// ends it so: Revoke). A record is made whole under another name and
// renamed in place; an end is written
// into it, under the key's grant lock, by whoever ends it: in a lock
// directory a group shares, another member than its maker, who could not
// replace it (the directory is sticky). Every reader takes it for
// untrusted: bounded, checked, and anything amiss is a lost hold. A
// record forged, copied or changed by whoever may write the directory
// names permits whose mark no one holds, unless someone took them with
// locks of their own, as they could take permits: it can end a hold,
// never let a process join permits that are not its hold's.
const (
	holdPrefix      = "hold."
	holdDraftPrefix = "hold-draft."
	holdVersion     = 1
	// maxHoldRecord bounds a record; a weight taken in more runs of
	// permits than fit makes no hold.
	maxHoldRecord = 64 << 10
	// holdCheck is HoldInfo.TTL, which bounds a --kill-after under the
	// hold as a lease would. A local lock never lapses: who is attached
	// reads the record every runner.CheckEvery to learn of an end.
	holdCheck = 3 * time.Second
	// holdKept is how long a hold's record stays once no one holds its
	// permits, for release to learn how it ended.
	holdKept = 24 * time.Hour
	// holdGrantWait bounds the wait for the grant lock a hold is read
	// and ended under, held a fraction of a millisecond unless its
	// holder was stopped there.
	holdGrantWait = 5 * time.Second
	// endWait bounds how long EndHold waits for the processes attached to
	// let go, which they do within a second of the end.
	endWait = 2 * time.Second
)

// The marks of holds are bytes of the permits file in [markBase,
// markBase+markSpan): past every permit (semaphore.MaxPermits), inside
// what a lock can name.
const (
	markBase = 1 << 40
	markSpan = 1 << 61
)

// Why a hold was found lost.
const (
	lapsedWhy    = "its keeper and every run under it had gone"
	noHoldWhy    = "no acquire printed it for this lock directory, its hold ended over a day ago, or the directory was emptied"
	badRecordWhy = "its record in the lock directory is malformed"
	goneWhy      = "its record is gone from the lock directory"
)

// span is a run of permits: n bytes of the permits file from start.
type span struct{ start, n int64 }

// holdRecord is a hold's record, as written in its file.
type holdRecord struct {
	Version int                 `json:"v"`
	State   semaphore.HoldState `json:"state"`
	Key     string              `json:"key"`
	ID      string              `json:"id,omitempty"`
	Permits int                 `json:"permits"`
	Weight  int                 `json:"weight"`
	Token   int64               `json:"token"`
	SinceMS int64               `json:"since_ms"`
	// Runs are the runs of permits held, [first, count], lowest first.
	Runs   [][2]int64           `json:"seats"`
	Keeper semaphore.HolderInfo `json:"keeper"`
	// SlotNames are the names of its slots, the permits of Runs (slots.go).
	SlotNames []string `json:"slot_names,omitempty"`
	Why       string   `json:"why,omitempty"`
	EndedMS   int64    `json:"ended_ms,omitempty"`
}

// holdName names the record of the hold whose secret is secret.
func holdName(secret string) string {
	sum := sha256.Sum256([]byte("semrun hold\x00" + secret))
	return holdPrefix + hex.EncodeToString(sum[:])
}

// markOf is the byte that the processes attached to the hold whose record
// is name, on the permits spans, lock besides them. A record that names
// other permits than its hold took, or copies another hold's, has a mark
// no one holds.
func markOf(name string, spans []span) int64 {
	h := sha256.New()
	h.Write([]byte(name))
	var b [16]byte
	for _, sp := range spans {
		binary.BigEndian.PutUint64(b[:8], uint64(sp.start))
		binary.BigEndian.PutUint64(b[8:], uint64(sp.n))
		h.Write(b[:])
	}
	return markBase + int64(binary.BigEndian.Uint64(h.Sum(nil))%markSpan)
}

func (r holdRecord) spans() []span { return runSpans(r.Runs) }

// slots are the hold's slots, its permits, named as the record names
// them.
func (r holdRecord) slots() semaphore.Slots {
	s := slotsOf(r.spans(), r.Permits, nil)
	return semaphore.NamedSlots(s.Numbers, slices.Clone(r.SlotNames))
}

// end is how the hold ended; HoldHeld while it has not.
func (r holdRecord) end() semaphore.HoldEnd {
	e := semaphore.HoldEnd{State: r.State, Why: r.Why}
	if r.EndedMS > 0 {
		e.At = time.UnixMilli(r.EndedMS)
	}
	return e
}

// keeper is the keeper as status and HoldInfo show it.
func (r holdRecord) keeper() semaphore.HolderInfo {
	k := r.Keeper
	k.Hold = true
	return k
}

// check says what is wrong with a record read back, if anything.
func (r holdRecord) check() error {
	switch {
	case r.Version != holdVersion:
		return fmt.Errorf("version %d, not %d", r.Version, holdVersion)
	case !knownState(r.State):
		return fmt.Errorf("state %q", r.State)
	case semaphore.CheckKey(r.Key) != nil:
		return errors.New("no key")
	case r.ID != "" && !validID(r.ID):
		return errors.New("its id is no holder's")
	case r.Permits < 1 || r.Permits > semaphore.MaxPermits || r.Weight < 1 || r.Weight > r.Permits:
		return fmt.Errorf("%d of %d permits", r.Weight, r.Permits)
	case r.Token <= 0:
		return fmt.Errorf("token %d", r.Token)
	case len(r.Why) > semaphore.MaxHoldWhy || !utf8.ValidString(r.Why):
		return errors.New("its why is too long, or not UTF-8")
	}
	return checkRuns(r.Runs, r.Permits, r.Weight)
}

func knownState(s semaphore.HoldState) bool {
	switch s {
	case semaphore.HoldHeld, semaphore.HoldReleased, semaphore.HoldLost, semaphore.HoldMaxRuntime, semaphore.HoldRevoked:
		return true
	}
	return false
}

func (r holdRecord) encode() ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if len(b) >= maxHoldRecord {
		return nil, fmt.Errorf("its record would take %d bytes, more than %d (its permits are in too many runs)", len(b), maxHoldRecord)
	}
	return append(b, '\n'), nil
}

// errNoHold: the key's directory has no record by that name.
var errNoHold = errors.New("no such hold")

// badHoldError is a record that cannot be a hold's.
type badHoldError struct{ msg string }

func (e *badHoldError) Error() string { return e.msg }

// readHold reads the record name of k: errNoHold when there is none, a
// *badHoldError when it is not a record semrun could have written.
func (k *keyDir) readHold(name string) (holdRecord, error) {
	var r holdRecord
	f, err := k.open(name, os.O_RDONLY)
	var bad *badFileError
	var st unix.Stat_t
	switch {
	case errors.Is(err, unix.ENOENT):
		return r, errNoHold
	case errors.As(err, &bad):
		return r, &badHoldError{bad.msg}
	case err != nil && (errors.Is(err, unix.EACCES) ||
		unix.Fstatat(int(k.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK):
		// Not semrun's: it makes records readable, never a link.
		return r, &badHoldError{err.Error()}
	case err != nil:
		return r, err
	}
	defer f.Close()
	err = decodeBounded(f, maxHoldRecord, "hold record", &r)
	if errors.As(err, &bad) {
		return r, &badHoldError{bad.msg}
	}
	if err != nil {
		return r, err
	}
	if err := r.check(); err != nil {
		return r, &badHoldError{fmt.Sprintf("hold record %s: %v", f.Name(), err)}
	}
	return r, nil
}

// holdEnded says how the hold of key whose record read back as r, err
// stands: nil while it is held, the end that counts once it has ended or
// when it cannot be read as held, and err itself when the record could
// not be read at all.
func holdEnded(key string, r holdRecord, err error) (*semaphore.HoldEndedError, error) {
	var bad *badHoldError
	switch {
	case errors.Is(err, errNoHold), err == nil && r.Key != key:
		return &semaphore.HoldEndedError{Key: key, End: semaphore.HoldEnd{State: semaphore.HoldUnknown, Why: noHoldWhy}}, nil
	case errors.As(err, &bad):
		return &semaphore.HoldEndedError{Key: key, End: semaphore.HoldEnd{State: semaphore.HoldLost, Why: badRecordWhy}}, nil
	case err != nil:
		return nil, err
	case r.State != semaphore.HoldHeld:
		return &semaphore.HoldEndedError{Key: key, End: r.end()}, nil
	}
	return nil, nil
}

// publishHold writes r as the record name of k, whole or not at all.
func (k *keyDir) publishHold(name string, r holdRecord) error {
	b, err := r.encode()
	if err != nil {
		return err
	}
	if err := k.writeWhole(name, holdDraftPrefix, b, renameNoReplace); err != nil {
		return fmt.Errorf("hold record in %s: %w", k.path, err)
	}
	return nil
}

// endHoldRecord writes the end of the hold r into its record name, in
// place, under the grant lock: an end only adds to the record, so a
// reader without the lock finds the record held, ended or, torn, not to
// be trusted until it reads it again under the lock.
func (k *keyDir) endHoldRecord(name string, r holdRecord, end semaphore.HoldEnd) (semaphore.HoldEnd, error) {
	r.State, r.Why, r.EndedMS = end.State, end.Why, end.At.UnixMilli()
	b, err := r.encode()
	if err != nil {
		return r.end(), err
	}
	f, err := k.openFile(name, os.O_RDWR, true)
	if err != nil {
		return r.end(), err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		return r.end(), fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return r.end(), fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return r.end(), nil
}

// lockGrant takes k's grant lock, waiting at most d, and returns what
// drops it.
func (k *keyDir) lockGrant(ctx context.Context, d time.Duration) (func(), error) {
	f, err := k.open(grantFile, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := lockWait(waitCtx, f); err != nil { // it closed f
		if ctx.Err() == nil && waitCtx.Err() != nil {
			err = fmt.Errorf("another process held it for %v (stopped while it took a permit?)", d)
		}
		return nil, fmt.Errorf("key directory %s: grant lock: %w", k.path, err)
	}
	return func() {
		_, _ = flock(f, unix.LOCK_UN)
		f.Close()
	}, nil
}

// openHold opens the directory of h's key and names h's record there. A
// key with no directory has no hold: errNoHold.
func (s *Store) openHold(h semaphore.Handle) (*keyDir, string, error) {
	if h.Store != semaphore.LocalStore {
		return nil, "", fmt.Errorf("a handle of another store (%q) given to %s", h.Store, s)
	}
	if semaphore.CheckKey(h.Key) != nil || h.Secret == "" {
		return nil, "", errNoHold
	}
	k, err := s.openKeyDir(keyDirName(h.Key))
	if errors.Is(err, unix.ENOENT) {
		return nil, "", errNoHold
	}
	if err != nil {
		return nil, "", err
	}
	return k, holdName(h.Secret), nil
}

// holdID names a hold among those a store's leases are attached to.
func holdID(k *keyDir, name string) string { return k.name + "/" + name }

// Hold implements semaphore.Holds: the lease's permits become a hold's,
// whose mark its file locks, so that until a first process attaches
// they stay held for as long as that file is open, in this process or a
// child that inherited it. The lease's holder record makes way for the
// hold's.
func (s *Store) Hold(_ context.Context, sl semaphore.Lease, keeper semaphore.HolderInfo) (semaphore.Handle, error) {
	l, ok := sl.(*lease)
	switch {
	case !ok:
		return semaphore.Handle{}, fmt.Errorf("hold: %T is no permit granted by a lock directory", sl)
	case l.released.Load():
		return semaphore.Handle{}, fmt.Errorf("hold: released: %w", semaphore.ErrLost)
	case !l.held.CompareAndSwap(false, true):
		return semaphore.Handle{}, errors.New("hold: the permit is a hold's already")
	}
	k, err := s.openKeyDir(keyDirName(l.key))
	if err != nil {
		return semaphore.Handle{}, fmt.Errorf("hold of key %q: %w", l.key, err)
	}
	defer k.close()
	secret := semaphore.NewSecret()
	name := holdName(secret)
	spans := l.locks.permitSpans()
	r := holdRecord{
		Version: holdVersion, State: semaphore.HoldHeld, Key: l.key, ID: l.id, Permits: l.permits, Weight: l.weight,
		Token: l.token, SinceMS: l.sinceMS, Keeper: keeper,
	}
	if r.ID == "" {
		r.ID = newID() // its permit had no record
	}
	r.Keeper.Hold = false // said by status, not written
	r.Runs = spanRuns(spans)
	r.SlotNames = keptNames(l.slots.Names)
	// Marked first: a record no one can read as live is of no use.
	if err := k.markHold(l.locks, markOf(name, spans)); err != nil {
		return semaphore.Handle{}, fmt.Errorf("hold of key %q: %w", l.key, err)
	}
	l.mu.Lock()
	l.dropRecord()
	// A hold's permit does not cool (see lease.Finish).
	err = l.dropCooling()
	l.mu.Unlock()
	if err != nil {
		return semaphore.Handle{}, fmt.Errorf("hold of key %q: %w", l.key, err)
	}
	if err := k.publishHold(name, r); err != nil {
		return semaphore.Handle{}, fmt.Errorf("hold of key %q: %w", l.key, err)
	}
	return semaphore.Handle{Store: semaphore.LocalStore, Key: l.key, Secret: secret}, nil
}

// Attach implements semaphore.Holds. Under the key's grant lock, so that
// no grant comes between the look and the locks, it joins a hold whose
// mark and permits someone holds, with locks of its own. A keeper's locks
// hold the permits as any others' do: it lets go within a second of an end,
// and EndHold waits for that.
func (s *Store) Attach(ctx context.Context, h semaphore.Handle, _ bool) (semaphore.Lease, semaphore.HoldInfo, error) {
	k, name, err := s.openHold(h)
	if errors.Is(err, errNoHold) {
		ended, _ := holdEnded(h.Key, holdRecord{}, err)
		return nil, semaphore.HoldInfo{}, ended
	}
	if err != nil {
		return nil, semaphore.HoldInfo{}, fmt.Errorf("attach to a hold of key %q: %w", h.Key, err)
	}
	kept := false
	defer func() {
		if !kept {
			k.close()
		}
	}()
	unlock, err := k.lockGrant(ctx, holdGrantWait)
	if err != nil {
		return nil, semaphore.HoldInfo{}, fmt.Errorf("attach to a hold of key %q: %w", h.Key, err)
	}
	var lost *semaphore.Event
	defer func() {
		if lost != nil {
			k.note(*lost) // once the grant lock is dropped
		}
	}()
	defer unlock()
	r, ended, err := k.liveHold(h.Key, name)
	if err != nil {
		return nil, semaphore.HoldInfo{}, err
	}
	if ended != nil {
		return nil, semaphore.HoldInfo{}, ended
	}
	spans := r.spans()
	held, err := k.joinHold(spans, markOf(name, spans))
	if err != nil {
		return nil, semaphore.HoldInfo{}, fmt.Errorf("attach to a hold of key %q: %w", h.Key, err)
	}
	if held == nil {
		end, err := k.endHoldRecord(name, r, semaphore.HoldEnd{State: semaphore.HoldLost, Why: lapsedWhy, At: time.Now()})
		if err == nil {
			lost = r.endEvent(end)
		}
		return nil, semaphore.HoldInfo{}, &semaphore.HoldEndedError{Key: h.Key, End: end}
	}
	kept = true
	l := &holdLease{s: s, k: k, key: h.Key, name: name, id: holdID(k, name), r: r, locks: held}
	s.attach(l.id, 1)
	info := semaphore.HoldInfo{Key: h.Key, Permits: r.Permits, Weight: r.Weight, Token: r.Token, TTL: holdCheck, Keeper: r.keeper(), Slots: r.slots()}
	return l, info, nil
}

// liveHold reads the record name of the hold of key, under the grant
// lock: the record while it is held; how it ended, when it has, or when
// it is unknown or malformed; an error when it could not be read.
func (k *keyDir) liveHold(key, name string) (holdRecord, *semaphore.HoldEndedError, error) {
	r, err := k.readHold(name)
	ended, err := holdEnded(key, r, err)
	if err != nil {
		return r, nil, fmt.Errorf("hold of key %q: %w", key, err)
	}
	return r, ended, nil
}

// EndHold implements semaphore.Holds. Under the key's grant lock, the
// first end is written and every later one finds it; a hold no process
// holds any more had lapsed, and ends lost. It then waits, a little, for
// the processes attached to let go, unless one of them is this store's
// (a keeper ending its own hold): so that, once it returns, the permits
// are free.
func (s *Store) EndHold(ctx context.Context, h semaphore.Handle, end semaphore.HoldEnd) (semaphore.HoldEnd, bool, error) {
	if end.State == semaphore.HoldHeld || !knownState(end.State) {
		return semaphore.HoldEnd{}, false, fmt.Errorf("end a hold: %q is no end", end.State)
	}
	end.Why, end.At = boundWhy(end.Why), time.Now()
	k, name, err := s.openHold(h)
	if errors.Is(err, errNoHold) {
		ended, _ := holdEnded(h.Key, holdRecord{}, err)
		return ended.End, false, nil
	}
	if err != nil {
		return semaphore.HoldEnd{}, false, fmt.Errorf("end a hold of key %q: %w", h.Key, err)
	}
	defer k.close()
	got, now, spans, err := s.endHold(ctx, k, h.Key, name, end)
	if err != nil || !now || s.attachedTo(holdID(k, name)) {
		return got, now, err
	}
	k.waitLetGo(ctx, spans, markOf(name, spans))
	return got, true, nil
}

// endHold is EndHold under the key's grant lock; it returns the end that
// counts, whether it was end, and the hold's permits.
func (s *Store) endHold(ctx context.Context, k *keyDir, key, name string, end semaphore.HoldEnd) (semaphore.HoldEnd, bool, []span, error) {
	unlock, err := k.lockGrant(ctx, holdGrantWait)
	if err != nil {
		return semaphore.HoldEnd{}, false, nil, fmt.Errorf("end a hold of key %q: %w", key, err)
	}
	var ev *semaphore.Event
	defer func() {
		if ev != nil {
			k.note(*ev) // once the grant lock is dropped
		}
	}()
	defer unlock()
	defer k.sweepHolds(sweepFew)
	r, ended, err := k.liveHold(key, name)
	if err != nil {
		return semaphore.HoldEnd{}, false, nil, err
	}
	if ended != nil {
		return ended.End, false, nil, nil
	}
	spans := r.spans()
	alive, err := k.holdAlive(spans, markOf(name, spans))
	if err != nil {
		return semaphore.HoldEnd{}, false, nil, fmt.Errorf("end a hold of key %q: %w", key, err)
	}
	if !alive {
		got, err := k.endHoldRecord(name, r, semaphore.HoldEnd{State: semaphore.HoldLost, Why: lapsedWhy, At: end.At})
		if err == nil {
			ev = r.endEvent(got)
		}
		return got, false, nil, nil
	}
	got, err := k.endHoldRecord(name, r, end)
	if err != nil {
		return semaphore.HoldEnd{}, false, nil, fmt.Errorf("end a hold of key %q: %w", key, err)
	}
	ev = r.endEvent(got)
	return got, true, spans, nil
}

// endEvent is the event of the hold r's end, end: a loss, or its permit
// given back; nil for a revoke, which Revoke notes.
func (r holdRecord) endEvent(end semaphore.HoldEnd) *semaphore.Event {
	e := semaphore.Event{
		Kind: semaphore.EventRelease, Key: r.Key, Holder: r.ID, HolderInfo: r.keeper(), Permits: r.Permits, Weight: r.Weight,
		Token: r.Token, Held: end.At.Sub(time.UnixMilli(r.SinceMS)), Slots: r.slots(),
	}
	switch end.State {
	case semaphore.HoldRevoked:
		return nil
	case semaphore.HoldLost:
		// When it lapsed is not known: its last process went unseen.
		e.Kind, e.Held = semaphore.EventLost, 0
	}
	return &e
}

// boundWhy is why as a record keeps it: valid UTF-8, at most
// semaphore.MaxHoldWhy bytes.
func boundWhy(why string) string {
	why = strings.ToValidUTF8(why, "\uFFFD")
	for len(why) > semaphore.MaxHoldWhy {
		_, size := utf8.DecodeLastRuneInString(why)
		why = why[:len(why)-size]
	}
	return why
}

// waitLetGo waits, at most endWait, until no process holds the mark of a
// hold that ended: they learn of the end within a second and let go.
func (k *keyDir) waitLetGo(ctx context.Context, spans []span, mark int64) {
	ctx, cancel := context.WithTimeout(ctx, endWait)
	defer cancel()
	for {
		if alive, err := k.holdAlive(spans, mark); err != nil || !alive {
			return
		}
		if clock.Sleep(ctx, pollEvery) != nil {
			return
		}
	}
}

// attach counts n more (or fewer) of this store's leases attached to the
// hold id.
func (s *Store) attach(id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attached == nil {
		s.attached = map[string]int{}
	}
	if s.attached[id] += n; s.attached[id] <= 0 {
		delete(s.attached, id)
	}
}

func (s *Store) attachedTo(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attached[id] > 0
}

// holdLease is a process's share of a hold (Attach): its own locks on
// the hold's permits and mark.
type holdLease struct {
	s        *Store
	k        *keyDir // its own descriptor of the key's directory
	key      string
	name, id string
	r        holdRecord // as attached
	locks    *heldPermits

	once     sync.Once
	released atomic.Bool
	err      error
}

func (l *holdLease) Token() int64 { return l.r.Token }

// Deadline is zero: a local lock never lapses, so a keeper or a run
// frozen for any while still holds its permits when it thaws. The hold
// can be ended from elsewhere, which Renew, looked at every
// runner.CheckEvery, says.
func (l *holdLease) Deadline() clock.Instant { return clock.Instant{} }

// Bound is zero: see lease.Bound.
func (l *holdLease) Bound() clock.Instant { return clock.Instant{} }

// Finish leaves the hold, as Release does.
func (l *holdLease) Finish(ctx context.Context, _ int) error { return l.Release(ctx) }

// Files are the permits file, read-only, whose locks hold the hold's
// permits and mark: a child that inherits it keeps them, as a run's.
func (l *holdLease) Files() []*os.File { return l.locks.files() }

// Renew reads the hold's record: a *HoldEndedError once the hold has
// ended. A record that does not read as this hold's, held, is read again
// under the grant lock, where ends are written, before it counts: it may
// have been read half written.
func (l *holdLease) Renew(ctx context.Context) error {
	if l.released.Load() {
		return fmt.Errorf("renew: released: %w", semaphore.ErrLost)
	}
	r, err := l.k.readHold(l.name)
	if err != nil || !l.same(r) || r.State != semaphore.HoldHeld {
		unlock, lerr := l.k.lockGrant(ctx, holdGrantWait)
		if lerr != nil {
			return fmt.Errorf("renew a hold of key %q: %w", l.key, lerr)
		}
		r, err = l.k.readHold(l.name)
		unlock()
	}
	if errors.Is(err, errNoHold) {
		return &semaphore.HoldEndedError{Key: l.key, End: semaphore.HoldEnd{State: semaphore.HoldLost, Why: goneWhy}}
	}
	if err == nil && !l.same(r) {
		err = &badHoldError{"hold record " + l.name + ": changed"}
	}
	ended, err := holdEnded(l.key, r, err)
	if err != nil {
		return fmt.Errorf("renew a hold of key %q: %w", l.key, err)
	}
	if ended != nil {
		return ended
	}
	return nil
}

// same tells whether r is still the record of the hold attached to.
func (l *holdLease) same(r holdRecord) bool {
	return r.Key == l.r.Key && r.Token == l.r.Token && r.Weight == l.r.Weight && slices.Equal(r.Runs, l.r.Runs)
}

// Release leaves the hold: its locks dropped, the hold's permits are free
// once no one else holds them. Files the caller closed first are no
// error.
func (l *holdLease) Release(context.Context) error {
	l.once.Do(func() {
		l.released.Store(true)
		l.err = l.locks.release()
		l.k.close()
		l.s.attach(l.id, -1)
	})
	return l.err
}

// holdHolders are the holds whose permits someone holds, each one holder,
// its keeper, however many processes are attached; under the grant lock.
func (k *keyDir) holdHolders(key string, warnf func(string, ...any)) []record {
	var out []record
	for _, name := range k.names(holdPrefix) {
		r, err := k.readHold(name)
		var bad *badHoldError
		if errors.As(err, &bad) && warnf != nil {
			warnf("skipped %s", err)
		}
		if err != nil || r.Key != key {
			continue
		}
		spans := r.spans()
		if alive, err := k.holdAlive(spans, markOf(name, spans)); err != nil || !alive {
			continue
		}
		out = append(out, record{ID: r.ID, HolderInfo: r.keeper(), Permits: r.Permits, Weight: r.Weight, Token: r.Token, SinceMS: r.SinceMS}.withSlots(r.slots()))
	}
	return out
}

// sweepHolds removes, of a few of k's hold records picked at random,
// those that no one has held for holdKept, and, of a few drafts, those
// left for abandonedAfter by a caller that died making them; under the
// grant lock, where no one joins a hold.
func (k *keyDir) sweepHolds(few int) {
	holds, drafts := k.namesOf(holdPrefix, holdDraftPrefix)
	for _, name := range pick(holds, few) {
		if k.changedWithin(name, holdKept) {
			continue
		}
		if r, err := k.readHold(name); err == nil {
			spans := r.spans()
			if alive, err := k.holdAlive(spans, markOf(name, spans)); err != nil || alive {
				continue
			}
		}
		_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
	}
	for _, name := range pick(drafts, few) {
		if !k.changedWithin(name, abandonedAfter) {
			_ = unix.Unlinkat(int(k.dir.Fd()), name, 0)
		}
	}
}

// changedWithin tells whether k's file name was written less than d ago,
// or cannot be told.
func (k *keyDir) changedWithin(name string, d time.Duration) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(int(k.dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	return time.Since(time.Unix(st.Mtim.Unix())) < d
}

// Slots are the hold's, as attached.
func (l *holdLease) Slots() semaphore.Slots { return l.r.slots() }
