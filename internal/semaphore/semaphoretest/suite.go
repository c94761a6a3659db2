package semaphoretest

import (
	"testing"

	"github.com/semrun/semrun/internal/semaphore"
)

// Kind is one implementation of semaphore.Store, as the suite sees it.
type Kind struct {
	Name string
	// Leases is true when permits are leases that lapse: holders show a
	// positive ExpiresIn, and renewing a released permit reports ErrLost.
	Leases bool
	// InLine is true when waiters have a place in line the store keeps:
	// they are served strictly in order, and OnWait and Status show their
	// positions.
	InLine bool
	// Start gives t an empty backend of its own.
	Start func(t *testing.T) *Backend
}

// Backend is where one kind of store keeps its semaphores.
type Backend struct {
	Kind Kind
	// Open returns a new store on the backend, closed when the test ends.
	// All the stores of one backend share its semaphores, as processes on
	// one host or one Redis do.
	Open func(warnf func(format string, args ...any)) semaphore.Store
	// Written lists what the stores wrote: Redis keys, lock directory entries.
	Written func() []string
}

// rule is one rule of the contract, as a test.
type rule struct {
	name string
	test func(t *testing.T, b *Backend, st semaphore.Store)
}

// Run runs every rule of the contract against kind, each as a parallel
// subtest with a fresh backend and one store opened on it.
func Run(t *testing.T, kind Kind) {
	rules := []rule{
		{"AtMostNGrants", ruleAtMostNGrants},
		{"ConcurrentHoldersNeverExceedN", ruleConcurrentHoldersNeverExceedN},
		{"FencingTokensIncrease", ruleFencingTokensIncrease},
		{"WaiterGetsReleasedPermit", ruleWaiterGetsReleasedPermit},
		{"AcquireTimeoutWhileBusy", ruleAcquireTimeoutWhileBusy},
		{"ReleaseTwice", ruleReleaseTwice},
		{"CapacityDisagreement", ruleCapacityDisagreement},
		{"Status", ruleStatus},
		{"RefusesInvalidRequests", ruleRefusesInvalidRequests},
		{"WaitersServedInOrder", ruleWaitersServedInOrder},
		{"NoCallerPassesTheLine", ruleNoCallerPassesTheLine},
		{"WeightsTakePermits", ruleWeightsTakePermits},
		{"WeightedHoldersNeverExceedN", ruleWeightedHoldersNeverExceedN},
		{"HoldKeepsPermit", ruleHoldKeepsPermit},
		{"HoldEnd", ruleHoldEnd},
		{"HoldOutlivedByRuns", ruleHoldOutlivedByRuns},
		{"HoldLapses", ruleHoldLapses},
		{"UnknownHandle", ruleUnknownHandle},
		{"MinHoldCools", ruleMinHoldCools},
		{"GiveBackWithoutCooling", ruleGiveBackWithoutCooling},
		{"WaiterServedAfterCooling", ruleWaiterServedAfterCooling},
		{"MinHoldHolderCountsOnce", ruleMinHoldHolderCountsOnce},
		{"MinHoldAfterSuccess", ruleMinHoldAfterSuccess},
	}
	rules = append(rules, operateRules...)
	rules = append(rules, crashRules...)
	rules = append(rules, eventRules...)
	rules = append(rules, severalRules...)
	rules = append(rules, slotRules...)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			b := kind.Start(t)
			b.Kind = kind
			r.test(t, b, b.Open(nil))
		})
	}
}
