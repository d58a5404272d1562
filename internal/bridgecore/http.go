package bridgecore

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/warrenipc/warren/codec"
)

// Header values (shared: net/http does not modify them).
var (
	CTJSON       = []string{"application/json"}
	CTProto      = []string{"application/proto"}
	CTRaw        = []string{"application/octet-stream"}
	HdrClose     = []string{"close"}
	HdrAllowPost = []string{"POST"}
	HdrGzip      = []string{"gzip"}
)

// Encoding is what a request's Content-Type asks for.
type Encoding struct {
	Codec  uint8 // codec.IDJSON, IDProto or IDRaw
	Stream bool  // Connect streaming
}

// ContentType returns the reply content type of a unary call in e.
func (e Encoding) ContentType() []string {
	switch e.Codec {
	case codec.IDProto:
		return CTProto
	case codec.IDRaw:
		return CTRaw
	}
	return CTJSON
}

// ParseContentType maps a request's Content-Type in the Connect protocol to
// an encoding. No type, and the form type curl sends with -d, are read as
// JSON. ok is false for the types of other protocols and unknown ones.
func ParseContentType(ct string) (e Encoding, ok bool) {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	eq := strings.EqualFold
	switch {
	case mt == "" || eq(mt, "application/json") || eq(mt, "application/x-www-form-urlencoded"):
		return Encoding{Codec: codec.IDJSON}, true
	case eq(mt, "application/proto"):
		return Encoding{Codec: codec.IDProto}, true
	case eq(mt, "application/octet-stream"):
		return Encoding{Codec: codec.IDRaw}, true
	case eq(mt, "application/connect+json"):
		return Encoding{Codec: codec.IDJSON, Stream: true}, true
	case eq(mt, "application/connect+proto"):
		return Encoding{Codec: codec.IDProto, Stream: true}, true
	}
	return Encoding{}, false
}

// IsGRPC reports whether ct, a request's Content-Type, is one of gRPC or
// gRPC-Web (binary or text).
func IsGRPC(ct string) bool {
	return len(ct) >= len("application/grpc") && strings.EqualFold(ct[:len("application/grpc")], "application/grpc")
}

// Identity reports whether a Content-Encoding value is the identity.
func Identity(enc string) bool { return enc == "" || strings.EqualFold(enc, "identity") }

// AcceptsGzip reports whether an Accept-Encoding value lists gzip.
func AcceptsGzip(accept string) bool {
	for accept != "" {
		var tok string
		tok, accept, _ = strings.Cut(accept, ",")
		tok, _, _ = strings.Cut(tok, ";")
		if strings.EqualFold(strings.TrimSpace(tok), "gzip") {
			return true
		}
	}
	return false
}

// Forwarded reports whether a request header (canonical key) becomes
// call metadata: all but the hop-by-hop headers and those of the Connect
// and gRPC protocols and of the body.
func Forwarded(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Accept-Encoding", "Host":
		return false
	}
	return !strings.HasPrefix(k, "Content-") && !strings.HasPrefix(k, "Connect-") && !strings.HasPrefix(k, "Grpc-")
}

// SetMetadataHeaders adds metadata pairs to h as headers, their names
// prefixed with prefix ("Trailer-" for the trailers of a unary call).
// Names that are not valid header names or that belong to the protocol are
// left out.
func SetMetadataHeaders(h http.Header, pairs []string, prefix string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		k := http.CanonicalHeaderKey(pairs[i])
		if !validHeaderName(k) || !Forwarded(k) || strings.HasPrefix(k, "Trailer-") {
			continue
		}
		h[prefix+k] = append(h[prefix+k], pairs[i+1])
	}
}

// validHeaderName reports whether k is an HTTP token (RFC 9110).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// contentLengths holds the Content-Length header values of bodies up to
// 4 KiB, made once each: net/http does not modify a header value, so
// replies share them.
var contentLengths [4<<10 + 1]atomic.Pointer[[]string]

// ContentLength returns the Content-Length header value for n bytes.
func ContentLength(n int) []string {
	if n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}
