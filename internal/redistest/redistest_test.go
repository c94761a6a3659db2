package redistest

import (
	"strings"
	"testing"
)

// A server that cannot bind its port, which another test's server has,
// must fail to start: answered by the other server, its test would use
// that one, and lose it when the other test ends.
func TestStartNeverTakesAnotherServersPort(t *testing.T) {
	t.Parallel()
	other := New(t)
	s := &Server{Addr: other.Addr, dir: t.TempDir(), port: other.port}
	err := s.start()
	if err == nil {
		s.Stop()
		t.Fatalf("a second redis-server on %s: started, want an error", other.Addr)
	}
	if !strings.Contains(err.Error(), "exited") {
		t.Errorf("a second redis-server on %s: got %v, want it to have exited", other.Addr, err)
	}
}
