//go:build unix

package localstore

// FirstSeat is the file a key's first seat is in: "seats" on Linux,
// "seat.0" elsewhere.
const FirstSeat = firstSeat

// HoldFileName names the record of the hold whose secret is secret.
var HoldFileName = holdName

// HoldKept is how long a hold's record stays once no one holds it.
const HoldKept = holdKept
