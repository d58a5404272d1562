package rpc

import (
	"context"
	"sort"

	"github.com/warrenipc/warren/wire"
)

// Metadata is a set of key/value pairs sent with a call (request headers)
// or its reply (reply headers and trailers). Keys are case-sensitive.
type Metadata map[string][]string

// Get returns the first value of key, or "".
func (md Metadata) Get(key string) string {
	if v := md[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with value.
func (md Metadata) Set(key, value string) { md[key] = []string{value} }

// Add appends value to the values of key.
func (md Metadata) Add(key, value string) { md[key] = append(md[key], value) }

// pairs flattens md into key, value pairs in key order (nil for no metadata).
func (md Metadata) pairs() []string {
	if len(md) == 0 {
		return nil
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		for _, v := range md[k] {
			out = append(out, k, v)
		}
	}
	return out
}

// parseMetadata decodes a metadata block; nil for an empty one.
func parseMetadata(block []byte) (Metadata, error) {
	if len(block) == 0 {
		return nil, nil
	}
	md := Metadata{}
	err := wire.RangeMetadata(block, func(k, v []byte) bool {
		md.Add(string(k), string(v))
		return true
	})
	if len(md) == 0 {
		md = nil
	}
	return md, err
}

// IncomingMetadata returns the request metadata of the call whose handler
// received ctx.
func IncomingMetadata(ctx context.Context) Metadata {
	if c, ok := ctx.Value(callKey{}).(*serverCall); ok {
		md, _ := parseMetadata(c.md)
		return md
	}
	return nil
}

// SetHeader adds md to the reply headers of the call whose handler received
// ctx. It has no effect once the reply was sent.
func SetHeader(ctx context.Context, md Metadata) {
	if c, ok := ctx.Value(callKey{}).(*serverCall); ok {
		c.mdMu.Lock()
		c.header = merge(c.header, md)
		c.mdMu.Unlock()
	}
}

// SetTrailer adds md to the reply trailers of the call whose handler
// received ctx.
func SetTrailer(ctx context.Context, md Metadata) {
	if c, ok := ctx.Value(callKey{}).(*serverCall); ok {
		c.mdMu.Lock()
		c.trailer = merge(c.trailer, md)
		c.mdMu.Unlock()
	}
}

// Method returns the full method name of the call whose handler received
// ctx.
func Method(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*serverCall); ok {
		return c.h.name
	}
	return ""
}

func merge(dst, src Metadata) Metadata {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = Metadata{}
	}
	for k, v := range src {
		dst[k] = append(dst[k], v...)
	}
	return dst
}
