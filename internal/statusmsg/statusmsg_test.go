package statusmsg

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBound(t *testing.T) {
	if got := Bound("short"); got != "short" {
		t.Fatalf("short: %q", got)
	}
	exact := strings.Repeat("a", Max)
	if got := Bound(exact); got != exact {
		t.Fatal("a message of Max bytes was cut")
	}
	for _, long := range []string{strings.Repeat("a", 64<<10), strings.Repeat("é", 3000), "x" + strings.Repeat("日本", 1000)} {
		got := Bound(long)
		if len(got) > Max || !strings.HasSuffix(got, "... (truncated)") || !utf8.ValidString(got) || !strings.HasPrefix(long, strings.TrimSuffix(got, "... (truncated)")) {
			t.Errorf("Bound(%d bytes) = %d bytes %q", len(long), len(got), got[max(0, len(got)-40):])
		}
	}
}
