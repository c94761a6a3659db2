package keeper

import (
	"errors"
	"os"
)

// There is no keeper on Windows, where semrun acquire holds nothing.
var errNoKeeper = errors.New("no keeper on Windows")

// ErrNoProcess means no process has the pid asked for.
var ErrNoProcess = errors.New("no such process")

func Start(string, string, []string, *Owner) (*Started, error) { return nil, errNoKeeper }

func (k *Started) Kill() {}

func Adopt() (*Parent, error) { return nil, errNoKeeper }

func Settle() error { return errNoKeeper }

// Owner is --owner-pid's process: none here.
type Owner struct{}

func FindOwner(int) (*Owner, error) { return nil, errNoKeeper }

func (p *Parent) owner() *Owner { return &Owner{} }
func (o *Owner) file() *os.File { return nil }
func (o *Owner) HasFD() bool    { return false }
func (o *Owner) Close()         {}
func (o *Owner) exited() bool   { return false }
