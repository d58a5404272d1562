package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestListProto prints the counter service as a .proto file through server
// reflection; protoc, when installed, compiles it.
func TestListProto(t *testing.T) {
	s := serveTemp(t)
	r := runCmd(t, nil, "", "list", "--proto", s.addr)
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, want := range []string{
		"syntax = \"proto3\";\n\npackage warren.counter.v1;\n",
		"service Counter {\n  rpc Set(SetRequest) returns (Entry);\n",
		"  rpc Watch(WatchRequest) returns (stream Entry);\n}\n",
		"message IncRequest {\n  string name = 1;\n  optional int64 by = 2;\n}\n",
		"message ListReply {\n  repeated Entry counters = 1;\n}\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "without a protobuf schema") {
		t.Fatalf("every counter method has a schema:\n%s", r.stdout)
	}
	if protoc, err := exec.LookPath("protoc"); err == nil {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "c.proto"), []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(protoc, "-I", dir, "--descriptor_set_out="+filepath.Join(dir, "c.pb"), "c.proto").CombinedOutput(); err != nil {
			t.Fatalf("protoc: %v\n%s", err, out)
		}
	}
	if r := runCmd(t, nil, "", "list", "--proto", "--json", s.addr); r.code != 2 {
		t.Fatalf("--proto --json: %v", r)
	}
}
