package rpc_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoBridgeDependencies checks that package rpc imports neither
// connect-go nor gRPC, directly or not: they come with package grpcbridge,
// which a server opts into (ServerOptions.Bridge).
func TestNoBridgeDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "connectrpc.com/") || strings.HasPrefix(pkg, "google.golang.org/grpc") {
			t.Errorf("package rpc depends on %s", pkg)
		}
	}
}
