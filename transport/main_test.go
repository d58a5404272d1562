package transport_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaks a goroutine or, on Linux, a file
// descriptor.
func TestMain(m *testing.M) {
	files := openFiles()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if leaked := leakedFiles(files); code == 0 && len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leaked file descriptors: %v\n", leaked)
			code = 1
		}
		os.Exit(code)
	}))
}
