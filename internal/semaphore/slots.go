package semaphore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Slots say which of a key's permits a grant holds: their numbers, from 0
// to N-1, each held by one holder at a time, the lowest free taken first;
// and their names when an operator named the key's slots (Operator.SetSlots).
// A slot is a permit: it is freed, kept, cooled, lost or revoked exactly as
// the permit is. A key of more than MaxSlots permits numbers none.
type Slots struct {
	// Numbers are the slots held, in increasing order: as many as the
	// grant's weight, or none on a key of more than MaxSlots permits.
	Numbers []int `json:"slots,omitempty"`
	// Names are the Numbers' names, in their order; nil when the key's
	// slots have no names.
	Names []string `json:"slot_names,omitempty"`
}

// Bounds of slots.
const (
	// MaxSlots is the largest capacity whose permits are numbered: a
	// grant of a larger key holds no slot. It bounds what a child's
	// variables list (a grant's every slot) and what finding the lowest
	// free slots costs a store.
	MaxSlots = 1024
	// MaxSlotName bounds a slot's name, in characters.
	MaxSlotName = 200
)

// SlotNamesSetting is the names of a key's slots (Operator.SetSlots).
const SlotNamesSetting Setting = "slot names"

// Numbered tells whether grants of a key of capacity n hold slots.
func Numbered(n int) bool { return n >= 1 && n <= MaxSlots }

// NumbersText is the slots' numbers, comma-separated ("0,3"), as the
// child's SEMRUN_SLOTS says them; empty for none.
func (s Slots) NumbersText() string {
	parts := make([]string, len(s.Numbers))
	for i, n := range s.Numbers {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// NamesText is the slots' names, comma-separated (names hold no comma);
// empty for none.
func (s Slots) NamesText() string { return strings.Join(s.Names, ",") }

// ParseSlotNumbers reads slot numbers as NumbersText writes them: at most
// MaxSlots, each below MaxSlots, strictly increasing. A store reads back
// what anyone may have written with it: anything else is an error, and
// "" is none.
func ParseSlotNumbers(text string) ([]int, error) {
	if text == "" {
		return nil, nil
	}
	if len(text) > MaxSlots*5 {
		return nil, fmt.Errorf("slots %.40q...: too long", text)
	}
	parts := strings.Split(text, ",")
	if len(parts) > MaxSlots {
		return nil, fmt.Errorf("slots %.40q...: more than %d", text, MaxSlots)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= MaxSlots || (i > 0 && n <= out[i-1]) || p != strconv.Itoa(n) {
			return nil, fmt.Errorf("slots %.100q: not slot numbers in increasing order", text)
		}
		out[i] = n
	}
	return out, nil
}

// NamedSlots are the slots numbers with their names, as a store read
// them: names that are not one name a number (count, or a name that
// CheckSlotNames refuses) leave the slots unnamed rather than misnamed.
func NamedSlots(numbers []int, names []string) Slots {
	s := Slots{Numbers: numbers}
	if len(names) == len(numbers) && len(names) > 0 && checkNames(names, false) == nil {
		s.Names = names
	}
	return s
}

// CheckSlotNames refuses names of a key's slots no store should keep, with
// a *SettingError: none, more than MaxSlots, a name empty, longer than
// MaxSlotName characters, with a comma or a character that is not
// printable, or a name given twice.
func CheckSlotNames(names []string) error {
	if err := checkNames(names, true); err != nil {
		return &SettingError{Setting: SlotNamesSetting, Value: quoteShort(strings.Join(names, ",")), Err: err}
	}
	return nil
}

func checkNames(names []string, unique bool) error {
	switch {
	case len(names) == 0:
		return errors.New("names no slot")
	case len(names) > MaxSlots:
		return fmt.Errorf("names %d slots, at most %d allowed", len(names), MaxSlots)
	}
	for i, name := range names {
		switch {
		case name == "":
			return fmt.Errorf("slot %d has an empty name", i)
		case utf8.RuneCountInString(name) > MaxSlotName:
			return fmt.Errorf("slot %d's name is %d characters long, at most %d allowed", i, utf8.RuneCountInString(name), MaxSlotName)
		case strings.Contains(name, ","):
			return fmt.Errorf("slot %d's name %q holds a comma, which separates names", i, Clip(name, 40))
		case unique && slices.Contains(names[:i], name):
			return fmt.Errorf("slot name %q is given twice", Clip(name, 40))
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("slot %d's name is not valid UTF-8", i)
		}
		for _, r := range name {
			if !unicode.IsPrint(r) {
				return fmt.Errorf("slot %d's name holds %U, which is not printable", i, r)
			}
		}
	}
	return nil
}

// ParseSlotNames splits names as NamesText writes them.
func ParseSlotNames(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(text, ",")
}

// Named are numbers, slots of the key, with the names the key's slots
// have (SlotNames), when it has as many as a number needs.
func (k KeyStatus) Named(numbers []int) Slots { return NameSlots(numbers, k.SlotNames) }

// NameSlots are numbers, slots of a key, with their names from names, the
// key's slots' names, slot 0's first: named when every number has one,
// and they pass the checks of names read back (NamedSlots).
func NameSlots(numbers []int, names []string) Slots {
	named := make([]string, len(numbers))
	for i, n := range numbers {
		if n >= len(names) {
			return Slots{Numbers: numbers}
		}
		named[i] = names[n]
	}
	return NamedSlots(numbers, named)
}
