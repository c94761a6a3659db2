package semaphore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/semrun/semrun/internal/semaphore"
)

func ExampleCheckKey() {
	for _, key := range []string{
		"nightly-backup",
		"{tenant}/job:%d",
		"",
		"a\tb",
		"\xff",
		strings.Repeat("k", semaphore.MaxKeyLen+1),
	} {
		if err := semaphore.CheckKey(key); err != nil {
			fmt.Printf("%.12q: %v\n", key, err)
			continue
		}
		fmt.Printf("%q: ok\n", key)
	}
	// Output:
	// "nightly-backup": ok
	// "{tenant}/job:%d": ok
	// "": must not be empty
	// "a\tb": contains the control character U+0009
	// "\xff": is not valid UTF-8
	// "kkkkkkkkkkkk": is 201 bytes long, at most 200 allowed
}

func TestCheckKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"a":                                      true,
		"é{ü}%7B":                                true,
		"with space":                             true,
		strings.Repeat("k", semaphore.MaxKeyLen): true,
		strings.Repeat("é", semaphore.MaxKeyLen/2):   true,
		strings.Repeat("k", semaphore.MaxKeyLen+1):   false,
		strings.Repeat("é", semaphore.MaxKeyLen/2+1): false,
		"":       false,
		"a\nb":   false,
		"a\x00b": false,
		"\x7f":   false,
		"\u0085": false,
		"a\xc3":  false,
	} {
		if err := semaphore.CheckKey(key); (err == nil) != ok {
			t.Errorf("CheckKey(%q): got %v, want ok=%v", key, err, ok)
		}
	}
}
