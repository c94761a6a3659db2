package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// WaiterLease is how long a waiter keeps its place in line without telling
// the store it is still there, in a short line, or the lease it asks for
// if that is shorter: a waiter that vanished (killed, host gone) leaves
// the line after at most this, and its renewals, every third of it, also
// cover a wake-up lost in a fault. acquire.lua stretches it in a longer
// line (protocol.PerWaiter a waiter, at most MaxWaiterLease), so that
// keeping places costs Redis the same however long the line. Either way a
// vanished waiter whose turn comes costs those behind it only a claim
// window (protocol.Claim), not its lease.
const WaiterLease = protocol.WaiterLease

// MaxWaiterLease is the longest waiter lease acquire.lua gives: in a line
// of MaxLine waiters.
const MaxWaiterLease = protocol.MaxWaiterLease

// MaxLine is the longest line one key takes: a caller that would make it
// longer is refused as busy, with a *semaphore.LineError.
const MaxLine = protocol.MaxLine

// watchers is how many waiters at the head of the line ask again when the
// earliest lease can lapse: only a permit that lapses needs them, and the
// rest of the line need not wake with them.
const watchers = 8

// newPermitID returns 130 bits from crypto/rand: a client that does not
// hold a permit cannot guess its id to renew or release it.
func newPermitID() string { return rand.Text() }

// Acquire implements semaphore.Store. A caller that cannot have its turn
// now takes a place in line, and blocks until a script pushes its turn to
// its wake list (a release, a lapsed lease or a vanished waiter gave it its
// turn), the earliest lease can lapse, or its place needs renewing: that
// renewal is also the safety net for a lost message. A caller that will
// not wait (NoWait) still waits out a restart fence, then asks again.
func (s *Store) Acquire(ctx context.Context, req semaphore.Request) (semaphore.Lease, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	// Every grant is given back: the release script is made now, not
	// between the command's end and the release, where the next waiter
	// would wait for it (0.05ms on a hand-over, A/B).
	protocol.Build(protocol.ReleaseArgs{})
	a, err := s.newAsker(req)
	if err != nil {
		return nil, err
	}
	if req.NoWait {
		return a.once(ctx)
	}
	for {
		l, delay, err := a.ask(ctx)
		if a.outage(ctx, err) {
			continue
		}
		if l != nil || err != nil {
			return l, err
		}
		if l, err := a.await(ctx, clock.Now().Add(delay)); l != nil || err != nil {
			return l, err
		}
	}
}

// await waits, until the deadline, for the caller's turn: it returns the
// permit handed over, or nil to ask again.
func (a *asker) await(ctx context.Context, deadline clock.Instant) (semaphore.Lease, error) {
	for {
		t, popped, err := a.wake.wait(ctx, clock.Until(deadline))
		switch {
		case err != nil:
			a.s.abandon(ctx, a.keys, a.id)
			return nil, fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		case !popped:
			return nil, nil // time to ask again
		case t.Handed:
			return a.take(ctx, t)
		case t.Superseded != nil:
			// The script that sent it away took it out of the line.
			return nil, &semaphore.SupersededError{Key: a.req.Key, By: *t.Superseded}
		case t.Look > 0:
			// A permit handed to the waiter before this one may lapse
			// unclaimed then: whoever asks first takes it back.
			if at := a.inLine.recv.Add(protocol.Span(t.Look - a.inLine.now + 1)); at.Before(deadline) {
				deadline = at
			}
		default:
			// Not the scripts': someone else wrote it. Dropped, and the
			// waiter slows down, so that a stream of them costs little.
			if err := clock.Sleep(ctx, a.garbage.step()); err != nil {
				a.s.abandon(ctx, a.keys, a.id)
				return nil, fmt.Errorf("wait for key %q: %w", a.req.Key, context.Cause(ctx))
			}
		}
		if clock.Until(deadline) <= 0 {
			return nil, nil
		}
	}
}

