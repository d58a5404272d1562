package rpc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/warrenipc/warren/rpc"
)

// bigReq asks T.Big for a reply of N bytes of text.
type bigReq struct {
	N int `json:"n"`
}

type bigReply struct {
	Text string `json:"text"`
}

// TestConnectUnaryAgrees runs one table of Connect unary requests over
// HTTP/1.1 and HTTP/2 (prior knowledge), with and without the bridge: the
// answers (status, code, message, compression) are the same in all four.
func TestConnectUnaryAgrees(t *testing.T) {
	const threshold = 1024 // bridgecore.CompressMinBytes
	type tc struct {
		name   string
		header []string // extra request headers, key, value pairs
		n      int      // reply text length
		gzBody bool     // the request body gzipped
		status int
		code   string // Connect error code, "" for success
		msg    string // error message
		gzip   bool   // the reply is gzipped
	}
	cases := []tc{
		{name: "no timeout", status: 200},
		{name: "timeout", header: []string{"Connect-Timeout-Ms", "5000"}, status: 200},
		{name: "timeout 0", header: []string{"Connect-Timeout-Ms", "0"}, status: 504, code: "deadline_exceeded",
			msg: "the deadline (Connect-Timeout-Ms: 0) has passed"},
		{name: "timeout negative", header: []string{"Connect-Timeout-Ms", "-5"}, status: 400, code: "invalid_argument",
			msg: `Connect-Timeout-Ms: "-5" is negative`},
		{name: "timeout garbage", header: []string{"Connect-Timeout-Ms", "soon"}, status: 400, code: "invalid_argument",
			msg: `Connect-Timeout-Ms: "soon" is not a number of milliseconds`},
		{name: "timeout huge", header: []string{"Connect-Timeout-Ms", "12345678901"}, status: 400, code: "invalid_argument",
			msg: `Connect-Timeout-Ms: "12345678901" is not 1 to 10 digits`},
		{name: "timeout 10 digits", header: []string{"Connect-Timeout-Ms", "9999999999"}, status: 200},
		{name: "protocol version", header: []string{"Connect-Protocol-Version", "2"}, status: 400, code: "invalid_argument",
			msg: `Connect-Protocol-Version "2" is not supported (want 1)`},
		{name: "compression unknown", header: []string{"Content-Encoding", "br"}, status: 501, code: "unimplemented",
			msg: `unknown compression "br": supported encodings are gzip`},
		{name: "gzip accepted, large", header: []string{"Accept-Encoding", "gzip"}, n: threshold, status: 200, gzip: true},
		{name: "gzip accepted, small", header: []string{"Accept-Encoding", "gzip"}, n: threshold - 30, status: 200},
		{name: "gzip accepted among others", header: []string{"Accept-Encoding", "br, gzip;q=0.5"}, n: 1 << 20, status: 200, gzip: true},
		{name: "gzip not accepted", n: 1 << 20, status: 200},
		{name: "gzip request", header: []string{"Content-Encoding", "gzip"}, gzBody: true, n: 5000, status: 200, gzip: true},
		{name: "gzip request, small reply", header: []string{"Content-Encoding", "gzip"}, gzBody: true, n: 10, status: 200},
		{name: "gzip request not gzipped", header: []string{"Content-Encoding", "gzip"}, status: 400, code: "invalid_argument",
			msg: "the gzipped request body is malformed: unexpected EOF"},
	}
	for _, bridge := range []bool{false, true} {
		opts := &rpc.ServerOptions{}
		if bridge {
			opts = bridged(opts)
		}
		e := startHTTP(t, opts, func(srv *rpc.Server) {
			rpc.Handle(srv, "T.Big", func(ctx context.Context, req *bigReq) (*bigReply, error) {
				return &bigReply{Text: strings.Repeat("x", req.N)}, nil
			})
		})
		for _, h2 := range []bool{false, true} {
			tr := &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", e.path)
			}}
			if h2 {
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			defer tr.CloseIdleConnections()
			e.hc = &http.Client{Transport: tr}
			for _, c := range cases {
				name := map[bool]string{false: "http1", true: "h2"}[h2] + "/" + map[bool]string{false: "plain", true: "bridge"}[bridge] + "/" + c.name
				t.Run(name, func(t *testing.T) {
					// The reply {"text":"x..."} is n+11 bytes.
					body, _ := json.Marshal(bigReq{N: max(0, c.n-11)})
					if c.gzBody {
						var b bytes.Buffer
						zw := gzip.NewWriter(&b)
						zw.Write(body)
						zw.Close()
						body = b.Bytes()
					}
					r := e.do(t, "POST", "/T.Big", "application/json", body, c.header...)
					if r.status != c.status {
						t.Fatalf("reply %v, want HTTP %d", r, c.status)
					}
					if c.code != "" {
						ce := wantError(t, r, c.status, c.code)
						if ce.Message != c.msg {
							t.Fatalf("message %q, want %q", ce.Message, c.msg)
						}
						return
					}
					enc := r.header.Get("Content-Encoding")
					if c.gzip != (enc == "gzip") || (!c.gzip && enc != "") {
						t.Fatalf("Content-Encoding %q with %d bytes, want gzip %v", enc, len(r.body), c.gzip)
					}
					out := r.body
					if c.gzip {
						zr, err := gzip.NewReader(bytes.NewReader(r.body))
						if err != nil {
							t.Fatal(err)
						}
						if out, err = io.ReadAll(zr); err != nil {
							t.Fatal(err)
						}
					}
					var got bigReply
					if err := json.Unmarshal(out, &got); err != nil || len(out) != max(11, c.n) {
						t.Fatalf("reply of %d bytes (%v), want %d", len(out), err, max(11, c.n))
					}
				})
			}
		}
	}
}

