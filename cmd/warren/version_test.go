package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := run(args, nil, &out, &errb); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if s := out.String(); !strings.HasPrefix(s, "warren ") || !strings.Contains(s, runtime.Version()) {
			t.Errorf("%v: %q", args, s)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"version", "extra"}, nil, &out, &errb); code != exitUsage {
		t.Errorf("version extra: exit %d", code)
	}
}