// outage tells whether to ask again after the last ask, which returned
// err: once an ask for this key was answered (this caller's, or an earlier
// one's in this process: a run that waits again), a waiter rides out an
// outage of the store for as long as it waits (until ctx ends: --timeout),
// saying once when the store stops answering and once when it answers
// again. A key never answered is the caller's error, as is anything but
// the store's own silence.
func (a *asker) outage(ctx context.Context, err error) bool {
	s := a.s
	switch {
	case err == nil && a.down:
		a.down = false
		s.warnf("key %q: Redis at %s answers again", a.req.Key, s.addr)
		return false
	case err == nil || !a.unreachable || ctx.Err() != nil:
		return false
	}
	if _, reached := s.waitedOn.Load(a.req.Key); !reached {
		return false
	}
	if !a.down {
		a.down = true
		s.warnf("key %q: %v; waiting for it to answer again", a.req.Key, err)
	}
	return true // the ask itself retried for the connect timeout
}

// How often a caller that will not wait waits out a restart fence before
// it takes the fence for busy (a fence longer than the one it waited for,
// asked by another caller meanwhile), and how long past its end it asks
// again: uptime counts whole seconds, so a try that comes too early waits
// again.
const (
	maxFenceWaits = 3
	fenceSlack    = 250 * time.Millisecond
	// NoWaitFence is the longest fence a caller that will not wait waits
	// out when ctx has no deadline (no --timeout): a restart must neither
	// skip a cron job in silence nor hold it for hours. With a deadline,
	// a fence that ends before it is waited out.
	NoWaitFence = 30 * time.Second
)

// once asks for a permit without waiting in line. Until a restart fence
// ends nobody can tell whether the key is busy: a fence that ends within
// NoWaitFence, or before ctx's deadline when it has one, the caller waits
// out, saying so first through OnWait (Fenced is what is left of it), then
// asks again; a longer one, or one still there after maxFenceWaits, is
// the *semaphore.FenceError at once. A grant too late to start on is given
// back and asked again as often.
func (a *asker) once(ctx context.Context) (semaphore.Lease, error) {
	return once(ctx, a.req, func() int { return a.held }, func(d time.Duration) { a.args.FenceWait = d }, a.ask)
}

// once is asker.once for a caller of req that asks with ask, after
// fenceWait set how much of a fence its ask waits out; held is how many
// permits the last ask found taken.
func once(ctx context.Context, req semaphore.Request, held func() int, fenceWait func(time.Duration),
	ask func(context.Context) (semaphore.Lease, time.Duration, error)) (semaphore.Lease, error) {
	limit := NoWaitFence
	if deadline, ok := ctx.Deadline(); ok {
		limit = time.Until(deadline)
	}
	for waits := 0; ; waits++ {
		// A fence it would wait out is no busy answer yet; on the last
		// try, any is.
		fenceWait(limit)
		if waits == maxFenceWaits {
			fenceWait(0)
		}
		l, _, err := ask(ctx)
		if l == nil && err == nil {
			// Granted, but too late to start on, and given back.
			if waits == maxFenceWaits {
				return nil, fmt.Errorf("key %q: Redis answers later than half the lease (%v): %w", req.Key, req.TTL, semaphore.ErrUnreachable)
			}
			continue
		}
		var fenced *semaphore.FenceError
		if !errors.As(err, &fenced) || waits == maxFenceWaits || fenced.Left > limit {
			return l, err
		}
		if req.OnWait != nil {
			req.OnWait(semaphore.WaitState{Held: held(), Capacity: req.Permits, Fenced: fenced.Left})
		}
		if err := clock.Sleep(ctx, fenced.Left+fenceSlack); err != nil {
			return nil, fmt.Errorf("key %q: waiting out the restart fence: %w", req.Key, context.Cause(ctx))
		}
	}
}

