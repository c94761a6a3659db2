package localstore_test

import (
	"os"
	"testing"

	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

func TestMain(m *testing.M) { os.Exit(semaphoretest.Main(m)) }
