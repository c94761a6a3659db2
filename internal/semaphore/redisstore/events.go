package redisstore

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// What happened to the keys is what the scripts wrote (lib.lua's event
// and count): each key's log is a stream, read with XRANGE for its
// history and XREAD to follow it, and its counters a hash status.lua
// reads. The keys whose log or counters exist are listed in an index, a
// set under the prefix that a client adds a key to when a script says it
// renewed the key's counters: at most once an hour a key, never a walk of
// the keyspace.

const (
	// indexTimeout bounds the addition of a key to the index, which a
	// grant or a release may wait for: best effort, as the key's next
	// renewal of its counters, within the hour, adds it again.
	indexTimeout = 500 * time.Millisecond
	// maxHistory is the most entries of one key's log told as its
	// history: the scripts trim it near semaphore.MaxEvents, and more is
	// someone else's doing.
	maxHistory = 2 * semaphore.MaxEvents
	// heldEvents bounds the entries read ahead, across the keys, while
	// their histories are merged.
	heldEvents = 20_000
	// followBlock is how long one XREAD blocks, and pollEvery how often
	// the logs are read when one XREAD cannot read them all (a cluster's
	// keys are in different slots): either way, a new event is told
	// within a second.
	followBlock = time.Second
	pollEvery   = 500 * time.Millisecond
	// followCount is the most entries of one log one read takes, and
	// streamsPerRead the most logs one XREAD names: a reply of at most
	// 50,000 entries, within what the guard lets a reply declare.
	followCount    = 100
	streamsPerRead = 500
	// relistEvery is how often a follower of every key looks whether the
	// index changed (SCARD), and then for new keys (Keys).
	relistEvery = time.Second
)

// indexed adds k to the store's index when a script renewed its counters
// (fresh), and gives the index their life: best effort, within
// indexTimeout.
func (s *Store) indexed(ctx context.Context, k protocol.Keys, fresh bool) {
	if !fresh {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), indexTimeout)
	defer cancel()
	index := protocol.Index(s.prefix)
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, index, k.Name)
		p.PExpire(ctx, index, protocol.EventLife)
		return nil
	})
}

// Keys implements semaphore.Events: the keys of the index (SSCAN, at
// most protocol.MaxIndexed) whose log or counters still exist; the others
// (expired, or no key at all: someone else wrote them) leave the index.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	index := protocol.Index(s.prefix)
	seen := map[string]bool{}
	var listed, gone []string
	for cursor := "0"; ; {
		page, err := s.client.Do(ctx, "SSCAN", index, cursor, "COUNT", 1000).Slice()
		if err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			// An index that is no set (someone else wrote it) makes way:
			// the keys' next renewals list them again.
			_ = s.client.Do(ctx, "DEL", index).Err()
			return []string{}, nil
		}
		if err := s.noServer(err); err != nil {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", s.prefix, s.addr, err)
		}
		next, members, ok := scanPage(page)
		if !ok {
			return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", s.prefix, s.addr, errAbsurdReply)
		}
		for _, m := range members {
			switch {
			case seen[m]:
			case semaphore.CheckKey(m) != nil:
				gone = append(gone, m)
			default:
				listed = append(listed, m)
			}
			seen[m] = true
		}
		if cursor = next; cursor == "0" || len(seen) >= protocol.MaxIndexed {
			break
		}
	}
	var kept []string
	for chunk := range slices.Chunk(listed, 1000) {
		cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, key := range chunk {
				k := protocol.NewKeys(s.prefix, key)
				p.Exists(ctx, k.Events, k.Stats)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list the keys under prefix %q on %s: %w", s.prefix, s.addr, err)
		}
		for i, c := range cmds {
			if n, _ := c.(*redis.IntCmd).Result(); n > 0 {
				kept = append(kept, chunk[i])
			} else {
				gone = append(gone, chunk[i])
			}
		}
	}
	for chunk := range slices.Chunk(gone, 1000) {
		_ = s.client.Do(ctx, append([]any{"SREM", index}, toAny(chunk)...)...).Err() // pruned next time otherwise
	}
	slices.Sort(kept)
	return kept, nil
}

