package shmring

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// TestRingVectors checks testdata/ring_vectors.json (PROTOCOL.md,
// "Shared-memory rings"): each control block as the consumer whose own
// head is the block's head, and the producer whose own tail is its tail,
// see it.
func TestRingVectors(t *testing.T) {
	b, err := os.ReadFile("../../testdata/ring_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Hex    string `json:"hex"`
		Fields struct {
			Size, Tail, Head, Sleeping, Waiting, Avail, Offset, Room uint64
			FDSeq                                                    uint64 `json:"fd_seq"`
		} `json:"fields"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			blk, err := hex.DecodeString(v.Hex)
			if err != nil || v.Kind != "ring_control" || len(blk) != 196 {
				t.Fatalf("kind %q, %d bytes, %v", v.Kind, len(blk), err)
			}
			if v.Error != "" {
				bad++
			}
			size := MinSize // an invalid block is checked with the smallest ring
			if v.Error == "" {
				size = int(v.Fields.Size)
			}
			mem := mapping(size)
			copy(mem[DirClient*ctlSize:], blk)
			c := NewConsumer(mem, size, DirClient)
			p := NewProducer(mem, size, DirClient)
			// The private indices: the consumer's head and the producer's
			// tail are the ones the block publishes.
			c.head = leUint64(blk[offHead:])
			p.tail = leUint64(blk[offTail:])
			avail, cerr := c.Avail()
			room, perr := p.Room()
			if v.Error != "" {
				if v.Error != "bad_index" || cerr != ErrIndex || perr != ErrIndex {
					t.Fatalf("error %q: consumer %v, producer %v", v.Error, cerr, perr)
				}
				return
			}
			f := v.Fields
			if cerr != nil || perr != nil || avail != f.Avail || room != f.Room {
				t.Fatalf("avail %d (%v), room %d (%v); want %d, %d", avail, cerr, room, perr, f.Avail, f.Room)
			}
			if c.head&c.h.mask != f.Offset || c.FDSeq() != f.FDSeq || p.ConsumerSleeping() != (f.Sleeping == 1) || c.ProducerWaiting() != (f.Waiting == 1) {
				t.Fatalf("offset %d, fd_seq %d, sleeping %v, waiting %v; want %+v", c.head&c.h.mask, c.FDSeq(), p.ConsumerSleeping(), c.ProducerWaiting(), f)
			}
		})
	}
	if bad == 0 || bad == len(vs) {
		t.Fatalf("%d vectors, %d invalid: want both kinds", len(vs), bad)
	}
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
