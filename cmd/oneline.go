package cmd

import (
	"errors"
	"strings"
)

// oneLine joins the lines of a multi-line error (YAML's type errors) into
// one: semrun says each error in one line.
func oneLine(err error) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return err
	}
	var parts []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return errors.New(strings.Join(parts, " "))
}
