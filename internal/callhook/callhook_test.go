package callhook

import "testing"

func TestProtocolOf(t *testing.T) {
	for ct, want := range map[string]string{
		"application/grpc":          "grpc",
		"application/grpc+proto":    "grpc",
		"application/grpc-web":      "grpc_web",
		"application/grpc-web-text": "grpc_web",
		"application/connect+json":  "connect_rpc",
		"application/proto":         "connect_rpc",
		"":                          "connect_rpc",
	} {
		if got := ProtocolOf(ct).System(); got != want {
			t.Errorf("ProtocolOf(%q) = %s, want %s", ct, got, want)
		}
	}
	if got := Warren.System(); got != "warren" {
		t.Errorf("Warren.System() = %s", got)
	}
}

func FuzzProtocolOf(f *testing.F) {
	f.Add("application/grpc-web+proto")
	f.Fuzz(func(t *testing.T, ct string) {
		if p := ProtocolOf(ct); p > GRPCWeb || p == Warren {
			t.Fatalf("ProtocolOf(%q) = %d", ct, p)
		}
	})
}
