package semaphore

// CheckStatus is how one of a store's doctor checks came out.
type CheckStatus string

// A check that fails means semrun would break (a run fails, or more than N
// could hold a key); a warning means it works, with a cost worth knowing; a
// skipped check could not run because another one failed.
const (
	CheckOK   CheckStatus = "ok"
	CheckWarn CheckStatus = "warn"
	CheckFail CheckStatus = "fail"
	CheckSkip CheckStatus = "skip"
)

// Check is the outcome of one check of a store (see Store.Doctor).
type Check struct {
	// Name is what was checked: "latency", "maxmemory-policy", ...
	Name   string      `json:"check"`
	Status CheckStatus `json:"status"`
	// Detail says what was found, and why it matters.
	Detail string `json:"detail"`
	// Fix says how to mend a problem; empty when there is none.
	Fix string `json:"fix"`
}
