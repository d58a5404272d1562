package refusallog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSummaries(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	l := New(func() *slog.Logger { return logger }, "peer refused", 50*time.Millisecond)
	for i := 0; i < 10000; i++ {
		l.Refused("uid 65534", func() []any { return []any{"uid", 65534} })
	}
	l.Refused("uid 1", func() []any { return []any{"uid", 1} })
	time.Sleep(150 * time.Millisecond)
	l.Refused("uid 65534", func() []any { return []any{"uid", 65534} })
	l.Close()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (2 first refusals, 1 summary, 1 first refusal of the next interval):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(buf.String(), "more=9999") {
		t.Errorf("no summary of the 9999 more refusals:\n%s", buf.String())
	}
}

func TestKeysBounded(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	l := New(func() *slog.Logger { return logger }, "peer refused", time.Hour)
	for i := 0; i < 10*MaxKeys; i++ {
		key := strings.Repeat("k", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()
		l.Refused(key, func() []any { return nil })
	}
	l.Close()
	if n := strings.Count(buf.String(), "\n"); n > MaxKeys+2 {
		t.Fatalf("%d lines for %d keys, want at most %d", n, 10*MaxKeys, MaxKeys+2)
	}
	if !strings.Contains(buf.String(), "peer=other") {
		t.Errorf("no summary for the keys over the bound")
	}
}
