//go:build unix && !linux

package keeper

import "errors"

// pidfdOpen: there are no pidfds here.
func pidfdOpen(int) (int, error) { return -1, errors.ErrUnsupported }
