package httpbody

import (
	"strings"
	"testing"
)

// FuzzSmuggleScan checks the smuggling guard's header scan: it never
// panics, it does not depend on how the bytes are cut into reads, it
// refuses exactly the header blocks with both Content-Length and
// Transfer-Encoding, and it skips a body of the declared length.
func FuzzSmuggleScan(f *testing.F) {
	for _, s := range []string{
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 15\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\ntransfer-encoding : chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		k := int(cut) % (len(data) + 1)
		var whole, split Guard
		okWhole := whole.scan(data)
		okSplit := split.scan(data[:k])
		if okSplit {
			okSplit = split.scan(data[k:])
		}
		if okWhole != okSplit || (okWhole && (whole.state != split.state || whole.skip != split.skip)) {
			t.Fatalf("whole: %v %d %d; cut at %d: %v %d %d", okWhole, whole.state, whole.skip, k, okSplit, split.state, split.skip)
		}
		// The first header block decides alone.
		end := strings.Index(string(data), "\r\n\r\n")
		if end < 0 || end > maxGuardHeader {
			return
		}
		lower := strings.ToLower(string(data[:end]))
		var first Guard
		if first.scan(data[:end+4]) && hasHeader(lower, "content-length") && hasHeader(lower, "transfer-encoding") {
			t.Fatalf("%q: both headers, not refused", data[:end+4])
		}
	})
}

// hasHeader reports whether the lower-case header block h has a line
// "name:" (with optional spaces before the colon).
func hasHeader(h, name string) bool {
	for _, line := range strings.Split(h, "\r\n") {
		n, _, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}
