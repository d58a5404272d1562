package bridgecore

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/warrenipc/warren/status"
)

// ConnListener is a net.Listener that accepts one connection, then blocks
// until that connection has ended (or been hijacked: call End).
type ConnListener struct {
	mu   sync.Mutex // protects conn
	conn net.Conn
	once sync.Once
	done chan struct{}
}

// NewConnListener returns a listener that accepts conn.
func NewConnListener(conn net.Conn) *ConnListener {
	return &ConnListener{conn: conn, done: make(chan struct{})}
}

func (l *ConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *ConnListener) Close() error   { return nil } // http.Server.Serve closes it on return
func (l *ConnListener) Addr() net.Addr { return dummyAddr{} }

// End makes Accept return: the connection has ended.
func (l *ConnListener) End() { l.once.Do(func() { close(l.done) }) }

// Done is closed by End.
func (l *ConnListener) Done() <-chan struct{} { return l.done }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "warren" }
func (dummyAddr) String() string  { return "warren" }

// refusedBodyMax and refusedBodyWait bound what is read of the body of a
// request refused before it is served.
const (
	refusedBodyMax  = 64 << 10
	refusedBodyWait = time.Second
)

// DrainRefused reads and discards the body of a request about to be
// refused, up to refusedBodyMax bytes within refusedBodyWait, so that the
// answer does not come with a reset of a stream the client is still
// sending (curl reports that as a framing error, not the answer). A body
// not read whole closes an HTTP/1.1 connection after the answer.
func DrainRefused(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(refusedBodyWait))
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, refusedBodyMax+1))
	if err != nil || n > refusedBodyMax {
		if r.ProtoMajor == 1 {
			w.Header()["Connection"] = HdrClose
		}
		rc.SetReadDeadline(time.Now())
		return
	}
	rc.SetReadDeadline(time.Time{})
}

// RefuseHTTPMax and RefuseHTTPWait bound what ServeRefusal reads of a
// refused HTTP peer (request line or HTTP/2 preface, headers and a small
// body), and for how long.
const (
	RefuseHTTPMax  = 16 << 10
	RefuseHTTPWait = time.Second
)

// ServeRefusal answers the first request of conn, an HTTP/1.1 or HTTP/2
// (prior knowledge) connection whose peer was refused, with se in the
// request's protocol (WriteProtocolError), reading at most RefuseHTTPMax
// bytes within RefuseHTTPWait, and closes conn: HTTP/1.1 with
// Connection: close, HTTP/2 with a GOAWAY.
func ServeRefusal(conn net.Conn, se *status.Error, errLog *log.Logger) {
	conn.SetReadDeadline(time.Now().Add(RefuseHTTPWait))
	l := NewConnListener(&limitedConn{Conn: conn, left: RefuseHTTPMax})
	answered := make(chan struct{})
	var once sync.Once
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 1 {
				w.Header()["Connection"] = HdrClose
			}
			DrainRefused(w, r)
			WriteProtocolError(w, r, 0, se)
			once.Do(func() { close(answered) })
		}),
		ReadHeaderTimeout: RefuseHTTPWait,
		MaxHeaderBytes:    RefuseHTTPMax,
		Protocols:         protocols,
		ErrorLog:          errLog,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.End()
			}
		},
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		hs.Serve(l)
	}()
	t := time.NewTimer(RefuseHTTPWait)
	select {
	case <-answered:
	case <-l.Done():
	case <-t.C:
	}
	t.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), RefuseHTTPWait)
	hs.Shutdown(ctx) // an HTTP/2 connection gets its GOAWAY once the answer is out
	cancel()
	hs.Close()
	l.End()
	<-served
	conn.Close()
}

// limitedConn is a connection that reads at most left bytes more.
type limitedConn struct {
	net.Conn
	left int
}

func (c *limitedConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.EOF
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= n
	return n, err
}
