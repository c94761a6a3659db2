//go:build unix

package cmd

import (
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// openLocal opens the lock directory the settings name.
func (c *commonOptions) openLocal(warnf func(string, ...any), n names) (semaphore.Store, error) {
	s, err := localstore.New(localstore.Options{Dir: c.lockDirectory(), Warnf: warnf, Names: n, NoEvents: !c.events})
	if err != nil {
		return nil, c.refused(err)
	}
	return s, nil
}

// lockDirectory is the lock directory the settings name, or the default.
func (c *commonOptions) lockDirectory() string {
	if c.lockDir == "" && c.src.origin("lock-dir") == fromDefault {
		return localstore.DefaultDir()
	}
	return c.lockDir
}