// asker is one Acquire's state as it asks for a permit and waits for it.
type asker struct {
	s    *Store
	req  semaphore.Request
	keys protocol.Keys
	id   string
	args protocol.AcquireArgs
	wake wakeups
	// garbage paces a waiter whose wake list holds what no script wrote.
	garbage backoff
	// told: the capacity the previous caller asked was looked at.
	told bool
	// stale: a grant too late to start on was said.
	stale bool
	// unreachable: the last ask was not answered, for the connect
	// timeout. down: the store stopped answering while the caller waited,
	// and that was said.
	unreachable, down bool
	// held is how many permits the last ask found taken.
	held int
	last semaphore.WaitState
	// began is when Acquire began: a grant's wait counts from it.
	began clock.Instant
	// inLine is the last ask that left the caller in line: when it sent it,
	// when the reply came, and the server's clock as the script ran, in
	// between. A permit handed over later lapses at a server time, which
	// sent turns into a local deadline that is never later than the
	// store's; a time to look again, recv turns into one never earlier.
	inLine struct {
		sent, recv clock.Instant
		now        int64
	}
}

func (s *Store) newAsker(req semaphore.Request) (*asker, error) {
	a := &asker{s: s, req: req, keys: protocol.NewKeys(s.prefix, req.Key), id: newPermitID(),
		garbage: backoff{next: 50 * time.Millisecond, max: 2 * time.Second}, began: clock.Now()}
	meta, err := json.Marshal(req.Holder)
	if err != nil {
		return nil, fmt.Errorf("encode holder info: %w", err)
	}
	a.args = protocol.AcquireArgs{
		ID: a.id, Permits: req.Permits, TTL: req.TTL, Meta: meta, Weight: req.Takes(),
		Fence: req.RestartFence, Line: s.maxLine, Bound: asked(req), Cool: req.MinHold, Quiet: s.noEvents,
		Priority: req.Priority, PriorityAge: req.PriorityAge, Supersede: req.Supersede,
	}
	if !req.NoWait {
		a.args.Wait = min(req.TTL, WaiterLease)
	}
	a.wake = wakeups{client: s.client, key: a.keys.WakeList(a.id), poll: backoff{next: 10 * time.Millisecond, max: 500 * time.Millisecond}}
	return a, nil
}

// ask runs the acquire script once. It returns the lease granted, or how
// long to wait for a turn before asking again.
func (a *asker) ask(ctx context.Context) (semaphore.Lease, time.Duration, error) {
	s, req := a.s, a.req
	sent := clock.Now()
	a.args.Waited = sent.Sub(a.began)
	res, err := s.call(ctx, a.keys, a.args)
	recv := clock.Now()
	if limit := protocol.AtLimit(err, a.keys); limit != nil {
		return nil, 0, fmt.Errorf("key %q: %w", req.Key, limit)
	}
	a.unreachable = err != nil && errors.Is(err, semaphore.ErrUnreachable)
	if err != nil {
		if ctx.Err() != nil {
			// The script may have run before ctx ended: give back what
			// may have been granted, or the place in line, now.
			s.abandon(ctx, a.keys, a.id)
		}
		return nil, 0, fmt.Errorf("key %q: %w", req.Key, err)
	}
	s.waitedOn.Store(req.Key, true)
	r, err := protocol.DecodeAcquire(res)
	if err != nil {
		s.abandon(ctx, a.keys, a.id)
		return nil, 0, fmt.Errorf("key %q: %w", req.Key, err)
	}
	if r.Superseded != "" {
		// Sent away from the line while it looked elsewhere: it holds
		// nothing, and is in no line.
		return nil, 0, &semaphore.SupersededError{Key: req.Key, By: protocol.ReadMeta(r.Superseded)}
	}
	if !r.Over {
		// A caller refused for its weight hears that alone, in one line.
		a.warn(r)
	}
	a.held = int(r.Held)
	s.dropped(req.Key, r.Bad)
	s.indexed(ctx, a.keys, r.Fresh)
	// A turn of its own, handed by its own script, it has just taken.
	s.watch(ctx, a.keys, slices.DeleteFunc(r.Handed, func(l string) bool { return l == a.wake.key }))
	if r.Granted {
		l, err := a.fresh(ctx, s.newLease(req, a.keys, a.id, r.Token, r.Slots, sent.Add(serverSpan(r.Left)), sent, r.Since, r.Now))
		return l, 0, err
	}
	if r.Over {
		return nil, 0, &semaphore.SettingError{Setting: semaphore.WeightSetting, Value: req.Takes(),
			Err: fmt.Errorf("more than key %q's stored capacity of %d (semrun key set): it could never be granted", req.Key, r.Stored)}
	}
	fenced := protocol.Span(r.Fenced)
	if req.NoWait {
		if fenced > 0 {
			return nil, 0, fmt.Errorf("key %q: %w", req.Key, &semaphore.FenceError{Left: fenced})
		}
		if p := r.Policy.Pause(); p != nil {
			return nil, 0, &semaphore.PausedError{Key: req.Key, Pause: *p}
		}
		return nil, 0, &semaphore.BusyError{Key: req.Key, Held: int(r.Held), Capacity: capacityOf(req, r.Policy)}
	}
	if r.Full {
		return nil, 0, fmt.Errorf("key %q: %w", req.Key, &semaphore.LineError{Waiting: int(r.Waiting), Max: s.maxLine})
	}
	st, delay := a.inLineAt(r, sent, recv)
	a.tell(st)
	a.args.WasInLine = true
	return nil, delay, nil
}

