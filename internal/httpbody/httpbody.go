// Package httpbody reads the request bodies of the HTTP bridge's unary
// calls within bounds: a size limit, a budget of bytes held over all
// connections and a time limit (Read), decompresses gzipped ones (Gunzip),
// guards the connection against request smuggling (Guard), and replays the
// bytes the preface reader took from a connection that turned out to speak
// HTTP (NewReplayConn).
package httpbody

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// Budget bounds the request body bytes the readers hold at once, over all
// connections; a body that would go over it is refused with
// ResourceExhausted. The budget is taken as the data arrives, and a large
// body's memory is given pages only as they are filled (Chunk), so a
// declared Content-Length costs nothing until it is sent.
const Budget = 64 << 20

// ReadTimeout bounds the time to read a request body once its headers are
// in: a client sending a byte a second is cut off.
const ReadTimeout = 10 * time.Second

// ReadTimeoutNS, if set, replaces ReadTimeout (tests).
var ReadTimeoutNS atomic.Int64

// Deadline is how long a request body may take to arrive: ReadTimeout, or
// ReadTimeoutNS when set.
func Deadline() time.Duration { return readTimeout() }

func readTimeout() time.Duration {
	if v := ReadTimeoutNS.Load(); v > 0 {
		return time.Duration(v)
	}
	return ReadTimeout
}

// held counts the body bytes held by the readers of all servers.
var held atomic.Int64

// Read reads r's body (at most limit bytes) as it arrives, within Budget
// and ReadTimeout. n is the budget the
// buffer takes: give it back with Release(n) once the buffer is no longer
// used (it is 0 on error).
func Read(w http.ResponseWriter, r *http.Request, limit uint32) (buf *pool.Buf, n int64, se *status.Error) {
	if r.ContentLength > int64(limit) {
		return nil, 0, status.Errorf(status.ResourceExhausted, "request body of %d bytes is over the limit of %d", r.ContentLength, limit)
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(readTimeout()))
	buf, n, se = readBody(r, limit)
	if se == nil {
		rc.SetReadDeadline(time.Time{})
	} else {
		// The connection closes after the reply: let net/http read
		// nothing more of the body (it would wait for it).
		rc.SetReadDeadline(time.Now())
	}
	return buf, n, se
}

// Release gives back n bytes of the budget that Read took.
func Release(n int64) { held.Add(-n) }

// growBudget raises what a body holds of Budget to n bytes, if the budget
// allows.
func growBudget(h *int64, n int) bool {
	add := int64(n) - *h
	if held.Add(add) > Budget {
		held.Add(-add)
		return false
	}
	*h = int64(n)
	return true
}

func budgetError() *status.Error {
	return status.New(status.ResourceExhausted, "the server is reading too many request bodies; try again")
}

// Chunk is the largest body read into a pooled buffer; a larger one is
// read into memory mapped for it alone (mapBody), which the system gives
// pages as the bytes arrive and takes back whole when it is released.
// Pooled buffers that doubled as a body arrived left every step's buffer
// behind in another size class, and the process grew by three times the
// budget under a load that the budget held.
const Chunk = 64 << 10

func readBody(r *http.Request, limit uint32) (*pool.Buf, int64, *status.Error) {
	var h int64
	var buf *pool.Buf
	fail := func(se *status.Error) (*pool.Buf, int64, *status.Error) {
		pool.Put(buf)
		held.Add(-h)
		return nil, 0, se
	}
	want := int(limit) + 1 // unknown length: read one past the limit to see it
	if r.ContentLength >= 0 {
		want = int(r.ContentLength)
	}
	if want <= Chunk || r.ContentLength < 0 {
		buf = pool.Get(min(want, Chunk)) // of unknown length: mapped if larger
	} else {
		buf = mapBody(want)
	}
	n := 0 // bytes read
	for n < want {
		// The budget is taken as the bytes arrive, a piece at a time.
		if !growBudget(&h, min(n+Chunk, want)) {
			return fail(budgetError())
		}
		if int(h) > len(buf.B) {
			m := mapBody(want)
			copy(m.B, buf.B[:n])
			pool.Put(buf)
			buf = m
		}
		k, err := io.ReadFull(r.Body, buf.B[n:int(h)])
		n += k
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fail(readError(r, err))
		}
	}
	if r.ContentLength >= 0 && n < want {
		return fail(&status.Error{Code: status.InvalidArgument, Message: "request body ended early"})
	}
	if n > int(limit) {
		return fail(status.Errorf(status.ResourceExhausted, "request body of more than %d bytes is over the limit of %d", limit, limit))
	}
	buf.B = buf.B[:n]
	r.Body.Close()
	return buf, h, nil
}

// readError turns an error reading a request body into a status:
// malformed chunked encoding is the client's error (400), a body that
// does not arrive in time is DeadlineExceeded.
func readError(r *http.Request, err error) *status.Error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return &status.Error{Code: status.DeadlineExceeded, Message: "the request body did not arrive within " + readTimeout().String(), Cause: err}
	case strings.Contains(err.Error(), "chunk"):
		return &status.Error{Code: status.InvalidArgument, Message: "malformed chunked request body: " + err.Error(), Cause: err}
	case r.Context().Err() != nil:
		return &status.Error{Code: status.Canceled, Message: "the client went away", Cause: err}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &status.Error{Code: status.InvalidArgument, Message: "request body ended early", Cause: err}
	}
	return &status.Error{Code: status.Unavailable, Message: "reading the request: " + err.Error(), Cause: err}
}

var zipReaders sync.Pool // *gzip.Reader

// Gunzip decompresses a gzipped request message of at most limit bytes.
func Gunzip(data []byte, limit uint32) (*pool.Buf, *status.Error) {
	zr, _ := zipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = zr.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return nil, status.Errorf(status.InvalidArgument, "the gzipped request body is malformed: %v", err)
	}
	defer zipReaders.Put(zr)
	buf := pool.Get(min(4*len(data)+64, int(limit)+1))
	n := 0
	for {
		if n == len(buf.B) {
			if n > int(limit) {
				pool.Put(buf)
				return nil, status.Errorf(status.ResourceExhausted, "request message of more than %d bytes is over the limit of %d", limit, limit)
			}
			b := pool.Get(min(2*n, int(limit)+1))
			copy(b.B, buf.B[:n])
			pool.Put(buf)
			buf = b
		}
		k, err := zr.Read(buf.B[n:])
		n += k
		if err == io.EOF {
			break
		}
		if err != nil {
			pool.Put(buf)
			return nil, status.Errorf(status.InvalidArgument, "the gzipped request body is malformed: %v", err)
		}
	}
	if n > int(limit) {
		pool.Put(buf)
		return nil, status.Errorf(status.ResourceExhausted, "request message of more than %d bytes is over the limit of %d", limit, limit)
	}
	buf.B = buf.B[:n]
	return buf, nil
}

// SetDeadline bounds the arrival of r's body by Deadline, lifted once the
// body has been read to its end.
func SetDeadline(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(Deadline())) == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
}

// deadlineBody is a request body read under a deadline that is lifted at
// its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF && !d.done {
		d.done = true
		d.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
