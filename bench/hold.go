package main

import (
	"os"
	"time"
)

// A heldKey is a fresh key of one permit taken by a first process whose
// child holds it until the gate file exists: whatever a measure starts on
// the key next queues behind it, until the measure opens the gate.
type heldKey struct {
	log, gate string
	g         *group // the measure's processes
	holder    *proc
	// argv runs the child under the lock on the key, holding for hold
	// (see childArgv).
	argv func(hold string) []string
}

// holdKey starts the holder under l and waits until its child runs; the
// caller closes the key.
func (b *bench) holdKey(l *locker, what string) (*heldKey, error) {
	key, log := b.key(what)
	h := &heldKey{log: log, gate: log + ".open", g: newGroup(b.ctx, b.env)}
	h.argv = func(hold string) []string { return l.argv(key, 1, b.childArgv(log, hold)) }
	var err error
	if h.holder, err = h.g.start(h.argv("gate:"+h.gate), true); err == nil {
		err = waitStarted(b.ctx, log, 1, h.holder, 30*time.Second)
	}
	if err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// open lets the holder's child end, and so the holder let go.
func (h *heldKey) open() error { return os.WriteFile(h.gate, nil, 0o644) }

// close ends the processes still running and waits for them all.
func (h *heldKey) close() { h.g.close() }