// inLineAt takes in r, the reply of an ask sent at sent and back at recv,
// which left the caller in line: it returns what the caller waits for,
// and how long until it asks again.
func (a *asker) inLineAt(r protocol.AcquireReply, sent, recv clock.Instant) (semaphore.WaitState, time.Duration) {
	a.inLine.sent, a.inLine.recv, a.inLine.now = sent, recv, r.Now
	// The fence is shown to the second, so that the line is not redrawn for less.
	age := time.Duration(r.Age) * time.Millisecond
	st := semaphore.WaitState{Held: int(r.Held), Capacity: capacityOf(a.req, r.Policy), Position: int(r.Position), Waiting: int(r.Waiting),
		Fenced: protocol.Span(r.Fenced).Round(time.Second), RecentHold: protocol.Elapsed(r.Recent),
		Priority: semaphore.Effective(a.req.Priority, age, sent.Sub(a.began)), PriorityAge: age}
	if p := r.Policy.Pause(); p != nil {
		st.Paused, st.Pause = true, semaphore.Pause{Reason: p.Reason, EndsIn: p.EndsIn.Round(time.Second)}
	}
	// Jittered, so that waiters that came together do not renew together.
	// The lease is the script's, bounded: Redis's word.
	wlease := min(max(protocol.Span(r.Wait), a.args.Wait), MaxWaiterLease)
	delay := wlease/3*9/10 + mrand.N(wlease/15+1)
	// Healthy holders renew long before their lease could lapse, and a
	// waiter asks again before that; only a crashed holder's lapse, or a
	// permit handed over and never claimed, comes first, and then the
	// waiters at the head look.
	if r.Lapse > 0 && (r.Position <= watchers || r.Fenced > 0) {
		delay = min(delay, protocol.Span(r.Lapse)+time.Millisecond)
	}
	return st, delay
}

// tell says st through OnWait, when it changed.
func (a *asker) tell(st semaphore.WaitState) {
	if st != a.last && a.req.OnWait != nil {
		a.req.OnWait(st)
		a.last = st
	}
}

// warn says, once, that the caller disagrees with the previous one about
// the capacity, and, each time, that the server's clock jumped.
func (a *asker) warn(r protocol.AcquireReply) {
	switch {
	case a.told:
	case r.Stored > 0 && r.Stored != int64(a.req.Permits):
		a.s.warnf("key %q: its stored capacity of %d wins over the %s this call asks for (semrun key)", a.req.Key, r.Stored, semaphore.Count(a.req.Permits, "permit"))
	case r.Stored == 0 && r.Previous != int64(a.req.Permits):
		a.s.warnf("key %q: this call asks for %s, the previous caller asked for %d", a.req.Key, semaphore.Count(a.req.Permits, "permit"), r.Previous)
	case a.req.PriorityAge > 0 && r.Age != a.req.PriorityAge.Milliseconds():
		a.s.warnf("key %q: its stored priority age of %v wins over the %v this call asks for (semrun key)", a.req.Key,
			time.Duration(r.Age)*time.Millisecond, a.req.PriorityAge)
	}
	a.told = true
	switch moved := protocol.Span(r.Moved); {
	case moved > 0:
		a.s.warnf("key %q: no call reached Redis for longer than its holders renew: Redis's clock stepped forward, or every holder stopped renewing; their leases were pushed back %v", a.req.Key, moved)
	case moved < 0:
		a.s.warnf("key %q: Redis's clock went back %v", a.req.Key, -moved)
	}
}

