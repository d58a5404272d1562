package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/warrenipc/warren/wire"
)

// TestSizeLimitSender: the sender checks the limit the peer advertised
// before sending anything, and the stream stays usable.
func TestSizeLimitSender(t *testing.T) {
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, nil, &Options{MaxMessageSize: 1000})
		if got := a.PeerMaxMessageSize(); got != 1000 {
			t.Fatalf("PeerMaxMessageSize = %d", got)
		}
		err := a.WriteBytes(make([]byte, 1001))
		if tl := mustErrAs[*wire.MessageTooLargeError](t, err); tl.Size != 1001 || tl.Limit != 1000 {
			t.Fatalf("WriteBytes(1001 bytes) = %v", err)
		}
		if !strings.HasPrefix(err.Error(), "warren: stream: write: message of 1001 bytes") {
			t.Fatalf("error text %q", err)
		}
		err = a.Write(word{Word: strings.Repeat("x", 1000)})
		mustErrAs[*wire.MessageTooLargeError](t, err)

		go a.WriteBytes(bytes.Repeat([]byte{'y'}, 1000)) // exactly the limit
		got, err := b.ReadBytes(nil)
		if err != nil || len(got) != 1000 {
			t.Fatalf("ReadBytes = %d bytes, %v", len(got), err)
		}
	})
}

// TestSizeLimitReceiver: a peer that ignores the limit gets its message
// refused before the receiver allocates for it, and the stream goes on.
func TestSizeLimitReceiver(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"single frame", 200},         // fits in a frame, over the message limit
		{"chunked", 5000},             // declared in the first frame's length prefix
		{"chunked, large", 100 << 10}, // many frames dropped
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, raw := rawPair(t, &Options{MaxMessageSize: 100, MaxFrameSize: 1024}, nil)
			go func() {
				raw.Write(frames(bytes.Repeat([]byte{1}, tc.size), 1024, 0))
				raw.Write(frames([]byte("next"), 1024, wire.FlagEnd))
			}()
			_, err := s.ReadBytes(nil)
			if tl := mustErrAs[*wire.MessageTooLargeError](t, err); tl.Size != int64(tc.size) || tl.Limit != 100 {
				t.Fatalf("ReadBytes = %v", err)
			}
			if got, err := s.ReadBytes(nil); err != nil || string(got) != "next" {
				t.Fatalf("next message: %q, %v", got, err)
			}
			if _, err := s.ReadBytes(nil); err != io.EOF {
				t.Fatalf("after the last message: %v", err)
			}
		})
	}
}

// TestSizeLimitNoAlloc: a first chunk that declares a 1 GiB message is
// refused without allocating for it.
func TestSizeLimitNoAlloc(t *testing.T) {
	s, raw := rawPair(t, nil, nil)
	first := wire.AppendHeader(nil, wire.Header{Length: 8, Stream: streamID, Type: wire.TypeData, Flags: wire.FlagMore})
	first = binary.BigEndian.AppendUint32(first, 1<<30)
	first = append(first, "abcd"...)
	raw.Write(first)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := s.ReadBytes(nil)
	runtime.ReadMemStats(&after)
	if tl := mustErrAs[*wire.MessageTooLargeError](t, err); tl.Size != 1<<30 {
		t.Fatalf("ReadBytes = %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("allocated %d bytes for a refused message", n)
	}
	// The connection ends while the rest of that message is being dropped.
	raw.Close()
	_, err = s.ReadBytes(nil)
	if ce := mustErrAs[*ConnError](t, err); !ce.Partial {
		t.Fatalf("ReadBytes = %v, want a partial message", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		opts    Options
		setting string // "" when valid
	}{
		{Options{}, ""},
		{Options{MaxMessageSize: 1 << 30}, ""},
		{Options{MaxMessageSize: 1<<30 + 1}, "MaxMessageSize"},
		{Options{MaxFrameSize: 16 << 20}, ""},
		{Options{MaxFrameSize: 512}, "MaxFrameSize"},
		{Options{MaxFrameSize: 16<<20 + 1}, "MaxFrameSize"},
		{Options{CloseTimeout: -1}, "timeout"},
		{Options{HandshakeTimeout: -1}, "timeout"},
	} {
		a, b := pipePair(t)
		peerDone := make(chan struct{})
		go func() {
			defer close(peerDone)
			if s, err := New(b, nil); err == nil {
				s.Close()
			}
		}()
		s, err := New(a, &tc.opts)
		switch {
		case tc.setting == "" && err != nil:
			t.Errorf("%+v: %v", tc.opts, err)
		case tc.setting == "timeout" && (err == nil || !strings.Contains(err.Error(), "negative timeout")):
			t.Errorf("%+v: %v", tc.opts, err)
		case tc.setting != "" && tc.setting != "timeout":
			var se *wire.SettingError
			if !errors.As(err, &se) || se.Setting != tc.setting {
				t.Errorf("%+v: %v, want a *wire.SettingError for %s", tc.opts, err, tc.setting)
			}
		}
		if err == nil {
			s.Close()
		}
		<-peerDone
	}
}

// TestZeroAllocs: raw messages cost no allocation in steady state, on
// either side.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	a, b := newPair(t, unixPair, nil, nil)
	small := make([]byte, 1<<10)
	buf := make([]byte, 0, 1<<10)
	if n := testing.AllocsPerRun(200, func() {
		if err := a.WriteBytes(small); err != nil {
			t.Fatal(err)
		}
		var err error
		if buf, err = b.ReadBytes(buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("1 KiB message: %v allocations, want 0", n)
	}

	large := make([]byte, 1<<20)
	next, done := make(chan struct{}), make(chan error)
	go func() {
		for range next {
			done <- a.WriteBytes(large)
		}
	}()
	defer close(next)
	buf = make([]byte, 0, 1<<20)
	if n := testing.AllocsPerRun(20, func() {
		next <- struct{}{}
		var err error
		if buf, err = b.ReadBytes(buf); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("1 MiB message: %v allocations, want 0", n)
	}
}
