package main

import (
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDemo(t *testing.T) {
	var out strings.Builder
	addr := "unix://" + filepath.Join(t.TempDir(), "d.sock")
	if err := run([]string{"demo", "-addr", addr, "-calls", "500"}, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"serving on " + addr,
		`Demo.Hello: "hello, warren"`,
		"code invalid_argument",
		"methods: Demo.Hello Demo.Inc Warren.Methods",
		"counter = 500, failed = 0",
		"socket removed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUsage(t *testing.T) {
	var out strings.Builder
	if err := run(nil, &out); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("no command: %v", err)
	}
	if err := run([]string{"frobnicate"}, &out); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %v", err)
	}
	if err := run([]string{"demo", "-addr", "carrier-pigeon://x"}, &out); err == nil {
		t.Error("bad address accepted")
	}
}