// take returns the permit a script handed over, or nil to ask again.
func (a *asker) take(ctx context.Context, t protocol.Turn) (semaphore.Lease, error) {
	// Handed over at the expiry less the lease, as the script reads its clock.
	since := t.Expiry - a.req.TTL.Milliseconds()
	l := a.s.newLease(a.req, a.keys, a.id, t.Token, t.Slots, a.inLine.sent.Add(serverSpan(t.Expiry-a.inLine.now)), a.inLine.sent, since, a.inLine.now)
	// The script that handed it over did not know its terms: the first
	// call of its holder records them, before the command starts, so that
	// a holder stopped from then on frees it at its bound, and one that
	// crashes still cools.
	l.unbound = l.asked > 0 || l.minHold > 0
	return a.fresh(ctx, l)
}

// fresh returns l, just granted, once it is semaphore.Fresh, with its
// replicas: a grant whose answer came back late (Redis or the network
// stalled, or the waiter was stopped), or whose bound the store has yet
// to record, is renewed first. It returns nil to
// ask again when the lease lapsed unused or its renewal came back late
// too; the permit is then given back, so that nobody waits for a permit
// this caller cannot start on.
func (a *asker) fresh(ctx context.Context, l *lease) (semaphore.Lease, error) {
	s, req := a.s, a.req
	// With replicas to wait for, replicated renews anyway.
	if req.MinReplicas <= 0 && (l.unbound || !semaphore.Fresh(l.Deadline(), l.Bound(), clock.Now(), req.TTL, req.KillAfter)) {
		call, cancel := context.WithTimeout(ctx, s.connectTimeout)
		err := l.Renew(call) // lapsed or in doubt: not fresh
		cancel()
		if err != nil && l.unbound {
			// Its terms may not be recorded: a command started now and
			// killed before the next renewal would free the permit at once,
			// neither cooling nor bound. Given back; asked again.
			s.abandon(ctx, a.keys, a.id)
			return nil, nil
		}
	}
	got, err := s.replicated(ctx, req, l)
	switch {
	case err != nil:
		return nil, err
	case !semaphore.Fresh(got.Deadline(), got.Bound(), clock.Now(), req.TTL, req.KillAfter):
		s.abandon(ctx, a.keys, a.id)
		if !a.stale {
			a.stale = true
			s.warnf("key %q: Redis answered too late to start the command on the permit (%v left of its %v lease); gave it back, asking again", req.Key, max(clock.Until(l.Deadline()), 0).Round(time.Millisecond), req.TTL)
		}
		return nil, nil
	}
	return got, nil
}

// replicated returns l once req.MinReplicas replicas have its grant,
// renewing it on one connection with a WAIT until they do, for at most the
// connect timeout; it gives the permit back if they never do.
func (s *Store) replicated(ctx context.Context, req semaphore.Request, l *lease) (semaphore.Lease, error) {
	if req.MinReplicas <= 0 {
		return l, nil
	}
	wait := backoff{next: 50 * time.Millisecond, max: time.Second}
	giveUp := time.Now().Add(s.connectTimeout)
	for {
		// Each try gets the WAIT's own bound, and the connect timeout for the rest.
		call, cancel := context.WithTimeout(ctx, replicaWait(l.ttl)+s.connectTimeout)
		err := l.Renew(call)
		cancel()
		if err == nil {
			return l, nil
		}
		if errors.Is(err, semaphore.ErrLost) || ctx.Err() != nil || time.Until(giveUp) <= 0 || clock.Sleep(ctx, min(wait.step(), time.Until(giveUp))) != nil {
			s.abandon(ctx, l.keys, l.id)
			switch {
			case ctx.Err() != nil:
				return nil, fmt.Errorf("key %q: %w", req.Key, context.Cause(ctx))
			case errors.Is(err, semaphore.ErrLost):
				return nil, fmt.Errorf("key %q: lapsed before %d replicas had it: %w", req.Key, req.MinReplicas, err)
			}
			return nil, fmt.Errorf("key %q: %d replicas %w for %v: %w", req.Key, req.MinReplicas, semaphore.ErrUnreachable, s.connectTimeout, err)
		}
	}
}

