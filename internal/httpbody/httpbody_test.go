package httpbody

import (
	"bytes"
	"compress/gzip"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// TestRead: a body within the limit is read whole and holds budget until
// released; one over the limit, declared or not, is ResourceExhausted.
func TestRead(t *testing.T) {
	body := strings.Repeat("x", 10<<10)
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	buf, n, se := Read(httptest.NewRecorder(), r, 1<<20)
	if se != nil || string(buf.B) != body || n < int64(len(body)) || held.Load() != n {
		t.Fatalf("read %d bytes holding %d (%d held in all), %v", len(buf.B), n, held.Load(), se)
	}
	pool.Put(buf)
	Release(n)
	if held.Load() != 0 {
		t.Fatalf("%d bytes held after Release", held.Load())
	}
	for _, declared := range []bool{true, false} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		if !declared {
			r.ContentLength = -1
		}
		if _, _, se := Read(httptest.NewRecorder(), r, 1<<10); se == nil || se.Code != status.ResourceExhausted {
			t.Fatalf("declared %v: over the limit: %v", declared, se)
		}
	}
	if held.Load() != 0 {
		t.Fatalf("%d bytes held after refusals", held.Load())
	}
}

// TestGunzip: a gzipped message within the limit comes back whole; a
// larger one, or one that is not gzip, is refused.
func TestGunzip(t *testing.T) {
	msg := bytes.Repeat([]byte("warren "), 1000)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(msg)
	zw.Close()
	buf, se := Gunzip(z.Bytes(), uint32(len(msg)))
	if se != nil || !bytes.Equal(buf.B, msg) {
		t.Fatalf("%d bytes, %v", len(buf.B), se)
	}
	pool.Put(buf)
	if _, se := Gunzip(z.Bytes(), uint32(len(msg)-1)); se == nil || se.Code != status.ResourceExhausted {
		t.Fatalf("over the limit: %v", se)
	}
	if _, se := Gunzip([]byte("not gzip"), 100); se == nil || se.Code != status.InvalidArgument {
		t.Fatalf("not gzip: %v", se)
	}
}

// TestReadUnknownLength: a body without Content-Length, small or larger
// than a Chunk, is read whole.
func TestReadUnknownLength(t *testing.T) {
	for _, size := range []int{10, Chunk, Chunk + 1, 5 * Chunk / 2} {
		body := strings.Repeat("y", size)
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = -1
		buf, n, se := Read(httptest.NewRecorder(), r, 1<<20)
		if se != nil || string(buf.B) != body {
			t.Fatalf("%d bytes: read %d, %v", size, len(buf.B), se)
		}
		pool.Put(buf)
		Release(n)
	}
	if held.Load() != 0 {
		t.Fatalf("%d bytes held after Release", held.Load())
	}
}
