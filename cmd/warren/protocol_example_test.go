package main

import (
	"bytes"
	"encoding/hex"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// exchange is the bytes of one side in a byte-by-byte example of
// PROTOCOL.md.
type exchange struct {
	server bool
	b      []byte
}

// exampleBlocks returns the code blocks of PROTOCOL.md's section heading,
// each as the exchanges it lists: lines start with "client" or "server"
// (continuation lines with spaces), then hex bytes up to the comment.
func exampleBlocks(t *testing.T, heading string) [][]exchange {
	doc, err := os.ReadFile("../../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("PROTOCOL.md has no section %q", heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks [][]exchange
	for i, part := range strings.Split(sec, "```") {
		if i%2 == 0 {
			continue // prose
		}
		var ex []exchange
		for _, line := range strings.Split(part, "\n") {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			if w := fields[0]; w == "client" || w == "server" {
				ex = append(ex, exchange{server: w == "server"})
				fields = fields[1:]
			}
			for _, f := range fields {
				b, err := hex.DecodeString(f)
				if err != nil || len(b) != 1 {
					break // the comment
				}
				ex[len(ex)-1].b = append(ex[len(ex)-1].b, b...)
			}
		}
		blocks = append(blocks, ex)
	}
	return blocks
}

// replay sends the client's bytes of ex to the socket at path and requires
// the server's bytes, exactly, in between.
func replay(t *testing.T, path string, ex []exchange) {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	for i, e := range ex {
		if !e.server {
			if _, err := conn.Write(e.b); err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
			continue
		}
		got := make([]byte, len(e.b))
		if n, err := io.ReadFull(conn, got); err != nil {
			t.Fatalf("exchange %d: read %x: %v, want %x", i, got[:n], err, e.b)
		}
		if !bytes.Equal(got, e.b) {
			t.Fatalf("exchange %d: server sent\n%x\nwant\n%x", i, got, e.b)
		}
	}
}

// TestProtocolExample replays PROTOCOL.md's byte-by-byte example against
// warren serve: the call as shown, then the same call with codec 0.
func TestProtocolExample(t *testing.T) {
	blocks := exampleBlocks(t, "Example: a unary call, byte by byte")
	if len(blocks) != 2 || len(blocks[0]) != 6 || len(blocks[1]) != 1 {
		t.Fatalf("example blocks %v, want 6 exchanges then 1", blocks)
	}
	s := serveTemp(t)
	replay(t, s.path, blocks[0])

	// The raw call: the first block's prefaces and client frames, codec 0.
	call := blocks[0]
	const codecAt = 10 + 1 + len("Counter.Set")
	hdr := bytes.Clone(call[2].b)
	if hdr[codecAt] != 1 {
		t.Fatalf("HEADERS %x: codec byte %d, want 1", hdr, hdr[codecAt])
	}
	hdr[codecAt] = 0
	replay(t, s.path, []exchange{call[0], call[1], {b: hdr}, call[3], blocks[1][0]})
}
