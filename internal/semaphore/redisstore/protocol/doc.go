// Package protocol is what the Redis store and its Lua scripts say to
// each other: the scripts (*.lua, lib.lua first in each), the keys of a
// semaphore and its waiters' wake lists, each script's arguments and
// reply as Go types, the records the scripts write (holder, waiter,
// turn), the events they log and the counters they keep (events.go), the
// errors a script raises at a limit, and the limits both sides check,
// which the scripts read from the Go constants (limits.go).
// A mistake here can admit more than N holders: the store never writes
// an ARGV, or reads a reply or a record, itself.
package protocol
