//go:build unix

package localstore

import (
	"encoding/json"
	"slices"

	"github.com/semrun/semrun/internal/semaphore"
)

// A grant's slots (semaphore.Slots) are the permits it locks: on Linux
// the bytes of the permits file, permit i byte i; elsewhere the seat.i
// files. take locks the lowest free below the capacity the caller is
// admitted against, so slot i is permit i, held by one holder at a time
// and freed, kept, cooled or lost exactly as its lock is. The names are
// the key's policy's (policy.go), as the grant read them.
//
// The holder's record, a hold's and a cooling's keep the slots for status
// and events; names take at most maxNamesJSON of them, so that a record
// stays within what its readers read (a cooling skipped would keep no
// permit): a grant with more is shown unnamed there, never misnamed.
const maxNamesJSON = 32 << 10

// slotsOf are the slots of the permits spans of a key of capacity
// permits, names being the key's slots' names (nil: none): none on a key
// of more than semaphore.MaxSlots permits.
func slotsOf(spans []span, permits int, names []string) semaphore.Slots {
	if !semaphore.Numbered(permits) {
		return semaphore.Slots{}
	}
	var numbers []int
	for _, sp := range spans {
		if sp.start < 0 || sp.n < 1 || sp.start+sp.n > int64(permits) {
			return semaphore.Slots{} // no permits of this key: no slots
		}
		for i := sp.start; i < sp.start+sp.n; i++ {
			numbers = append(numbers, int(i))
		}
	}
	if len(names) < permits {
		names = nil // not the key's names: unnamed rather than misnamed
	}
	return semaphore.NameSlots(numbers, names)
}

// checkedSlots are the slots numbers, named names, that a record read
// back says a grant of weight of a key of capacity permits holds: none
// when they cannot be its (a record is anyone's in the group to write).
func checkedSlots(numbers []int, names []string, permits, weight int) semaphore.Slots {
	if !semaphore.Numbered(permits) || len(numbers) != weight {
		return semaphore.Slots{}
	}
	for i, n := range numbers {
		if n < 0 || n >= permits || (i > 0 && n <= numbers[i-1]) {
			return semaphore.Slots{}
		}
	}
	return semaphore.NamedSlots(slices.Clone(numbers), slices.Clone(names))
}

// keptNames are names as a record keeps them: nil when they would take
// more than maxNamesJSON.
func keptNames(names []string) []string {
	if b, err := json.Marshal(names); err != nil || len(b) > maxNamesJSON {
		return nil
	}
	return names
}

// cloneSlots is s with slices of its own.
func cloneSlots(s semaphore.Slots) semaphore.Slots {
	return semaphore.Slots{Numbers: slices.Clone(s.Numbers), Names: slices.Clone(s.Names)}
}
