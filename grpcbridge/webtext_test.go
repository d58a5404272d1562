package grpcbridge_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// webTextExchange sends a literal HTTP/1.1 request on a new connection, as
// curl would, and returns the response, its body to be read by the caller.
func webTextExchange(t *testing.T, path, req string) (*http.Response, func()) {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, func() { resp.Body.Close(); conn.Close() }
}

func webTextPost(method, timeout, body string) string {
	return webTextPostAs("application/grpc-web-text", method, timeout, body)
}

func webTextPostAs(ct, method, timeout, body string) string {
	h := "POST /warren.counter.v1.Counter/" + method + " HTTP/1.1\r\nHost: warren\r\nContent-Type: " + ct + "\r\n"
	if timeout != "" {
		h += "Grpc-Timeout: " + timeout + "\r\n"
	}
	return h + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// TestGRPCWebText calls the counter service in gRPC-Web text
// (application/grpc-web-text: gRPC-Web frames in base64) with literal
// requests over HTTP/1.1, unary and server-streaming, and checks the
// literal responses: each message and the trailers in a base64 chunk of
// their own, padded.
func TestGRPCWebText(t *testing.T) {
	e := startHTTP(t, nil, nil)
	c := e.setCounter(t, "a", 7)
	ctx := context.Background()

	// Counter.Get {name: "a"}: the frame 00 00000003 0a0161, in base64;
	// then the same frame as two padded chunks (header, then message).
	for _, tc := range []struct{ ct, body string }{
		{"application/grpc-web-text", "AAAAAAMKAWE="},
		{"application/grpc-web-text", "AAAAAAM=CgFh"},
		{"application/grpc-web-text+proto", "AAAAAAMKAWE="},
	} {
		resp, done := webTextExchange(t, e.path, webTextPostAs(tc.ct, "Get", "", tc.body))
		b, err := io.ReadAll(resp.Body)
		done()
		// {name: "a", value: 7}, then the trailers "grpc-status: 0\r\n".
		const want = "AAAAAAUKAWEQBw==" + "gAAAABBncnBjLXN0YXR1czogMA0K"
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ct || string(b) != want {
			t.Fatalf("Get with %q: %d %v %q %v", tc.body, resp.StatusCode, resp.Header, b, err)
		}
	}
	// JSON: {"name":"a"} in, {"name":"a","value":"7"} out.
	body := base64.StdEncoding.EncodeToString(append([]byte{0, 0, 0, 0, 12}, `{"name":"a"}`...))
	resp, done := webTextExchange(t, e.path, webTextPostAs("application/grpc-web-text+json", "Get", "", body))
	b, err := io.ReadAll(resp.Body)
	done()
	if err != nil || resp.Header.Get("Content-Type") != "application/grpc-web-text+json" ||
		!strings.HasPrefix(string(b), base64.StdEncoding.EncodeToString(append([]byte{0, 0, 0, 0, 24}, `{"name":"a","value":"7"}`...))) {
		t.Fatalf("Get in JSON: %d %v %q %v", resp.StatusCode, resp.Header, b, err)
	}

	// Counter.Watch {name: "a"} for 500 ms: the current value, the one an
	// increment sets, then deadline_exceeded.
	resp, done = webTextExchange(t, e.path, webTextPost("Watch", "500m", "AAAAAAMKAWE="))
	defer done()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc-web-text" {
		t.Fatalf("Watch: %d %v", resp.StatusCode, resp.Header)
	}
	first := make([]byte, 16)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "AAAAAAUKAWEQBw==" {
		t.Fatalf("Watch, first message: %q %v", first, err)
	}
	if _, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// {name: "a", value: 8}, then the trailers.
	if !strings.HasPrefix(string(rest), "AAAAAAUKAWEQCA==gAAAA") {
		t.Fatalf("Watch, the rest: %q", rest)
	}
	trailer, err := base64.StdEncoding.DecodeString(string(rest[16:]))
	if err != nil || !strings.Contains(string(trailer), "grpc-status: 4\r\n") {
		t.Fatalf("Watch, trailers: %q %v", trailer, err)
	}

	// A body that is not base64 is invalid_argument, in a trailers-only
	// response.
	resp, done2 := webTextExchange(t, e.path, webTextPost("Get", "", "AAAA!AMKAWE="))
	defer done2()
	b, _ = io.ReadAll(resp.Body)
	if resp.Header.Get("Grpc-Status") != "3" || resp.Header.Get("Grpc-Message") != "the application/grpc-web-text body is not base64" || len(b) != 0 {
		t.Fatalf("bad base64: %d %v %q", resp.StatusCode, resp.Header, b)
	}
}
