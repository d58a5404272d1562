package rpc

import (
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/warrenipc/warren/codec"
)

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func newTestLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{mu, b}, nil))
}

// jsonCodec sends pre-encoded bytes as if they were JSON.
func jsonCodec() codec.Codec { return rawAsJSON{} }

type rawAsJSON struct{}

func (rawAsJSON) ID() uint8                              { return codec.IDJSON }
func (rawAsJSON) Name() string                           { return "json" }
func (rawAsJSON) Append(b []byte, v any) ([]byte, error) { return codec.Raw.Append(b, v) }
func (rawAsJSON) Unmarshal(data []byte, v any) error     { return codec.Raw.Unmarshal(data, v) }
