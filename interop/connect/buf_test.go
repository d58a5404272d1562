package connect_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// bufPath returns the buf binary installed by 'npm ci' in buf/ (or named
// by $BUF). Without it the test is skipped, unless WARREN_REQUIRE_TOOLS is
// set (as in CI).
func bufPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("BUF")
	if p == "" {
		p = filepath.Join("buf", "node_modules", ".bin", "buf")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatalf("buf is required (WARREN_REQUIRE_TOOLS is set): %v (cd interop/connect/buf && npm ci)", err)
		}
		t.Skipf("no buf (cd interop/connect/buf && npm ci): %v", err)
	}
	return p
}

// TestBufCurl lists and calls the counter service with buf curl through
// server reflection over a unix socket: no local schema.
func TestBufCurl(t *testing.T) {
	buf := bufPath(t)
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
	counter.New().Register(srv)
	path := filepath.Join(t.TempDir(), "b.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()

	curl := func(args ...string) (string, error) {
		out, err := exec.Command(buf, append([]string{"curl", "--unix-socket", path}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := curl("--http2-prior-knowledge", "--list-methods", "http://warren")
	if err != nil || !strings.Contains(out, "warren.counter.v1.Counter/Watch\n") || !strings.Contains(out, "grpc.health.v1.Health/Check\n") {
		t.Fatalf("list-methods: %v\n%s", err, out)
	}
	for _, proto := range []string{"connect", "grpc", "grpcweb"} {
		out, err = curl("--http2-prior-knowledge", "--protocol", proto, "-d", `{"name":"b","value":"9007199254740993"}`,
			"http://warren/warren.counter.v1.Counter/Set")
		var e struct{ Name, Value string }
		if err != nil || json.Unmarshal([]byte(out), &e) != nil || e.Value != "9007199254740993" {
			t.Fatalf("%s Set: %v\n%s", proto, err, out)
		}
	}
	out, err = curl("-d", `{"name":"nope"}`, "http://warren/warren.counter.v1.Counter/Get") // HTTP/1.1
	if err == nil || !strings.Contains(out, "not_found") {
		t.Fatalf("Get of a missing counter: %v\n%s", err, out)
	}
}