// scanPage reads a page of SSCAN: the next cursor and the members.
func scanPage(page []any) (next string, members []string, ok bool) {
	if len(page) != 2 {
		return "", nil, false
	}
	next, ok = page[0].(string)
	list, okList := page[1].([]any)
	if !ok || !okList || len(list) > 100_000 {
		return "", nil, false
	}
	for _, m := range list {
		if s, ok := m.(string); ok {
			members = append(members, s)
		}
	}
	return next, members, true
}

// logCursor is where a reader of one key's log is.
type logCursor struct {
	keys protocol.Keys
	// last is the last entry told, or before the first to tell.
	last protocol.StreamID
	// broken: the log is no stream (someone else wrote it); skipped.
	broken bool
}

// Events implements semaphore.Events. The history is each key's log,
// merged oldest first, from Since ago on the server's clock (TIME) to the
// last entry when it began; following, XREAD reads what comes after, each
// key from the last entry told, riding out failures with retries a
// second apart at most.
func (s *Store) Events(ctx context.Context, q semaphore.EventQuery, each func(semaphore.Event) error) error {
	if q.Follow && s.dial != nil {
		// A follower's connections are its own, closed as its context
		// ends: go-redis ends no read on a context's cancel, and a read
		// of a server that answers nothing (stopped, cut off) would keep
		// Ctrl-C waiting for its deadline, the connect timeout.
		c := s.dial()
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		defer stop()
		s = s.over(c)
	}
	err := s.events(ctx, q, each)
	var stopped stoppedError
	switch {
	case errors.As(err, &stopped):
		return stopped.err
	case q.Follow && ctx.Err() != nil:
		return nil // followed until ctx ended
	}
	return err
}

// over is a store like s over c: what Events uses of it.
func (s *Store) over(c Client) *Store {
	return &Store{client: c, prefix: s.prefix, addr: s.addr, connectTimeout: s.connectTimeout, cluster: s.cluster,
		warnf: s.warnf, infof: s.infof, names: s.names, maxLine: s.maxLine, retrying: s.retrying, unnamed: s.unnamed}
}

// stoppedError is an error of each, which ends Events with it.
type stoppedError struct{ err error }

func (e stoppedError) Error() string { return e.err.Error() }

