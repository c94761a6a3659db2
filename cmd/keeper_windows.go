package cmd

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// keeperArg: there is no keeper on Windows, where semrun acquire is refused.
const keeperArg = "keeper"

type keeperMessage struct{ Args []string }

func (m *keeperMessage) say(string) {}

var errNoHolds = errors.New("semrun acquire: not on Windows")

func readKeeperMessage() (*keeperMessage, error) { return nil, errNoHolds }

func (o *acquireOptions) startKeeper(context.Context, semaphore.Store, semaphore.Lease, time.Time) (semaphore.Handle, int, *os.File, error) {
	return semaphore.Handle{}, 0, nil, errNoHolds
}

const printedLine = "printed"

func (o *acquireOptions) keep(context.Context, semaphore.Store, *logger) error { return errNoHolds }

type owner struct{}

func findOwner(int) (*owner, error) { return nil, errNoHolds }
func (o *owner) close()             {}
