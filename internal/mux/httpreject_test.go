package mux

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestHTTPRejectResponse(t *testing.T) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(httpRejectResponse)), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || !resp.Close || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		resp.ContentLength != int64(len(body)) || !strings.Contains(string(body), "warren protocol") {
		t.Fatalf("%+v %q", resp, body)
	}
	if !bytes.HasSuffix(httpRejectResponse, body) {
		t.Fatal("bytes after the body")
	}
}