func (s *Store) events(ctx context.Context, q semaphore.EventQuery, each func(semaphore.Event) error) error {
	tell := func(e semaphore.Event) error {
		if err := each(e); err != nil {
			return stoppedError{err}
		}
		return nil
	}
	keys, listed := slices.Clone(q.Keys), len(q.Keys) == 0
	for _, key := range keys {
		if err := semaphore.CheckKey(key); err != nil {
			return &semaphore.SettingError{Setting: semaphore.KeySetting, Value: fmt.Sprintf("%q", key), Err: err}
		}
	}
	if listed {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return err
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	now, err := s.serverTime(ctx)
	if err != nil {
		return err
	}
	from := protocol.StreamID{}
	if q.Since > 0 {
		from.Ms = uint64(max(now-q.Since.Milliseconds(), 0))
	}
	cursors := make([]*logCursor, len(keys))
	for i, key := range keys {
		cursors[i] = &logCursor{keys: protocol.NewKeys(s.prefix, key)}
	}
	if err := s.history(ctx, cursors, from, tell); err != nil {
		return err
	}
	if !q.Follow {
		return nil
	}
	return s.follow(ctx, cursors, listed, protocol.StreamID{Ms: uint64(now)}, tell)
}

// serverTime is the server's clock, ms.
func (s *Store) serverTime(ctx context.Context) (int64, error) {
	var t []any
	err := s.retried(ctx, func(ctx context.Context) error {
		var err error
		t, err = s.client.Do(ctx, "TIME").Slice()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read the clock of %s: %w", s.addr, err)
	}
	if len(t) == 2 {
		secs, _ := t[0].(string)
		micros, _ := t[1].(string)
		sec, err1 := strconv.ParseInt(secs, 10, 64)
		usec, err2 := strconv.ParseInt(micros, 10, 64)
		if err1 == nil && err2 == nil && sec >= 0 && sec < protocol.MaxInt/1000 && usec >= 0 && usec < 1_000_000 {
			return sec*1000 + usec/1000, nil
		}
	}
	return 0, fmt.Errorf("read the clock of %s: %w", s.addr, errAbsurdReply)
}

// retried runs call, and again on failures that may heal, for at most
// the connect timeout, as a script is (see call).
func (s *Store) retried(ctx context.Context, call func(ctx context.Context) error) error {
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	giveUp := time.Now().Add(s.connectTimeout)
	for {
		attempt, cancel := context.WithDeadline(ctx, giveUp)
		err := call(attempt)
		cancel()
		switch {
		case err == nil || errors.Is(err, redis.Nil):
			s.reached.Store(true)
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case !retryable(err):
			return err
		}
		if noServer := s.noServer(err); noServer != nil {
			return noServer
		}
		if time.Until(giveUp) <= 0 {
			return fmt.Errorf("%s %w for %v (%s): %w", s.addr, semaphore.ErrUnreachable, s.connectTimeout, s.names.Name(ConnectTimeoutSetting), err)
		}
		if err := clock.Sleep(ctx, min(wait.step(), time.Until(giveUp))); err != nil {
			return context.Cause(ctx)
		}
	}
}

// pipelined sends fn's commands, retried (see retried) while any failed
// in a way that may heal; each command's own error is its key's.
func (s *Store) pipelined(ctx context.Context, fn func(ctx context.Context, p redis.Pipeliner)) ([]redis.Cmder, error) {
	var cmds []redis.Cmder
	err := s.retried(ctx, func(ctx context.Context) error {
		cmds, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			fn(ctx, p)
			return nil
		})
		for _, c := range cmds {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && retryable(err) {
				return err
			}
		}
		return nil
	})
	return cmds, err
}

