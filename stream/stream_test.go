package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

type word struct {
	Word string `json:"word"`
	N    int    `json:"n"`
}

func TestJSONRoundTrip(t *testing.T) {
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, nil, nil)
		for _, dir := range []struct{ from, to *Stream }{{a, b}, {b, a}} {
			errc := make(chan error, 1)
			go func() {
				for i := range 100 {
					if err := dir.from.Write(word{Word: fmt.Sprint("w", i), N: i}); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := range 100 {
				var w word
				if err := dir.to.Read(&w); err != nil {
					t.Fatal(err)
				}
				if want := (word{Word: fmt.Sprint("w", i), N: i}); w != want {
					t.Fatalf("read %+v, want %+v", w, want)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestProtoRoundTrip(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{
		"name": "counter", "n": 42.5, "tags": []any{"a", "b"}, "nested": map[string]any{"ok": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []proto.Message{st, wrapperspb.String("hello"), wrapperspb.Int64(-1 << 62), wrapperspb.Bytes(bytes.Repeat([]byte{7}, 200<<10))}
	for _, cd := range []codec.Codec{codec.Proto, codec.JSON} {
		t.Run(cd.Name(), func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, pair pairFunc) {
				a, b := newPair(t, pair, &Options{Codec: cd}, &Options{Codec: cd})
				errc := make(chan error, 1)
				go func() {
					for _, m := range msgs {
						if err := a.Write(m); err != nil {
							errc <- err
							return
						}
					}
					errc <- a.CloseWrite()
				}()
				for _, want := range msgs {
					got := want.ProtoReflect().New().Interface()
					if err := b.Read(got); err != nil {
						t.Fatal(err)
					}
					if !proto.Equal(got, want) {
						t.Fatalf("read %v, want %v", got, want)
					}
				}
				if err := b.Read(new(structpb.Struct)); err != io.EOF {
					t.Fatalf("Read after the last message: %v, want io.EOF", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func TestRawCodec(t *testing.T) {
	a, b := newPair(t, pipePair, &Options{Codec: codec.Raw}, &Options{Codec: codec.Raw})
	go a.Write([]byte("raw bytes"))
	var got []byte
	if err := b.Read(&got); err != nil || string(got) != "raw bytes" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	go a.Write("not bytes") // fails before sending anything
	go a.WriteBytes([]byte("next"))
	if err := b.Read(&got); err != nil || string(got) != "next" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	err := a.Write(42)
	if ce := mustErrAs[*CodecError](t, err); ce.Op != "encode" || !errors.Is(err, codec.ErrUnsupportedType) {
		t.Fatalf("Write(42) = %v", err)
	}
}

// TestFullDuplex has each side write 10,000 messages while reading the
// other's 10,000, each direction in its own goroutine.
func TestFullDuplex(t *testing.T) {
	const n = 10000
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, nil, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, s := range []*Stream{a, b} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range n {
					if err := s.Write(word{Word: "x", N: i}); err != nil {
						errs <- fmt.Errorf("write %d: %w", i, err)
						return
					}
				}
				if err := s.CloseWrite(); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					var w word
					err := s.Read(&w)
					if err == io.EOF && i == n {
						return
					}
					if err != nil || w.N != i {
						errs <- fmt.Errorf("read %d: got %+v, %v", i, w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if aerr, berr := closeBoth(a, b); aerr != nil || berr != nil {
			t.Fatalf("Close: %v / %v", aerr, berr)
		}
	})
}

// TestLargeMessages checks the integrity of messages from empty to 3 MiB,
// with the default frame size and with the smallest, around the chunking
// boundaries.
func TestLargeMessages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, frame := range []uint32{0, 1 << 10} {
		max := frame
		if max == 0 {
			max = defaultMaxFrameSize
		}
		m := int(max)
		sizes := []int{0, 1, 100, m - 1, m, m + 1, 2*m - 4, 2*m - 3, 100_000, 1 << 20, 3 << 20}
		msgs := make([][]byte, len(sizes))
		for i, n := range sizes {
			msgs[i] = make([]byte, n)
			for j := range msgs[i] {
				msgs[i][j] = byte(rng.Uint32())
			}
		}
		t.Run(fmt.Sprint("frame=", max), func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, pair pairFunc) {
				a, b := newPair(t, pair, nil, &Options{MaxFrameSize: frame})
				errc := make(chan error, 1)
				go func() {
					for _, m := range msgs {
						if err := a.WriteBytes(m); err != nil {
							errc <- err
							return
						}
					}
					errc <- a.CloseWrite()
				}()
				var buf []byte
				for i, want := range msgs {
					var err error
					if buf, err = b.ReadBytes(buf); err != nil {
						t.Fatalf("message %d: %v", i, err)
					}
					if !bytes.Equal(buf, want) {
						t.Fatalf("message %d: got %d bytes, want %d (equal lengths: %t)", i, len(buf), len(want), len(buf) == len(want))
					}
				}
				if _, err := b.ReadBytes(buf); err != io.EOF {
					t.Fatalf("after the last message: %v", err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestCloseHandshake writes messages and closes at once, many times: the
// peer must read every message and then io.EOF.
func TestCloseHandshake(t *testing.T) {
	iterations := 200
	if testing.Short() {
		iterations = 20
	}
	big := bytes.Repeat([]byte("big"), 100_000)
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		for i := range iterations {
			ca, cb := pair(t)
			n := 1 + i%40
			sent := make(chan error, 1)
			go func() {
				a, err := New(ca, nil)
				if err != nil {
					sent <- err
					return
				}
				for j := range n {
					if j == n/2 && i%5 == 0 {
						err = a.WriteBytes(big)
					} else {
						err = a.Write(word{N: j})
					}
					if err != nil {
						a.Close()
						sent <- err
						return
					}
				}
				sent <- a.Close()
			}()
			b, err := New(cb, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for {
				msg, err := b.ReadBytes(nil)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("iteration %d: read %d of %d messages, then %v", i, got, n, err)
				}
				// (Lengths first: under the race detector, comparing with big
				// costs its whole length.)
				if (len(msg) != len(big) || !bytes.Equal(msg, big)) && string(msg) != fmt.Sprintf(`{"word":"","n":%d}`, got) {
					t.Fatalf("iteration %d: message %d is %.40q", i, got, msg)
				}
				got++
			}
			if got != n {
				t.Fatalf("iteration %d: read %d messages, want %d", i, got, n)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("iteration %d: reader's Close: %v", i, err)
			}
			if err := <-sent; err != nil {
				t.Fatalf("iteration %d: writer: %v", i, err)
			}
		}
	})
}

// TestCloseDrains: the closing side has unread messages from its peer; Close
// reads them away and the peer still gets everything and io.EOF.
func TestCloseDrains(t *testing.T) {
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, nil, nil)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // b writes 50 messages that a never reads
			defer wg.Done()
			for i := range 50 {
				if err := b.WriteBytes(bytes.Repeat([]byte{byte(i)}, 10_000)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		aerr := make(chan error, 1)
		go func() {
			for i := range 20 {
				if err := a.Write(word{N: i}); err != nil {
					t.Error(err)
				}
			}
			aerr <- a.Close()
		}()
		for i := 0; ; i++ {
			var w word
			err := b.Read(&w)
			if err == io.EOF && i == 20 {
				break
			}
			if err != nil || w.N != i {
				t.Fatalf("read %d: %+v, %v", i, w, err)
			}
		}
		wg.Wait()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-aerr; err != nil {
			t.Fatal(err)
		}
	})
}

func TestCloseWrite(t *testing.T) {
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, nil, nil)
		done := make(chan error, 1)
		go func() { done <- a.CloseWrite() }()
		if err := b.Read(new(word)); err != io.EOF {
			t.Fatalf("Read after CloseWrite: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := a.CloseWrite(); err != nil {
			t.Fatalf("second CloseWrite: %v", err)
		}
		if err := a.Write(word{}); err != ErrWriteClosed {
			t.Fatalf("Write after CloseWrite: %v", err)
		}
		// The other direction still works.
		go func() {
			for i := range 3 {
				b.Write(word{N: i})
			}
			b.CloseWrite()
		}()
		for i := range 3 {
			var w word
			if err := a.Read(&w); err != nil || w.N != i {
				t.Fatalf("Read = %+v, %v", w, err)
			}
		}
		if err := a.Read(new(word)); err != io.EOF {
			t.Fatalf("Read = %v, want io.EOF", err)
		}
		if err := b.Read(new(word)); err != io.EOF {
			t.Fatalf("Read again = %v, want io.EOF", err)
		}
		start := time.Now()
		if aerr, berr := closeBoth(a, b); aerr != nil || berr != nil {
			t.Fatalf("Close: %v / %v", aerr, berr)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Close of two ended sides took %v", d)
		}
	})
}

// TestCloseConcurrent closes a stream from many goroutines while another is
// blocked in Read; the peer never ends its side.
func TestCloseConcurrent(t *testing.T) {
	forEachTransport(t, func(t *testing.T, pair pairFunc) {
		a, b := newPair(t, pair, &Options{CloseTimeout: 100 * time.Millisecond}, nil)
		readErr := make(chan error, 1)
		go func() { readErr <- a.Read(new(word)) }()
		peerRead := make(chan error, 1)
		go func() { peerRead <- b.Read(new(word)) }() // sees a's end marker
		time.Sleep(10 * time.Millisecond)             // let the Read block

		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = a.Close()
			}()
		}
		if err := <-readErr; err != ErrClosed {
			t.Fatalf("blocked Read returned %v, want ErrClosed", err)
		}
		if d := time.Since(start); d > 80*time.Millisecond {
			t.Errorf("blocked Read took %v to return", d)
		}
		wg.Wait()
		for _, err := range errs {
			if err != ErrCloseTimeout {
				t.Fatalf("Close = %v, want ErrCloseTimeout", err)
			}
		}
		var ne net.Error
		if !errors.As(errs[0], &ne) || !ne.Timeout() {
			t.Fatalf("ErrCloseTimeout is not a net.Error timeout")
		}
		if err := <-peerRead; err != io.EOF {
			t.Fatalf("peer read %v, want io.EOF", err)
		}
		if err := a.Write(word{}); err != ErrClosed {
			t.Fatalf("Write after Close: %v", err)
		}
		if _, err := a.ReadBytes(nil); err != ErrClosed {
			t.Fatalf("ReadBytes after Close: %v", err)
		}
		if err := a.CloseWrite(); err != ErrClosed {
			t.Fatalf("CloseWrite after Close: %v", err)
		}
		if err := a.Close(); err != ErrCloseTimeout {
			t.Fatalf("Close again: %v", err)
		}
	})
}

// TestPeerVanishes: a connection that ends without the end marker is an
// error, and a partial message is never returned.
func TestPeerVanishes(t *testing.T) {
	msg := bytes.Repeat([]byte("m"), 5000)
	chunked := frames(msg, 1024, 0)
	for _, tc := range []struct {
		name    string
		tail    []byte // written after one whole message, then the connection closes
		partial bool
	}{
		{"at a message boundary", nil, false},
		{"inside a frame header", chunked[:5], true},
		{"inside a frame", chunked[:500], true},
		{"between chunks", chunked[:2*(wire.HeaderSize+1024)], true},
		{"before the last chunk's end", chunked[:len(chunked)-1], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, raw := rawPair(t, &Options{MaxFrameSize: 1024}, nil)
			raw.Write(frames([]byte("whole"), 1024, 0))
			raw.Write(tc.tail)
			raw.Close()
			if got, err := s.ReadBytes(nil); err != nil || string(got) != "whole" {
				t.Fatalf("first message: %q, %v", got, err)
			}
			got, err := s.ReadBytes(make([]byte, 10))
			if len(got) != 0 {
				t.Fatalf("returned %d bytes of a partial message", len(got))
			}
			ce := mustErrAs[*ConnError](t, err)
			if !errors.Is(err, io.ErrUnexpectedEOF) || ce.Partial != tc.partial || ce.Op != "read" || ce.Timeout() {
				t.Fatalf("error %v: %+v", err, ce)
			}
			if _, err2 := s.ReadBytes(nil); err2 != err {
				t.Fatalf("second read: %v, want the same error", err2)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close after the peer vanished: %v", err)
			}
		})
	}
}

// TestReadDeadline: a read deadline on the connection interrupts Read, even
// in the middle of a chunked message, and the next Read resumes.
func TestReadDeadline(t *testing.T) {
	msg := bytes.Repeat([]byte("0123456789"), 500)
	f := frames(msg, 1024, 0)
	for _, tc := range []struct {
		name   string
		first  func(s *Stream) error // interrupted by the deadline
		second func(s *Stream) ([]byte, error)
	}{
		{"ReadBytes into the caller's buffer", func(s *Stream) error {
			buf := make([]byte, 0, len(msg))
			_, err := s.ReadBytes(buf)
			copy(buf[:cap(buf)], bytes.Repeat([]byte{'X'}, cap(buf))) // the caller reuses it
			return err
		}, func(s *Stream) ([]byte, error) { return s.ReadBytes(make([]byte, 0, len(msg))) }},
		{"ReadBytes then Read", func(s *Stream) error {
			_, err := s.ReadBytes(nil)
			return err
		}, func(s *Stream) ([]byte, error) {
			var got []byte
			s.codec = codec.Raw
			err := s.Read(&got)
			return got, err
		}},
		{"Read then ReadBytes", func(s *Stream) error {
			s.codec = codec.Raw
			return s.Read(new([]byte))
		}, func(s *Stream) ([]byte, error) { return s.ReadBytes(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, raw := rawPair(t, &Options{MaxFrameSize: 1024}, nil)
			raw.Write(f[:1500])
			s.Conn().SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			err := tc.first(s)
			if ce := mustErrAs[*ConnError](t, err); !ce.Timeout() || ce.Partial {
				t.Fatalf("Read = %v, want a timeout", err)
			}
			s.Conn().SetReadDeadline(time.Time{})
			raw.Write(f[1500:])
			got, err := tc.second(s)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("Read after the timeout: %d bytes (%.20q), %v", len(got), got, err)
			}
		})
	}
}

// TestTransportPeer reads the peer's identity through Conn.
func TestTransportPeer(t *testing.T) {
	a, b := newPair(t, transportPair, nil, nil)
	for _, s := range []*Stream{a, b} {
		tc, ok := s.Conn().(*transport.Conn)
		if !ok {
			t.Fatalf("Conn() is a %T, want the *transport.Conn", s.Conn())
		}
		if p := tc.Peer(); p.UID != os.Geteuid() {
			t.Fatalf("peer uid %d, want %d", p.UID, os.Geteuid())
		}
	}
}
