package bridgecore

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/codec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAcceptsGzip(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "gzip": true, "GZIP": true, "br, gzip;q=0.5": true, "gzipx": false, "identity": false, " gzip ": true,
	} {
		if got := AcceptsGzip(v); got != want {
			t.Errorf("AcceptsGzip(%q) = %v", v, got)
		}
	}
}

func TestParseContentType(t *testing.T) {
	for ct, want := range map[string]Encoding{
		"":                                  {Codec: codec.IDJSON},
		"application/json; charset=utf-8":   {Codec: codec.IDJSON},
		"application/x-www-form-urlencoded": {Codec: codec.IDJSON},
		"Application/Proto":                 {Codec: codec.IDProto},
		"application/octet-stream":          {Codec: codec.IDRaw},
		"application/connect+proto":         {Codec: codec.IDProto, Stream: true},
	} {
		if got, ok := ParseContentType(ct); !ok || got != want {
			t.Errorf("ParseContentType(%q) = %v %v", ct, got, ok)
		}
	}
	for _, ct := range []string{"application/grpc", "text/xml"} {
		if _, ok := ParseContentType(ct); ok {
			t.Errorf("ParseContentType(%q) accepted", ct)
		}
	}
	if !IsGRPC("application/grpc-web-text+proto") || IsGRPC("application/json") {
		t.Error("IsGRPC")
	}
}
