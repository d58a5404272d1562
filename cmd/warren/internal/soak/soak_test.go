package soak

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv makes the test binary act as `warren bench` for the processes
// the soak starts.
const childEnv = "WARREN_SOAK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" && len(os.Args) > 2 && os.Args[1] == "bench" {
		if err := Main(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestSoakShort runs the soak for 4 s and checks its report.
func TestSoakShort(t *testing.T) {
	t.Setenv(childEnv, "1")
	var out, errs bytes.Buffer
	err := Main([]string{"soak", "--duration", "4s", "--clients", "2", "--workers", "4", "--kill-every", "500ms"}, &out, &errs)
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, errs.String())
	}
	for _, want := range []string{"lost 0 duplicated 0", "outcomes: ok ", "resource_exhausted", "deadline_exceeded", "canceled", "server       start    peak     end"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	_ = time.Second
}
