//go:build unix

package localstore

// FirstSeat is the file a key's first seat is in: "seats" on Linux,
// "seat.0" elsewhere.
const FirstSeat = firstSeat
