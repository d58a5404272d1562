// Package testutil holds helpers shared by the tests of several packages.
// It imports no warren package, so that any package's tests may use it.
package testutil

import "testing"

// ChunkReader returns its Chunks one Read at a time and fails the test if
// read past them (unless Err is set, which it then returns), so tests can
// prove a reader stops early.
type ChunkReader struct {
	T      testing.TB
	Chunks []string
	Err    error // returned after the chunks; nil fails the test
}

func (r *ChunkReader) Read(p []byte) (int, error) {
	if len(r.Chunks) == 0 {
		if r.Err == nil {
			r.T.Fatal("read past the bytes the test provided")
		}
		return 0, r.Err
	}
	n := copy(p, r.Chunks[0])
	r.Chunks[0] = r.Chunks[0][n:]
	if r.Chunks[0] == "" {
		r.Chunks = r.Chunks[1:]
	}
	return n, nil
}

// EmptyReader returns 0, nil from every Read: a reader that makes no
// progress.
type EmptyReader struct{}

func (EmptyReader) Read([]byte) (int, error) { return 0, nil }
