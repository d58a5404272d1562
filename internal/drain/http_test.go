package drain

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// h2frame returns an HTTP/2 frame of type typ with payload p.
func h2frame(typ byte, p []byte) []byte {
	n := len(p)
	return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 1}, p...)
}

// goAwayAt returns the offset just past the header of the first GOAWAY in
// the frames of b, or -1: the reference the Tap's scan must agree with.
func goAwayAt(b []byte) int {
	for i := 0; i+9 <= len(b); {
		if b[i+3] == 0x7 {
			return i + 9
		}
		i += 9 + (int(b[i])<<16 | int(b[i+1])<<8 | int(b[i+2]))
	}
	return -1
}

// scanned feeds b to a new HTTP/2 Tap in pieces cut at cuts and returns
// after how many bytes it saw its GOAWAY, or -1.
func scanned(b []byte, cuts []int) int {
	t := &Tap{goAway: make(chan struct{})}
	t.h2.Store(true)
	fed := 0
	for _, c := range append(cuts, len(b)) {
		c = min(max(c, fed), len(b))
		t.scan(b[fed:c])
		fed = c
		select {
		case <-t.goAway:
			return fed
		default:
		}
	}
	return -1
}

func TestTapFindsGoAway(t *testing.T) {
	stream := bytes.Join([][]byte{
		h2frame(0x4, nil),                         // SETTINGS
		h2frame(0x0, bytes.Repeat([]byte{7}, 40)), // DATA full of 0x07
		h2frame(0x1, []byte{0x88}),                // HEADERS
		h2frame(0x7, []byte{0, 0, 0, 5, 0, 0, 0, 0}),
		h2frame(0x0, []byte("after")),
	}, nil)
	want := goAwayAt(stream)
	for cut := 0; cut <= len(stream); cut++ {
		got := scanned(stream, []int{cut})
		if cut >= want && got != cut || cut < want && got != len(stream) {
			t.Fatalf("cut at %d: GOAWAY seen after %d bytes, want after %d", cut, got, want)
		}
	}
	if got := scanned(stream[:want-1], nil); got != -1 {
		t.Fatalf("a truncated GOAWAY header was taken for one")
	}
}

func FuzzTapScan(f *testing.F) {
	f.Add(bytes.Join([][]byte{h2frame(0x4, nil), h2frame(0x7, []byte{0, 0, 0, 1, 0, 0, 0, 0})}, nil), uint16(3))
	f.Add([]byte{0, 0, 1, 0, 0, 0, 0, 0, 1, 7, 0, 0, 0, 7}, uint16(10))
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		want, got := goAwayAt(b), scanned(b, []int{int(cut) % (len(b) + 1)})
		if (want < 0) != (got < 0) || got >= 0 && got < want {
			t.Fatalf("GOAWAY seen after %d bytes, reference %d", got, want)
		}
	})
}

// TestHTTPOrder: GoAway waits for the Notice streams before it shuts the
// servers down, and closes GoneAway once the GOAWAY was written.
func TestHTTPOrder(t *testing.T) {
	var h HTTP
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tap := h.Track(a)
	sent := h.Notice()
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	go func() {
		time.Sleep(50 * time.Millisecond)
		note("notice")
		sent()
	}()
	var wg sync.WaitGroup
	h.GoAway(context.Background(), &wg) // no Server: nothing to shut down
	note("goaway")
	select {
	case <-h.GoneAway():
	default:
		t.Fatal("GoneAway not closed")
	}
	wg.Wait()
	if len(order) != 2 || order[0] != "notice" {
		t.Fatalf("order %v, want the notice before the GOAWAY", order)
	}
	h.Untrack(tap)
	h.Close(context.Background()) // nothing tracked: at once
}