// serverSpan is a span of ms between two readings of the server's clock,
// as a local duration never longer than the true one: each reading is
// rounded down to the millisecond, which can add up to 1ms to the span.
func serverSpan(ms int64) time.Duration { return protocol.Span(ms - 1) }

// followUp does what a script's reply on key, at k, leaves to the store:
// it says which records the script dropped (bad), watches the turns it
// handed over (handed), and lists the key in the index when its counters
// were renewed (fresh).
func (s *Store) followUp(ctx context.Context, key string, k protocol.Keys, bad, handed []string, fresh bool) {
	s.dropped(key, bad)
	s.watch(ctx, k, handed)
	s.indexed(ctx, k, fresh)
}

// dropped says, with --verbose, which records of key a script dropped
// because they were not records.
func (s *Store) dropped(key string, bad []string) {
	for _, what := range bad {
		kind, rec, _ := strings.Cut(what, " ")
		s.infof("key %q: dropped a %.20s record that is not one (someone else wrote it): %.100q", key, kind, rec)
	}
}

// watch makes sure that a turn the last script handed over, which its
// waiter did not take at once (it may be dead), is looked at again when
// its claim lapses: by the first waiter left in line (watch.lua). A waiter
// alive and blocked on its list took its turn before Redis ran the next
// command, this EXISTS, so a hand-over to a live waiter wakes nobody
// else. Best effort: the waiters' own renewals cover a failure.
func (s *Store) watch(ctx context.Context, k protocol.Keys, handed []string) {
	lists := make([]any, 0, len(handed))
	for _, l := range handed {
		// Redis's word: only the key's own wake lists are looked at.
		if k.IsWakeList(l) {
			lists = append(lists, l)
		}
	}
	if len(lists) == 0 {
		return
	}
	// Best effort, within the caller's own bound when it has one (a
	// release's, an abandon's), and never longer than the connect timeout.
	limit := time.Now().Add(s.connectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(limit) {
		limit = d
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), limit)
	defer cancel()
	if n, err := s.client.Do(ctx, append([]any{"EXISTS"}, lists...)...).Int64(); err == nil && n > 0 {
		_, _ = protocol.Run(ctx, s.client, k, protocol.WatchArgs{})
	}
}

// abandon releases id after ctx ended, under a short deadline of its own:
// a waiter's wait ends as a timeout when ctx's deadline passed, else it
// leaves (events).
func (s *Store) abandon(ctx context.Context, k protocol.Keys, id string) {
	args := protocol.ReleaseArgs{ID: id, Timeout: errors.Is(ctx.Err(), context.DeadlineExceeded), Quiet: s.noEvents}
	// Short: a caller who gave up on waiting, or was signalled, wants out now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 250*time.Millisecond)
	defer cancel()
	if res, err := protocol.Run(ctx, s.client, k, args); err == nil {
		if r, err := protocol.DecodeRelease(res); err == nil {
			s.watch(ctx, k, r.Handed)
			s.indexed(ctx, k, r.Fresh)
		}
	}
}

// capacityOf is the capacity req is admitted against: the stored one, if
// an operator set one.
func capacityOf(req semaphore.Request, p protocol.Policy) int {
	if p.Stored > 0 {
		return int(p.Stored)
	}
	return req.Permits
}
