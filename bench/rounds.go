package main

import (
	"fmt"
	"math/rand/v2"
)

// plan keeps the lockers that have rounds to run, n each, but semN for GNU
// sem, which is slow: the lockers kept and their rounds, side by side.
func plan(ls []*locker, n, semN int) ([]*locker, []int) {
	var kept []*locker
	var rounds []int
	for _, l := range ls {
		k := n
		if l.name == "GNU sem" {
			k = semN
		}
		if k > 0 {
			kept, rounds = append(kept, l), append(rounds, k)
		}
	}
	return kept, rounds
}

// measureRounds runs rounds[i] rounds of round under ls[i], interleaved:
// in each round every locker with rounds left runs once, in a random
// order, so that noise falls on all alike. It returns each locker's
// results, in the order they came, and stops at the first error.
func measureRounds[R any](ls []*locker, rounds []int, round func(*locker) (R, error)) ([][]R, error) {
	out := make([][]R, len(ls))
	most := 0
	for _, n := range rounds {
		most = max(most, n)
	}
	for r := range most {
		for _, i := range rand.Perm(len(ls)) {
			if r >= rounds[i] {
				continue
			}
			res, err := round(ls[i])
			if err != nil {
				return out, fmt.Errorf("%s: %w", ls[i].name, err)
			}
			out[i] = append(out[i], res)
		}
	}
	return out, nil
}
