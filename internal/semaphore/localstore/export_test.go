//go:build unix

package localstore

import "github.com/semrun/semrun/internal/semaphore"

// FirstPermit is the file a key's first permit is in: "seats" on Linux,
// "seat.0" elsewhere.
const FirstPermit = firstPermit

// HoldFileName names the record of the hold whose secret is secret.
var HoldFileName = holdName

// HoldKept is how long a hold's record stays once no one holds it.
const HoldKept = holdKept

// GrantedMS is when a permit was granted, in wall-clock ms: its cooling
// ends its min hold after.
func GrantedMS(l semaphore.Lease) int64 { return l.(*lease).sinceMS }