// wrongType tells a command on a key of another type: a log someone else
// wrote.
func wrongType(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// history tells each cursor's log from from, merged oldest first, up to
// the last entry when it began, where it leaves each cursor.
func (s *Store) history(ctx context.Context, cursors []*logCursor, from protocol.StreamID, tell func(semaphore.Event) error) error {
	if len(cursors) == 0 {
		return nil
	}
	// Where each log ends, and how long it is.
	cmds, err := s.pipelined(ctx, func(ctx context.Context, p redis.Pipeliner) {
		for _, c := range cursors {
			p.XLen(ctx, c.keys.Events)
			p.XRevRangeN(ctx, c.keys.Events, "+", "-", 1)
		}
	})
	if err != nil {
		return fmt.Errorf("read the events of %d keys on %s: %w", len(cursors), s.addr, err)
	}
	var readers []*logReader
	var long []*logReader
	for i, c := range cursors {
		n, err := cmds[2*i].(*redis.IntCmd).Result()
		top, err2 := cmds[2*i+1].(*redis.XMessageSliceCmd).Result()
		if wrongType(err) || wrongType(err2) {
			c.broken = true
			continue
		}
		if err := errors.Join(err, err2); err != nil {
			return fmt.Errorf("read the events of key %q on %s: %w", c.keys.Name, s.addr, err)
		}
		if len(top) == 0 {
			continue // no log: following reads it from its start
		}
		end, ok := protocol.ParseStreamID(top[0].ID)
		if !ok {
			c.broken = true
			continue
		}
		c.last = end
		r := &logReader{cursor: c, from: from, end: end, index: i}
		readers = append(readers, r)
		if n > maxHistory {
			long = append(long, r)
		}
	}
	if err := s.fromRecent(ctx, long); err != nil {
		return err
	}
	return s.merge(ctx, readers, tell)
}

// fromRecent starts each of long, logs longer than they should be
// (someone else wrote them), at its maxHistory-th last entry.
func (s *Store) fromRecent(ctx context.Context, long []*logReader) error {
	if len(long) == 0 {
		return nil
	}
	cmds, err := s.pipelined(ctx, func(ctx context.Context, p redis.Pipeliner) {
		for _, r := range long {
			p.XRevRangeN(ctx, r.cursor.keys.Events, r.end.String(), "-", maxHistory)
		}
	})
	if err != nil {
		return fmt.Errorf("read the events of %d keys on %s: %w", len(long), s.addr, err)
	}
	for i, r := range long {
		if got, _ := cmds[i].(*redis.XMessageSliceCmd).Result(); len(got) > 0 {
			if first, ok := protocol.ParseStreamID(got[len(got)-1].ID); ok && first.Compare(r.from) > 0 {
				r.from = first
			}
		}
	}
	return nil
}

// merge tells the events the readers' logs hold, oldest first, a page of
// each log at a time, so that what is held stays bounded however many
// logs there are.
func (s *Store) merge(ctx context.Context, readers []*logReader, tell func(semaphore.Event) error) error {
	page := int64(min(max(heldEvents/max(len(readers), 1), 1), 500))
	// The first pages in one round trip each server; the next as needed.
	if err := s.readPages(ctx, readers, page); err != nil {
		return err
	}
	h := &eventHeap{}
	for _, r := range readers {
		if len(r.page) > 0 {
			heap.Push(h, r)
		}
	}
	for h.Len() > 0 {
		r := (*h)[0]
		if err := tell(r.page[0].event); err != nil {
			return err
		}
		r.page = r.page[1:]
		if len(r.page) == 0 && !r.done {
			if err := s.readPages(ctx, []*logReader{r}, page); err != nil {
				return err
			}
		}
		if len(r.page) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return nil
}

// logReader reads one key's log as its history.
type logReader struct {
	cursor *logCursor
	// from is the first entry to read; end the last.
	from, end protocol.StreamID
	// page is what was read and not yet told; done: nothing more to read.
	page []entry
	done bool
	// index orders the keys' events of the same instant.
	index int
}

// entry is an event of a log, with its id.
type entry struct {
	id    protocol.StreamID
	event semaphore.Event
}

// readPages reads the next page of each reader's log, up to n entries: a
// page of entries that are no events is skipped, and the next read, until
// a reader has events to tell or none is left to read.
func (s *Store) readPages(ctx context.Context, readers []*logReader, n int64) error {
	for len(readers) > 0 {
		cmds, err := s.pipelined(ctx, func(ctx context.Context, p redis.Pipeliner) {
			for _, r := range readers {
				p.XRangeN(ctx, r.cursor.keys.Events, r.from.String(), r.end.String(), n)
			}
		})
		if err != nil {
			return fmt.Errorf("read the events of %d keys on %s: %w", len(readers), s.addr, err)
		}
		var again []*logReader
		for i, r := range readers {
			got, err := cmds[i].(*redis.XMessageSliceCmd).Result()
			switch {
			case wrongType(err):
				// Replaced meanwhile by someone else's key.
				r.cursor.broken, r.done = true, true
				continue
			case err != nil && !errors.Is(err, redis.Nil):
				return fmt.Errorf("read the events of key %q on %s: %w", r.cursor.keys.Name, s.addr, err)
			}
			r.page = r.page[:0]
			moved := false
			for _, m := range got {
				id, ok := protocol.ParseStreamID(m.ID)
				if !ok || id.Compare(r.from) < 0 || id.Compare(r.end) > 0 {
					continue // not the entries asked for: the reply is not to be trusted
				}
				r.from, moved = id.Next(), true
				if e, ok := protocol.DecodeEvent(r.cursor.keys.Name, m); ok {
					r.page = append(r.page, entry{id, e})
				}
			}
			// Each read that is not the last moves from on: the loop ends.
			r.done = !moved || r.from.Compare(r.end) > 0
			if len(r.page) == 0 && !r.done {
				again = append(again, r)
			}
		}
		readers = again
	}
	return nil
}

// eventHeap orders the readers by their next event: oldest first, and
// by key for the same instant.
type eventHeap []*logReader

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if c := h[i].page[0].id.Compare(h[j].page[0].id); c != 0 {
		return c < 0
	}
	return h[i].index < h[j].index
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*logReader)) }
func (h *eventHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// follow tells what comes after each cursor, until ctx ends. A failure
// (the store restarted, or cannot be reached) is retried, a second apart
// at most, from where each cursor is; once it heals, a log that went back
// (lost with the server's data, or by a failover) is read from its start,
// or from its last entry. With listed, it looks for keys new to the index
// every relistEvery, whose logs it reads from began.
func (s *Store) follow(ctx context.Context, cursors []*logCursor, listed bool, began protocol.StreamID, tell func(semaphore.Event) error) error {
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	failed := false
	relist, indexed := time.Now().Add(relistEvery), int64(-1)
	for ctx.Err() == nil {
		if listed && time.Now().After(relist) {
			relist = time.Now().Add(relistEvery)
			cursors, indexed = s.relist(ctx, cursors, began, indexed)
		}
		var err error
		if failed {
			err = s.rejoin(ctx, cursors)
		}
		if err == nil {
			err = s.readNew(ctx, cursors, tell)
		}
		var stopped stoppedError
		switch {
		case errors.As(err, &stopped):
			return err
		case err == nil:
			failed, wait = false, backoff{next: 50 * time.Millisecond, max: time.Second}
			continue
		case ctx.Err() != nil:
			return nil
		case !retryable(err) && !errors.Is(err, semaphore.ErrUnreachable):
			return fmt.Errorf("follow the events on %s: %w", s.addr, err)
		}
		failed = true
		if clock.Sleep(ctx, wait.step()) != nil {
			return nil
		}
	}
	return nil
}

// relist adds the keys new to the index to cursors, read from began,
// when its size changed from indexed: the keys are listed once a key
// joins it or leaves it, not every time. It returns the size listed.
func (s *Store) relist(ctx context.Context, cursors []*logCursor, began protocol.StreamID, indexed int64) ([]*logCursor, int64) {
	call, cancel := context.WithTimeout(ctx, s.connectTimeout) // see rejoin
	size, err := s.client.Do(call, "SCARD", protocol.Index(s.prefix)).Int64()
	cancel()
	if err != nil || size == indexed {
		return cursors, indexed // looked at again later
	}
	keys, err := s.Keys(ctx)
	if err != nil {
		return cursors, indexed
	}
	known := map[string]bool{}
	for _, c := range cursors {
		known[c.keys.Name] = true
	}
	for _, key := range keys {
		if !known[key] {
			cursors = append(cursors, &logCursor{keys: protocol.NewKeys(s.prefix, key), last: began})
		}
	}
	return cursors, size
}

// rejoin looks, after a failure, whether each log went back: one that is
// gone (the server lost its data) is read from its start when it comes
// back; one whose last entry is before the cursor's (a failover lost the
// last entries) from that entry on.
func (s *Store) rejoin(ctx context.Context, cursors []*logCursor) error {
	// Bounded as every read of the follower: go-redis waits for a reply
	// until the deadline, not until ctx is cancelled, and a server that
	// stopped answering (paused, cut off) would hold the follower past
	// ctx's end, and retry nothing.
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range cursors {
			p.XRevRangeN(ctx, c.keys.Events, "+", "-", 1)
		}
		return nil
	})
	for i, c := range cursors {
		top, err := cmds[i].(*redis.XMessageSliceCmd).Result()
		switch {
		case wrongType(err):
			c.broken = true
		case err != nil && !errors.Is(err, redis.Nil):
			return err
		case len(top) == 0:
			c.last = protocol.StreamID{}
		default:
			if id, ok := protocol.ParseStreamID(top[0].ID); ok && id.Compare(c.last) < 0 {
				c.last = id
			}
		}
	}
	return err
}

