package shmring

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// The layout of the shared mapping: a header page holding one control
// block per direction, then the ring of each direction.
const (
	HeaderSize = 4096
	ctlSize    = 512 // one direction's control block

	offTail     = 0   // u64, producer: bytes written since the start
	offFDSeq    = 8   // u64, producer: descriptor messages sent on the socket
	offHead     = 64  // u64, consumer: bytes consumed since the start
	offSleeping = 128 // u32, consumer: 1 while it sleeps (wake it)
	offWaiting  = 192 // u32, producer: 1 while it waits for room (wake it)

	// DirClient is the ring the client writes; DirServer the one the
	// server writes.
	DirClient = 0
	DirServer = 1

	// MinSize and MaxSize bound a ring's size, a power of two.
	MinSize = 4 << 10
	MaxSize = 64 << 20
)

// ErrIndex is the error of a ring whose peer published an impossible
// index: a connection error.
var ErrIndex = errors.New("warren: shared-memory ring: peer published an invalid index")

// MapLen is the size of the memfd of two rings of size bytes.
func MapLen(size int) int { return HeaderSize + 2*size }

// ValidSize reports whether size is a ring size: a power of two within
// [MinSize, MaxSize].
func ValidSize(size int) bool { return size >= MinSize && size <= MaxSize && size&(size-1) == 0 }

// Waking a side that sleeps is Dekker's handshake: a consumer stores that
// it sleeps, then loads the tail; a producer stores the tail, then loads
// whether the consumer sleeps (and the same with the head and the
// producer's wait for room). One of the two must see the other's store,
// so each of these stores is a swap, a full barrier everywhere: under the
// race detector an atomic store to memory outside the Go heap, as this
// mapping is, is a plain move, which the load after it may pass, and both
// sides then sleep.

// half is one direction of a mapping.
type half struct {
	ctl  []byte
	data []byte
	mask uint64
}

func newHalf(mem []byte, size, dir int) half {
	return half{
		ctl:  mem[dir*ctlSize : (dir+1)*ctlSize],
		data: mem[HeaderSize+dir*size : HeaderSize+(dir+1)*size],
		mask: uint64(size - 1),
	}
}

func (h *half) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&h.ctl[off])) }
func (h *half) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&h.ctl[off])) }

// Consumer reads one ring. Its head is private: it publishes it and never
// reads it back.
type Consumer struct {
	h    half
	head uint64
}

// NewConsumer returns the consumer of direction dir of mem, a mapping of
// MapLen(size) bytes, 8-byte aligned.
func NewConsumer(mem []byte, size, dir int) *Consumer {
	return &Consumer{h: newHalf(mem, size, dir)}
}

// Avail loads the producer's tail once and returns how many bytes wait.
// A tail behind the head or more than a ring ahead of it is ErrIndex.
func (c *Consumer) Avail() (uint64, error) {
	t := atomic.LoadUint64(c.h.u64(offTail))
	n := t - c.head // a tail behind the head wraps to a huge n
	if n > c.h.mask+1 {
		return 0, ErrIndex
	}
	return n, nil
}

// Copy copies min(avail, len(b)) bytes out of the ring into b, reading
// each byte once, and publishes the new head. avail is what Avail
// returned.
func (c *Consumer) Copy(b []byte, avail uint64) int {
	n := int(min(avail, uint64(len(b))))
	off := int(c.head & c.h.mask)
	k := copy(b[:n], c.h.data[off:])
	copy(b[k:n], c.h.data)
	c.head += uint64(n)
	atomic.SwapUint64(c.h.u64(offHead), c.head) // a swap: see half
	return n
}

// FDSeq loads the producer's count of descriptor messages.
func (c *Consumer) FDSeq() uint64 { return atomic.LoadUint64(c.h.u64(offFDSeq)) }

// SetSleeping publishes whether the consumer sleeps.
func (c *Consumer) SetSleeping(v uint32) { atomic.SwapUint32(c.h.u32(offSleeping), v) }

// ProducerWaiting reports whether the producer says it waits for room.
func (c *Consumer) ProducerWaiting() bool { return atomic.LoadUint32(c.h.u32(offWaiting)) != 0 }

// Producer writes one ring. Its tail is private: it publishes it and
// never reads it back.
type Producer struct {
	h     half
	tail  uint64
	head  uint64 // the consumer's head last loaded
	fdSeq uint64
}

// NewProducer returns the producer of direction dir of mem.
func NewProducer(mem []byte, size, dir int) *Producer {
	return &Producer{h: newHalf(mem, size, dir)}
}

// Room loads the consumer's head once and returns how many bytes can be
// written. A head that goes back, passes the tail or is more than a ring
// behind it is ErrIndex.
func (p *Producer) Room() (uint64, error) {
	h := atomic.LoadUint64(p.h.u64(offHead))
	if h < p.head || h > p.tail || p.tail-h > p.h.mask+1 {
		return 0, ErrIndex
	}
	p.head = h
	return p.h.mask + 1 - (p.tail - h), nil
}

// Put copies as much of bufs as room allows into the ring, consuming it
// from bufs, and returns how many bytes it wrote; Publish makes them
// visible.
func (p *Producer) Put(bufs *[][]byte, room uint64) int {
	total := 0
	for len(*bufs) > 0 && room > 0 {
		b := (*bufs)[0]
		n := int(min(room, uint64(len(b))))
		off := int(p.tail & p.h.mask)
		k := copy(p.h.data[off:], b[:n])
		copy(p.h.data, b[k:n])
		p.tail += uint64(n)
		room -= uint64(n)
		total += n
		if n == len(b) {
			*bufs = (*bufs)[1:]
		} else {
			(*bufs)[0] = b[n:]
		}
	}
	return total
}

// Publish stores the tail: the bytes Put wrote are the consumer's.
func (p *Producer) Publish() { atomic.SwapUint64(p.h.u64(offTail), p.tail) }

// AddFDs counts a descriptor message sent on the socket, before the bytes
// of the frame naming it are published.
func (p *Producer) AddFDs() {
	p.fdSeq++
	atomic.StoreUint64(p.h.u64(offFDSeq), p.fdSeq)
}

// SetWaiting publishes whether the producer waits for room.
func (p *Producer) SetWaiting(v uint32) { atomic.SwapUint32(p.h.u32(offWaiting), v) }

// ConsumerSleeping reports whether the consumer says it sleeps.
func (p *Producer) ConsumerSleeping() bool { return atomic.LoadUint32(p.h.u32(offSleeping)) != 0 }
