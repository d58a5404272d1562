package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kinds of descriptor block.
const (
	KindFiles  = 0 // the descriptors are files handed over; the message bytes follow the block
	KindShared = 1 // the first and only descriptor is a sealed memfd holding the message
)

// MaxFiles is the most descriptors one frame may name (the count is a u8).
const MaxFiles = 255

// Block is the descriptor block at the start of a DATA frame flagged
// wire.FlagFiles:
//
//	u8 count   descriptors sent with the frame, 1..255
//	u8 kind    KindFiles or KindShared
//	u64 length KindShared only: the message's size, which is the memfd's
//
// The rest of the frame's payload is the message (KindFiles), or nothing
// (KindShared).
type Block struct {
	Count  int
	Kind   int
	Length uint64
}

// ErrBlock is wrapped by every error of ParseBlock.
var ErrBlock = errors.New("warren: bad descriptor block")

// AppendBlock appends blk's encoding to b.
func AppendBlock(b []byte, blk Block) []byte {
	b = append(b, byte(blk.Count), byte(blk.Kind))
	if blk.Kind == KindShared {
		b = binary.BigEndian.AppendUint64(b, blk.Length)
	}
	return b
}

// ParseBlock decodes the block at the start of p and returns it with the
// message bytes that follow it.
func ParseBlock(p []byte) (Block, []byte, error) {
	if len(p) < 2 {
		return Block{}, nil, fmt.Errorf("%w: %d bytes, need 2", ErrBlock, len(p))
	}
	blk := Block{Count: int(p[0]), Kind: int(p[1])}
	if blk.Count == 0 {
		return Block{}, nil, fmt.Errorf("%w: no descriptors", ErrBlock)
	}
	switch blk.Kind {
	case KindFiles:
		return blk, p[2:], nil
	case KindShared:
		if len(p) != 10 {
			return Block{}, nil, fmt.Errorf("%w: shared block of %d bytes, want 10", ErrBlock, len(p))
		}
		if blk.Count != 1 {
			return Block{}, nil, fmt.Errorf("%w: shared block with %d descriptors, want 1", ErrBlock, blk.Count)
		}
		blk.Length = binary.BigEndian.Uint64(p[2:])
		if blk.Length == 0 {
			return Block{}, nil, fmt.Errorf("%w: empty shared message", ErrBlock)
		}
		return blk, nil, nil
	}
	return Block{}, nil, fmt.Errorf("%w: unknown kind %d", ErrBlock, blk.Kind)
}
