package main

import (
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/clock"
)

// rssTarget is the most memory a semrun may keep resident, waiting or holding.
const rssTarget = 15_000_000

// rss reads the resident memory of a holder whose child sleeps and of a
// waiter queued behind it, once both are settled.
func (b *bench) rss() ([]*table, error) {
	type result struct {
		name                               string
		waitRSS, waitHWM, holdRSS, holdHWM int64
	}
	var rs []result
	var failed error
	for _, l := range b.lockers(1, false) {
		r := result{name: l.name}
		var err error
		r.holdRSS, r.holdHWM, r.waitRSS, r.waitHWM, err = b.rssOf(l)
		if err != nil {
			failed = fmt.Errorf("%s: %w", l.name, err)
			break
		}
		rs = append(rs, r)
	}
	t := &table{
		title: "rss: resident memory of the lock's own process, VmRSS and its peak VmHWM from /proc/PID/status",
		head:  []string{"lock", "waiting", "waiting peak", "holding", "holding peak", "waiting / flock's", "holding / flock's", "target"},
	}
	var flockWait, flockHold int64
	for _, r := range rs {
		if r.name == "flock" {
			flockWait, flockHold = r.waitRSS, r.holdRSS
		}
	}
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	for _, r := range rs {
		target := ""
		if r.name == "semrun (Redis)" || r.name == "semrun --local" {
			target = fmt.Sprintf("peak ≤ %.0f MB: %s", rssTarget/1e6, verdict(max(r.waitHWM, r.holdHWM) <= rssTarget))
		}
		t.add(r.name, mb(r.waitRSS), mb(r.waitHWM), mb(r.holdRSS), mb(r.holdHWM),
			ratio(float64(r.waitRSS), float64(flockWait)), ratio(float64(r.holdRSS), float64(flockHold)), target)
	}
	t.note("MB are 10⁶ bytes. The holder's child sleeps; the waiter waits behind it for the same key, with 1 permit. The process measured is semrun's, flock's, or the perl of GNU sem, not the child's.")
	return []*table{t}, failed
}

// rssOf measures a holder and a waiter under l.
func (b *bench) rssOf(l *locker) (holdRSS, holdHWM, waitRSS, waitHWM int64, err error) {
	h, err := b.holdKey(l, "rss")
	if err != nil {
		return
	}
	defer h.close()
	waiter, err := h.g.start(h.argv("0"), true)
	if err != nil {
		return
	}
	if err = clock.Sleep(b.ctx, 300*time.Millisecond); err != nil {
		return
	}
	if err = settle(b.ctx, []*proc{h.holder, waiter}, 200*time.Millisecond, 10*time.Second); err != nil {
		return
	}
	if started(h.log) != 1 {
		err = fmt.Errorf("the waiter's child started while the only permit was held")
		return
	}
	if holdRSS, holdHWM, err = memory(h.holder.pid()); err != nil {
		return
	}
	if waitRSS, waitHWM, err = memory(waiter.pid()); err != nil {
		return
	}
	if err = h.open(); err != nil {
		return
	}
	err = h.g.waitAll()
	return
}
