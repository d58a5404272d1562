//go:build !unix

package httpbody

import "github.com/warrenipc/warren/internal/pool"

// mapBody returns a buffer of n bytes.
func mapBody(n int) *pool.Buf { return pool.Get(n) }
