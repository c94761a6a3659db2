package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInOrder: the line part's order column counts a grant out of place
// against the line's order, priority first, then arrival.
func TestInOrder(t *testing.T) {
	for _, c := range []struct {
		name, lines, want string
	}{
		{"arrival", "0 0 7\n1 0 8\n2 0 9\n", "yes"},
		{"arrival broken", "0 0 8\n1 0 7\n2 0 9\n", "no: 2 of 3 out of place"},
		{"priority", "0 -5 9\n1 3 7\n2 3 8\n", "yes"},
		{"priority broken", "0 -5 7\n1 3 8\n2 3 9\n", "no: 3 of 3 out of place"},
		{"equal priorities by arrival", "0 3 8\n1 3 7\n2 -5 9\n", "no: 2 of 3 out of place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "order")
			if err := os.WriteFile(path, []byte(c.lines), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := inOrder(path, 3)
			if err != nil || got != c.want {
				t.Fatalf("inOrder = %q, %v; want %q", got, err, c.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "order")
	if err := os.WriteFile(path, []byte("0 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := inOrder(path, 2); err == nil {
		t.Fatal("inOrder of 1 child for 2: no error")
	}
}

// TestLinePriority: the mixed side spreads its waiters over -100..100.
func TestLinePriority(t *testing.T) {
	seen := map[int]bool{}
	for i := range 201 {
		p := linePriority(i)
		if p < -100 || p > 100 {
			t.Fatalf("linePriority(%d) = %d, outside -100..100", i, p)
		}
		seen[p] = true
	}
	if len(seen) != 201 {
		t.Fatalf("201 waiters got %d priorities, want every one of -100..100", len(seen))
	}
}
