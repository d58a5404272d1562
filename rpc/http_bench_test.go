package rpc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// BenchmarkHTTPUnary measures a unary call over the HTTP bridge, server in
// this process, on a unix socket, one keep-alive connection per caller:
//
//	go test ./rpc -run '^$' -bench 'HTTP|Unary$' -benchmem
//
// client=raw writes a prepared HTTP/1.1 request and parses the reply with
// no allocation, so allocs/op is the server's alone: the bridge plus
// net/http's server. client=net-http is Go's http.Client (HTTPClient), as
// deployed; its allocations count too. raw/ calls Bench.Echo with
// application/octet-stream, the method BenchmarkUnary calls over warren;
// json/ calls a JSON method over HTTP and over warren, to compare.
func BenchmarkHTTPUnary(b *testing.B) {
	for _, size := range []int{128, 1024} {
		b.Run("raw/client=raw/size="+sizeName(size), func(b *testing.B) {
			runHTTPRaw(b, httpBenchPath(b), "/Bench.Echo", "application/octet-stream", make([]byte, size))
		})
	}
	for _, callers := range []int{1, 16} {
		for _, size := range []int{128, 1024} {
			b.Run(fmt.Sprintf("raw/client=net-http/callers=%d/size=%s", callers, sizeName(size)), func(b *testing.B) {
				runHTTPClient(b, httpBenchPath(b), "/Bench/Echo", "application/octet-stream", make([]byte, size), callers)
			})
		}
	}
	jsonReq := []byte(`{"name":"bench","by":1}`)
	b.Run("json/client=raw", func(b *testing.B) {
		runHTTPRaw(b, httpBenchPath(b), "/Bench.Inc", "application/json", jsonReq)
	})
	b.Run("json/client=net-http", func(b *testing.B) {
		runHTTPClient(b, httpBenchPath(b), "/Bench/Inc", "application/json", jsonReq, 1)
	})
	b.Run("json/client=warren", func(b *testing.B) {
		c := benchClient(b, httpBenchPath(b))
		ctx := context.Background()
		req := &benchInc{Name: "bench", By: 1}
		var resp benchCount
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := c.Invoke(ctx, "Bench.Inc", req, &resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type benchInc struct {
	Name string `json:"name"`
	By   int64  `json:"by"`
}

type benchCount struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// httpBenchPath serves benchServer, with Bench.Inc added, on a unix socket
// in this process and returns its path.
func httpBenchPath(b *testing.B) string {
	srv := benchServer()
	var mu sync.Mutex
	var n int64
	Handle(srv, "Bench.Inc", func(ctx context.Context, req *benchInc) (*benchCount, error) {
		mu.Lock()
		n += req.By
		v := n
		mu.Unlock()
		return &benchCount{Name: req.Name, Value: v}, nil
	})
	path := filepath.Join(b.TempDir(), "bench.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	b.Cleanup(func() { srv.Close(); <-done })
	return path
}

// runHTTPRaw calls path over one connection with a prepared request,
// reading each reply without allocating.
func runHTTPRaw(b *testing.B, path, url, ctype string, body []byte) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: warren\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", url, ctype, len(body), body)
	br := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 64<<10)
	call := func() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := readHTTPReply(br, buf); err != nil {
			b.Fatal(err)
		}
	}
	call()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call()
	}
}

// readHTTPReply reads a 200 reply with a Content-Length into buf.
func readHTTPReply(br *bufio.Reader, buf []byte) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("status line %q", line)
	}
	n := -1
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n = 0
			for _, c := range bytes.TrimSpace(v) {
				n = 10*n + int(c-'0')
			}
		}
	}
	if n < 0 || n > len(buf) {
		return fmt.Errorf("reply of %d bytes", n)
	}
	_, err = io.ReadFull(br, buf[:n])
	return err
}

// runHTTPClient calls path with HTTPClient from callers goroutines.
func runHTTPClient(b *testing.B, path, url, ctype string, body []byte, callers int) {
	hc := HTTPClient("unix://"+path, nil)
	hc.Transport.(*http.Transport).MaxIdleConnsPerHost = callers
	defer hc.CloseIdleConnections()
	length := strconv.Itoa(len(body))
	call := func(rd *bytes.Reader, buf []byte) error {
		rd.Reset(body)
		req, err := http.NewRequest("POST", "http://warren"+url, rd)
		if err != nil {
			return err
		}
		req.Header["Content-Type"] = []string{ctype}
		req.Header["Content-Length"] = []string{length}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.ReadFull(resp.Body, buf[:resp.ContentLength])
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return err
	}
	if err := call(bytes.NewReader(nil), make([]byte, 64<<10)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / callers
	for i := range callers {
		n := per
		if i == 0 {
			n += b.N % callers
		}
		wg.Go(func() {
			rd, buf := bytes.NewReader(nil), make([]byte, 64<<10)
			for range n {
				if err := call(rd, buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
