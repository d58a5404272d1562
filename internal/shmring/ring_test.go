package shmring

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"
)

// mapping returns zeroed memory laid out as a memfd of two rings of size
// bytes, 8-byte aligned.
func mapping(size int) []byte {
	w := make([]uint64, MapLen(size)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), MapLen(size))
}

func TestRingWrap(t *testing.T) {
	const size = MinSize
	mem := mapping(size)
	p, c := NewProducer(mem, size, DirClient), NewConsumer(mem, size, DirClient)
	var sent, got []byte
	buf := make([]byte, 3000)
	for i := 0; i < 50; i++ {
		msg := bytes.Repeat([]byte{byte(i)}, 1000+i*37)
		sent = append(sent, msg...)
		bufs := [][]byte{msg}
		for len(bufs) > 0 {
			room, err := p.Room()
			if err != nil {
				t.Fatal(err)
			}
			p.Put(&bufs, room)
			p.Publish()
			for {
				n, err := c.Avail()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				got = append(got, buf[:c.Copy(buf, n)]...)
			}
		}
	}
	if !bytes.Equal(sent, got) {
		t.Fatalf("got %d bytes, sent %d, or they differ", len(got), len(sent))
	}
}

func TestRingBadIndex(t *testing.T) {
	const size = MinSize
	for _, tc := range []struct {
		name string
		tail uint64
	}{{"beyond a ring", size + 1}, {"behind the head", 1<<64 - 1}} {
		mem := mapping(size)
		c := NewConsumer(mem, size, DirServer)
		binary.LittleEndian.PutUint64(mem[DirServer*ctlSize+offTail:], tc.tail)
		if binary.NativeEndian.Uint64(mem[DirServer*ctlSize+offTail:]) != tc.tail {
			t.Skip("big-endian host")
		}
		if _, err := c.Avail(); err != ErrIndex {
			t.Errorf("%s: tail %d: err %v, want ErrIndex", tc.name, tc.tail, err)
		}
	}
	mem := mapping(size)
	p := NewProducer(mem, size, DirClient)
	head := mem[DirClient*ctlSize+offHead:]
	binary.NativeEndian.PutUint64(head, 1) // passes the tail (0)
	if _, err := p.Room(); err != ErrIndex {
		t.Errorf("head past the tail: err %v, want ErrIndex", err)
	}
	binary.NativeEndian.PutUint64(head, 0)
	bufs := [][]byte{make([]byte, 100)}
	room, _ := p.Room()
	p.Put(&bufs, room)
	binary.NativeEndian.PutUint64(head, 50)
	if room, err := p.Room(); err != nil || room != size-50 {
		t.Fatalf("room %d, %v; want %d", room, err, size-50)
	}
	binary.NativeEndian.PutUint64(head, 40) // goes back
	if _, err := p.Room(); err != ErrIndex {
		t.Errorf("head going back: err %v, want ErrIndex", err)
	}
}

// FuzzRingHostileWriter drives a consumer whose peer writes the whole
// mapping (indices, flags, contents) at will between reads: the consumer
// never reads out of bounds, returns at most what a ring holds, and a
// tail more than a ring ahead of what it read is an error.
func FuzzRingHostileWriter(f *testing.F) {
	f.Add([]byte{0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0x10, 0, 0, 0, 0, 0, 0, 0, 2, 0x20, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x10})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const size = MinSize
		mem := mapping(size)
		c := NewConsumer(mem, size, DirClient)
		p := NewProducer(mem, size, DirServer) // this side's own ring, which the peer also scribbles on
		ctl := mem[DirClient*ctlSize:]
		buf := make([]byte, 2*size)
		var read uint64
		for len(ops) >= 9 {
			op, arg := ops[0], binary.LittleEndian.Uint64(ops[1:9])
			ops = ops[9:]
			switch op % 4 {
			case 0: // the peer publishes a tail
				binary.NativeEndian.PutUint64(ctl[offTail:], arg)
			case 1: // the peer writes contents, or any header byte
				mem[arg%uint64(len(mem))] = byte(arg >> 32)
			case 2: // the peer moves this side's head, which it never reads back
				binary.NativeEndian.PutUint64(ctl[offHead:], arg)
				binary.NativeEndian.PutUint64(mem[DirServer*ctlSize+offHead:], arg)
			case 3: // the peer sets flags and counts
				binary.NativeEndian.PutUint64(ctl[offFDSeq:], arg)
				binary.NativeEndian.PutUint32(ctl[offWaiting:], uint32(arg))
			}
			n, err := c.Avail()
			tail := binary.NativeEndian.Uint64(ctl[offTail:])
			if err != nil {
				if tail-read <= size {
					t.Fatalf("tail %d, read %d: %v", tail, read, err)
				}
				continue
			}
			if n > size || n != tail-read {
				t.Fatalf("avail %d for tail %d, read %d", n, tail, read)
			}
			k := c.Copy(buf[:int(arg%uint64(len(buf)))], n)
			read += uint64(k)
			if binary.NativeEndian.Uint64(ctl[offHead:]) != read {
				t.Fatalf("published head %d, read %d", binary.NativeEndian.Uint64(ctl[offHead:]), read)
			}
			if room, err := p.Room(); err == nil {
				bufs := [][]byte{buf[:min(int(arg>>40), len(buf))]}
				p.Put(&bufs, room)
				p.Publish()
			}
		}
	})
}
