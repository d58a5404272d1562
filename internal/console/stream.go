package console

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// serveStream runs a server-streaming call for the page: POST
// Prefix+"stream?method=Service.Method" with the JSON request as the body.
// The answer is JSON lines, flushed one by one: {"message": M} for each
// message, then {"code": "ok"|CODE, "message": TEXT, "ms": DURATION}. The
// call is admitted and intercepted as any call of the method (policy,
// limits, token), with the request's headers as its metadata, and ends
// when the page stops reading.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, c bridgecore.Conn) {
	name := r.URL.Query().Get("method")
	m, _ := h.srv.Lookup("/" + name)
	if m == nil || m.Kind() != bridgecore.ServerStream {
		what := "no method"
		if m != nil {
			what = "a " + m.Kind().String() + " method"
		}
		bridgecore.WriteUnaryError(w, 0, status.Errorf(status.InvalidArgument,
			"the stream panel follows server-streaming methods; %q is %s", name, what), nil, nil)
		return
	}
	buf, held, se := httpbody.Read(w, r, uint32(h.srv.MaxMessage()))
	if se != nil {
		bridgecore.WriteUnaryError(w, 0, se, nil, nil)
		return
	}
	defer httpbody.Release(held)
	if len(buf.B) == 0 {
		buf.B = append(buf.B, bridgecore.EmptyJSON...)
	}
	start := time.Now()
	// The request's headers are the call's metadata, as for a Connect call.
	call, se := c.Admit(m, codec.IDJSON, time.Time{}, r.Header, r.Context())
	if se != nil {
		pool.Put(buf)
		bridgecore.WriteUnaryError(w, 0, se, nil, nil)
		return
	}
	securityHeaders(w.Header(), "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	st := &lineStream{w: w, rc: http.NewResponseController(w), first: buf, start: start}
	st.rc.Flush()
	call.RunStream(st)
	pool.Put(st.first)                  // nil once received
	st.rc.SetWriteDeadline(time.Time{}) // for the connection's next request
}

// stuckWrite ends a stream whose page has stopped reading, as a warren
// session stuck on a peer that does not read is closed.
var stuckWrite = 10 * time.Second

// lineStream carries a server stream's messages to the page as JSON lines
// (a bridgecore.Stream).
type lineStream struct {
	w     io.Writer
	rc    *http.ResponseController
	first *pool.Buf // the request, until received
	start time.Time

	mu    sync.Mutex // protects following
	ended bool
	line  []byte
}

func (s *lineStream) Recv() (*pool.Buf, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.first
	if b == nil {
		return nil, io.EOF
	}
	s.first = nil
	return b, nil // RunStream owns it now
}

func (s *lineStream) Send(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return status.New(status.FailedPrecondition, "send after the call ended")
	}
	s.line = append(append(append(s.line[:0], `{"message":`...), data...), "}\n"...)
	s.rc.SetWriteDeadline(time.Now().Add(stuckWrite))
	if _, err := s.w.Write(s.line); err != nil {
		return status.New(status.Canceled, "the page stopped following the stream")
	}
	if err := s.rc.Flush(); err != nil {
		return status.New(status.Canceled, "the page stopped following the stream")
	}
	return nil
}

func (s *lineStream) SendHeader([]string) error { return nil }

func (s *lineStream) End(_ []string, code status.Code, msg string, _ [][]byte, _ []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	end, _ := json.Marshal(struct {
		Code    string  `json:"code"`
		Message string  `json:"message,omitempty"`
		MS      float64 `json:"ms"`
	}{code.String(), msg, float64(time.Since(s.start).Microseconds()) / 1000})
	s.rc.SetWriteDeadline(time.Now().Add(stuckWrite))
	s.w.Write(append(end, '\n'))
	s.rc.Flush()
}
