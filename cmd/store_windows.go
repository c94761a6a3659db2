package cmd

import "github.com/semrun/semrun/internal/semaphore"

// openLocal refuses the local store, which Windows does not have: it is
// built on flock(2), where a lock the child inherits keeps the permit held
// and a lock file can be unlinked while held. LockFileEx locks belong to
// the process that took them, and an open file cannot be removed, so a
// port would be another store, not this one.
func (c *commonOptions) openLocal(func(string, ...any), names) (semaphore.Store, error) {
	return nil, usageErrorf("%s is not supported on Windows; use Redis (%s)", c.src.name("local"), c.src.name("redis"))
}
