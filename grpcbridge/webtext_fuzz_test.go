package grpcbridge

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http/httptest"
	"testing"
)

// FuzzWebText checks the gRPC-Web text adapter. Encoding: data written in
// pieces, with flushes between some, decodes back to data, every flush
// ending a padded chunk. Decoding: any body either fails or gives what
// decoding each 4-character group alone gives, however it is read.
func FuzzWebText(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x05\x0a\x01a\x10\x07"), []byte{3, 0x85, 1}, []byte("AAAAAAM=CgFh"))
	f.Add([]byte{}, []byte{}, []byte("QQ==\r\nQUI="))
	f.Add(bytes.Repeat([]byte{0xff}, 800), []byte{100, 1, 0x80 | 7}, []byte("A==="))
	f.Fuzz(func(t *testing.T, data, cuts, body []byte) {
		rec := httptest.NewRecorder()
		w := &webTextWriter{w: rec}
		rest := data
		for _, c := range cuts {
			n := min(int(c&0x7f), len(rest))
			w.Write(rest[:n])
			rest = rest[n:]
			if c&0x80 != 0 {
				w.Flush()
				if rec.Body.Len()%4 != 0 {
					t.Fatalf("a flush left %d characters", rec.Body.Len())
				}
			}
		}
		w.Write(rest)
		w.finish()
		got, err := io.ReadAll(&webTextReader{r: bytes.NewReader(rec.Body.Bytes()), c: io.NopCloser(nil)})
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip of %x: %x %v (sent %q)", data, got, err, rec.Body.Bytes())
		}

		want, wantOK := decodeGroups(body)
		for _, size := range []int{1, 3, 4096} {
			r := &webTextReader{r: bytes.NewReader(body), c: io.NopCloser(nil)}
			var out []byte
			buf := make([]byte, size)
			for {
				n, err := r.Read(buf)
				out = append(out, buf[:n]...)
				if err == io.EOF {
					if !wantOK || !bytes.Equal(out, want) {
						t.Fatalf("%q read by %d: %x, want %x (valid %v)", body, size, out, want, wantOK)
					}
					break
				}
				if err != nil {
					if wantOK {
						t.Fatalf("%q read by %d: %v", body, size, err)
					}
					break
				}
			}
		}
	})
}

// decodeGroups decodes b, less its line breaks, as 4-character groups, each
// standard base64 alone.
func decodeGroups(b []byte) ([]byte, bool) {
	b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
	if len(b)%4 != 0 {
		return nil, false
	}
	var out []byte
	for i := 0; i < len(b); i += 4 {
		d, err := base64.StdEncoding.DecodeString(string(b[i : i+4]))
		if err != nil {
			return nil, false
		}
		out = append(out, d...)
	}
	return out, true
}
