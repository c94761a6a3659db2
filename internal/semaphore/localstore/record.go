//go:build unix

package localstore

import (
	"encoding/json"
	"io"
	"os"

	"github.com/semrun/semrun/internal/semaphore"
)

// record is what a seat's or a waiter's file says about who holds or waits.
type record struct {
	semaphore.HolderInfo
	Permits int   `json:"permits"`
	Weight  int   `json:"weight"`
	Token   int64 `json:"token,omitempty"` // a waiter has none
	SinceMS int64 `json:"since_ms"`
}

// write puts r in f in place of what it said.
func (r record) write(f *os.File) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(b)))
}

// readRecord reads a record, bounded: a seat's file is anyone's in the
// group to write.
func readRecord(f *os.File) (record, error) {
	var r record
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 64<<10))
	if err != nil {
		return r, err
	}
	if len(b) == 0 {
		return r, io.EOF // taken or given back this instant
	}
	return r, json.Unmarshal(b, &r)
}
