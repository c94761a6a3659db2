package cmd

import (
	"errors"
	"strconv"
)

// intValue is a flag's whole number, with errors in the user's words
// rather than strconv's, from flags, variables and config files alike.
type intValue int

func newInt(p *int, value int) *intValue {
	*p = value
	return (*intValue)(p)
}

func (n *intValue) Set(s string) error {
	v, err := strconv.Atoi(s)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return errors.New("too large a number")
	case err != nil:
		return errors.New("not a whole number")
	}
	*n = intValue(v)
	return nil
}

// Type names the value in --help.
func (n *intValue) Type() string { return "int" }

func (n *intValue) String() string { return strconv.Itoa(int(*n)) }
