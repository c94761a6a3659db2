package semaphore

// SystemLockDir is the lock directory every user of a host shares when it is
// usable; see DefaultLockDir.
const SystemLockDir = "/run/lock/semrun"

// LocalOptions configure a host-local store.
type LocalOptions struct {
	// Dir is the lock directory; created (mode 0755) when missing, provided
	// its parent exists.
	Dir string
	// Warnf, when set, receives warnings (callers asking different capacities).
	Warnf func(format string, args ...any)
}