// readNew tells what the cursors' logs hold after them: with one XREAD
// that blocks for followBlock when one can name every log, else with one
// a log (a cluster: each key is in a slot of its own), pipelined, every
// pollEvery.
func (s *Store) readNew(ctx context.Context, cursors []*logCursor, tell func(semaphore.Event) error) error {
	live, groups := s.readGroups(cursors)
	if len(live) == 0 {
		return clock.Sleep(ctx, pollEvery)
	}
	block := time.Duration(-1)
	if len(groups) == 1 {
		block = followBlock
	}
	call, cancel := context.WithTimeout(ctx, followBlock+s.connectTimeout)
	defer cancel()
	cmds, err := s.client.Pipelined(call, func(p redis.Pipeliner) error {
		for _, g := range groups {
			streams := make([]string, 0, 2*len(g))
			for _, c := range g {
				streams = append(streams, c.keys.Events)
			}
			for _, c := range g {
				streams = append(streams, c.last.String())
			}
			p.XRead(call, &redis.XReadArgs{Streams: streams, Count: followCount, Block: block})
		}
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var found []entry
	var failed error
	named := map[string]*logCursor{}
	for _, c := range live {
		named[c.keys.Events] = c
	}
	for i, g := range groups {
		got, err := cmds[i].(*redis.XStreamSliceCmd).Result()
		if wrongType(err) {
			// One log that is no stream fails the XREAD of its group: each
			// is looked at alone.
			s.markBroken(ctx, g)
			continue
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			failed = err
			continue
		}
		for _, stream := range got {
			c := named[stream.Stream]
			if c == nil {
				continue // not a log asked for
			}
			found = append(found, c.take(stream.Messages)...)
		}
	}
	slices.SortStableFunc(found, func(a, b entry) int { return a.id.Compare(b.id) })
	for _, e := range found {
		if err := tell(e.event); err != nil {
			return err
		}
	}
	if failed == nil && err != nil && !errors.Is(err, redis.Nil) && !wrongType(err) {
		failed = err
	}
	if failed != nil {
		return failed
	}
	if block < 0 {
		return clock.Sleep(ctx, pollEvery)
	}
	return nil
}

// readGroups are the cursors whose logs can be read, and how many one
// XREAD names: as many as it may, or one in a cluster, where each key is
// in a slot of its own.
func (s *Store) readGroups(cursors []*logCursor) (live []*logCursor, groups [][]*logCursor) {
	for _, c := range cursors {
		if !c.broken {
			live = append(live, c)
		}
	}
	per := streamsPerRead
	if s.cluster {
		per = 1
	}
	for g := range slices.Chunk(live, per) {
		groups = append(groups, g)
	}
	return live, groups
}

// take moves c past msgs, what its log holds after it, and returns their
// events.
func (c *logCursor) take(msgs []redis.XMessage) []entry {
	var found []entry
	for _, m := range msgs {
		id, ok := protocol.ParseStreamID(m.ID)
		if !ok {
			// An id past what a cursor holds (someone else wrote it): the
			// cursor could not move past it, and every read would return
			// it at once, for ever. The entries after it are as far out,
			// so the log is skipped, as history skips one that ends so.
			c.broken = true
			break
		}
		if id.Compare(c.last) <= 0 {
			continue
		}
		c.last = id
		if e, ok := protocol.DecodeEvent(c.keys.Name, m); ok {
			found = append(found, entry{id, e})
		}
	}
	return found
}

// markBroken marks the cursors whose log is no stream.
func (s *Store) markBroken(ctx context.Context, group []*logCursor) {
	ctx, cancel := context.WithTimeout(ctx, s.connectTimeout) // see rejoin
	defer cancel()
	cmds, _ := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range group {
			p.XLen(ctx, c.keys.Events)
		}
		return nil
	})
	for i, c := range group {
		if i < len(cmds) && wrongType(cmds[i].Err()) {
			c.broken = true
		}
	}
}