// TestNoBridge checks what a server without the bridge answers to the
// requests only the bridge serves: each in its own protocol, at once.
func TestNoBridge(t *testing.T) {
	e := startHTTP(t, nil, nil)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.path)
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.Protocols.SetHTTP1(true)
	defer tr.CloseIdleConnections()
	h2 := &http.Client{Transport: tr}
	const hint = "turn it on with rpc.ServerOptions{Bridge: grpcbridge.New()}"
	for _, ct := range []string{"application/grpc", "application/grpc+proto", "application/grpc-web+proto", "application/grpc-web-text"} {
		for _, hc := range []*http.Client{e.hc, h2} {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://warren/warren.counter.v1.Counter/Get", strings.NewReader("\x00\x00\x00\x00\x00"))
			req.Header.Set("Content-Type", ct)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "12" || !strings.Contains(resp.Header.Get("Grpc-Message"), "does not serve gRPC") ||
				!strings.Contains(resp.Header.Get("Grpc-Message"), "grpcbridge.New()") {
				t.Fatalf("%s over HTTP/%d: %d %v", ct, resp.ProtoMajor, resp.StatusCode, resp.Header)
			}
		}
	}
	// Connect streaming: an end-of-stream message with the error.
	r := e.do(t, "POST", "/Counter.Watch", "application/connect+json", envelope(0, `{"name":"a"}`))
	if r.status != 200 || len(r.body) < 5 || r.body[0] != 2 {
		t.Fatalf("Connect streaming: %v", r)
	}
	var end struct {
		Error connectErr `json:"error"`
	}
	if err := json.Unmarshal(r.body[5:], &end); err != nil || end.Error.Code != "unimplemented" ||
		end.Error.Message != "this server does not serve Connect streaming: "+hint {
		t.Fatalf("Connect streaming: %s (%v)", r.body, err)
	}
	// Connect GET.
	ce := wantError(t, e.do(t, "GET", "/Counter.Get?encoding=json&message=%7B%7D", "", nil), 405, "unimplemented")
	if !strings.Contains(ce.Message, "does not serve Connect GET") {
		t.Fatalf("Connect GET: %q", ce.Message)
	}
	// Another content type: 415, naming what is accepted.
	r = e.do(t, "POST", "/Counter.Get", "text/xml", []byte("<a/>"))
	if r.status != 415 || r.header.Get("Accept-Post") != "application/json, application/proto" ||
		!strings.Contains(string(r.body), "need rpc.ServerOptions{Bridge: grpcbridge.New()}") {
		t.Fatalf("text/xml: %v %v", r, r.header)
	}
	// Health and reflection are the bridge's: without it, unknown methods.
	wantError(t, e.post(t, "/grpc.health.v1.Health/Check", `{}`), 404, "unimplemented")
}

// TestUnsupportedContentType checks the 415 for a content type no protocol
// uses, with the bridge on: the types it names include the bridge's.
func TestUnsupportedContentType(t *testing.T) {
	e := startHTTP(t, bridged(nil), nil)
	r := e.do(t, "POST", "/Counter.Get", "text/xml", []byte("<a/>"))
	if r.status != 415 || !strings.Contains(r.header.Get("Accept-Post"), "application/grpc") ||
		!strings.Contains(string(r.body), `unsupported Content-Type "text/xml"`) {
		t.Fatalf("text/xml: %v %v", r, r.header)
	}
}
