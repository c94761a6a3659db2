package cmd

import (
	"fmt"
	"slices"

	"github.com/semrun/semrun/internal/semaphore"
)

// keysValue is --key's value: a run or acquire may hold several keys
// (-k a -k b), the first of which is key. A key named twice is refused:
// it would otherwise wait for itself.
type keysValue struct {
	key  *string
	keys *[]string
}

func newKeys(key *string, keys *[]string) *keysValue { return &keysValue{key: key, keys: keys} }

func (k *keysValue) Set(s string) error {
	switch {
	case slices.Contains(*k.keys, s):
		return fmt.Errorf("named twice: each key once")
	case len(*k.keys) >= semaphore.MaxKeys:
		return fmt.Errorf("one key too many: at most %d at once", semaphore.MaxKeys)
	}
	*k.keys = append(*k.keys, s)
	*k.key = (*k.keys)[0]
	return nil
}

func (k *keysValue) Type() string   { return "string" }
func (k *keysValue) String() string { return *k.key }

// intsValue is the value of a number that may be given once for every
// key, or once per key (-n, --weight): each one given, in order, and the
// last as the number.
type intsValue struct {
	n    *intValue
	each *[]int
}

func newInts(p *int, value int, each *[]int) *intsValue {
	return &intsValue{n: newInt(p, value), each: each}
}

func (v *intsValue) Set(s string) error {
	if err := v.n.Set(s); err != nil {
		return err
	}
	*v.each = append(*v.each, int(*v.n))
	return nil
}

func (v *intsValue) Type() string   { return v.n.Type() }
func (v *intsValue) String() string { return v.n.String() }
