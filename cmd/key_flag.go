package cmd

import "fmt"

// keyValue is --key's value. A run holds one key: a second -k on one
// command line would otherwise win over the first in silence, and the
// command would run without the key the user asked for first.
type keyValue struct {
	key *string
	set bool
}

func newKey(p *string) *keyValue { return &keyValue{key: p} }

func (k *keyValue) Set(s string) error {
	if k.set {
		return fmt.Errorf("given twice (%q, then %q): a run holds one key", *k.key, s)
	}
	*k.key, k.set = s, true
	return nil
}

func (k *keyValue) Type() string   { return "string" }
func (k *keyValue) String() string { return *k.key }
