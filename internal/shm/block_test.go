package shm

import (
	"bytes"
	"errors"
	"testing"
)

func TestBlockRoundTrip(t *testing.T) {
	for _, blk := range []Block{{Count: 1, Kind: KindShared, Length: 1 << 30}, {Count: 3, Kind: KindFiles}, {Count: 255, Kind: KindFiles}} {
		b := AppendBlock(nil, blk)
		if blk.Kind == KindFiles {
			b = append(b, "msg"...)
		}
		got, rest, err := ParseBlock(b)
		if err != nil || got != blk {
			t.Fatalf("%+v: got %+v %v", blk, got, err)
		}
		if blk.Kind == KindFiles && string(rest) != "msg" {
			t.Fatalf("%+v: rest %q", blk, rest)
		}
	}
}

func TestBlockErrors(t *testing.T) {
	for _, p := range [][]byte{
		nil, {1}, {0, 0}, {1, 2}, {1, 1}, {2, 1, 0, 0, 0, 0, 0, 0, 0, 1},
		{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 9},
	} {
		if _, _, err := ParseBlock(p); !errors.Is(err, ErrBlock) {
			t.Errorf("% x: %v, want ErrBlock", p, err)
		}
	}
}

func FuzzParseBlock(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 16, 0, 0})
	f.Add([]byte{2, 0, 'h', 'i'})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		blk, rest, err := ParseBlock(p)
		if err != nil {
			if !errors.Is(err, ErrBlock) {
				t.Fatalf("error not ErrBlock: %v", err)
			}
			return
		}
		if blk.Count < 1 || blk.Count > MaxFiles || (blk.Kind == KindShared && (blk.Count != 1 || blk.Length == 0 || rest != nil)) {
			t.Fatalf("accepted %+v", blk)
		}
		if again := append(AppendBlock(nil, blk), rest...); !bytes.Equal(again, p) {
			t.Fatalf("re-encoding % x, was % x", again, p)
		}
	})
}
