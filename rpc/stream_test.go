package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// Streaming calls: the three kinds of stream, half-close, status and
// metadata at the end of a stream, deadlines, cancellation, interceptors,
// introspection and flow control, over unix sockets and (a subset) TCP.

type seqMsg struct {
	Seq  int    `json:"seq"`
	Text string `json:"text,omitempty"`
}

// newStreamServer registers the streaming methods most tests use:
//
//	Str.Count (server stream): replies 0 .. req.Seq-1
//	Str.Sum   (client stream): the sum of the requests' Seq, and their count in Text
//	Str.Echo  (bidi): echoes every message until the client half-closes
//	Str.EchoPipe (bidi): the same, receiving and sending on two goroutines
//	Str.Raw   (bidi, raw bytes): echoes every message
//	Str.Unary (unary): echoes the request
func newStreamServer(opts *ServerOptions) *Server {
	srv := NewServer(opts)
	HandleServerStream(srv, "Str.Count", func(ctx context.Context, req *seqMsg, st *Stream[seqMsg, seqMsg]) error {
		for i := range req.Seq {
			if err := st.Send(&seqMsg{Seq: i}); err != nil {
				return err
			}
		}
		return nil
	})
	HandleClientStream(srv, "Str.Sum", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) (*seqMsg, error) {
		sum, n := 0, 0
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return &seqMsg{Seq: sum, Text: fmt.Sprint(n)}, nil
			}
			if err != nil {
				return nil, err
			}
			sum += m.Seq
			n++
		}
	})
	HandleBidiStream(srv, "Str.Echo", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	HandleBidiStream(srv, "Str.EchoPipe", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		ch := make(chan *seqMsg, 16)
		recvErr := make(chan error, 1)
		go func() {
			defer close(ch)
			for {
				m, err := st.Recv()
				if err != nil {
					if err != io.EOF {
						recvErr <- err
					}
					return
				}
				select {
				case ch <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
		for m := range ch {
			if err := st.Send(m); err != nil {
				for range ch {
				}
				return err
			}
		}
		select {
		case err := <-recvErr:
			return err
		default:
			return nil
		}
	})
	HandleBidiStream(srv, "Str.Raw", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	Handle(srv, "Str.Unary", func(ctx context.Context, req *seqMsg) (*seqMsg, error) { return req, nil })
	return srv
}

// tcpServer serves srv on a TCP port of the loopback interface, listening
// with transport.Listen and dialing with Dial as users do, and returns a
// client made with copts.
func tcpServer(t testing.TB, srv *Server, copts *ClientOptions) *Client {
	t.Helper()
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	useMode(t, srv)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	c, err := Dial("tcp://"+l.Addr().(*net.TCPAddr).String(), copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// streamTransports are the transports the core behaviours run over.
var streamTransports = []struct {
	name  string
	serve func(t testing.TB, srv *Server, copts *ClientOptions) *Client
}{
	{"unix", testServer},
	{"tcp", tcpServer},
}

// openServerStream starts a server-streaming call: one request, then the
// send side is closed.
func openServerStream[Req, Resp any](ctx context.Context, t testing.TB, c *Client, method string, req *Req, opts ...CallOption) *ClientStream[Req, Resp] {
	t.Helper()
	cs, err := NewStream[Req, Resp](ctx, c, method, opts...)
	if err != nil {
		t.Fatalf("NewStream(%s): %v", method, err)
	}
	if err := cs.Send(req); err != nil {
		t.Fatalf("%s: Send: %v", method, err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatalf("%s: CloseSend: %v", method, err)
	}
	return cs
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStreamKinds(t *testing.T) {
	for _, tr := range streamTransports {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.serve(t, newStreamServer(nil), nil)
			t.Run("ServerStream", func(t *testing.T) { must(t, streamServerStream(c)) })
			t.Run("ClientStream", func(t *testing.T) { must(t, streamClientStream(c)) })
			t.Run("BidiEcho", func(t *testing.T) { must(t, streamBidiEcho(c, "Str.Echo", 10_000)) })
			// The handler receives and sends on two goroutines.
			t.Run("BidiEchoTwoGoroutines", func(t *testing.T) { must(t, streamBidiEcho(c, "Str.EchoPipe", 2_000)) })
			t.Run("RawBidi", func(t *testing.T) { must(t, streamRawBidi(c)) })
		})
	}
}

// streamServerStream: N replies in order, then io.EOF, and io.EOF again.
func streamServerStream(c *Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{0, 1, 500} {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "Str.Count")
		if err == nil {
			err = cs.Send(&seqMsg{Seq: n})
		}
		if err == nil {
			err = cs.CloseSend()
		}
		if err != nil {
			return fmt.Errorf("n=%d: opening: %w", n, err)
		}
		for i := range n {
			m, err := cs.Recv()
			if err != nil {
				return fmt.Errorf("n=%d: Recv %d: %w", n, i, err)
			}
			if m.Seq != i {
				return fmt.Errorf("n=%d: reply %d has seq %d", n, i, m.Seq)
			}
		}
		for range 2 {
			if m, err := cs.Recv(); err != io.EOF {
				return fmt.Errorf("n=%d: after the last reply: %v %v, want io.EOF", n, m, err)
			}
		}
		if cs.Trailer() != nil {
			return fmt.Errorf("n=%d: trailer %v without SetTrailer", n, cs.Trailer())
		}
	}
	return nil
}

// streamClientStream: the sum of N requests, with CloseAndRecv.
func streamClientStream(c *Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{0, 1, 1000} {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "Str.Sum")
		if err != nil {
			return err
		}
		want := 0
		for i := range n {
			want += i
			if err := cs.Send(&seqMsg{Seq: i}); err != nil {
				return fmt.Errorf("n=%d: Send %d: %w", n, i, err)
			}
		}
		r, err := cs.CloseAndRecv()
		if err != nil {
			return fmt.Errorf("n=%d: CloseAndRecv: %w", n, err)
		}
		if r.Seq != want || r.Text != fmt.Sprint(n) {
			return fmt.Errorf("n=%d: reply %+v, want sum %d of %d", n, r, want, n)
		}
		if _, err := cs.Recv(); err != io.EOF {
			return fmt.Errorf("n=%d: Recv after CloseAndRecv: %v, want io.EOF", n, err)
		}
	}
	return nil
}

// streamBidiEcho sends n messages from one goroutine while another receives
// the echoes: every message must come back exactly once, in order.
func streamBidiEcho(c *Client, method string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := NewStream[seqMsg, seqMsg](ctx, c, method)
	if err != nil {
		return err
	}
	defer cs.Close()
	sendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := cs.Send(&seqMsg{Seq: i, Text: "m"}); err != nil {
				sendErr <- fmt.Errorf("Send %d: %w", i, err)
				return
			}
		}
		sendErr <- cs.CloseSend()
	}()
	for i := range n {
		m, err := cs.Recv()
		if err != nil {
			return fmt.Errorf("Recv %d: %w", i, err)
		}
		if m.Seq != i || m.Text != "m" {
			return fmt.Errorf("echo %d is %+v: lost, duplicated or reordered", i, m)
		}
	}
	if m, err := cs.Recv(); err != io.EOF {
		return fmt.Errorf("after %d echoes: %v %v, want io.EOF", n, m, err)
	}
	return <-sendErr
}

// streamRawBidi echoes raw messages of sizes around the frame size and
// larger than the stream window, so that messages are chunked and flow
// control is exercised inside one message.
func streamRawBidi(c *Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewStream[[]byte, []byte](ctx, c, "Str.Raw", WithCodec(codec.Raw))
	if err != nil {
		return err
	}
	defer cs.Close()
	sizes := []int{0, 1, 64<<10 - 4, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 5}
	sendErr := make(chan error, 1)
	go func() {
		for _, n := range sizes {
			m := make([]byte, n)
			for i := range m {
				m[i] = byte(i*31 + n)
			}
			if err := cs.Send(&m); err != nil {
				sendErr <- fmt.Errorf("Send %d bytes: %w", n, err)
				return
			}
		}
		sendErr <- cs.CloseSend()
	}()
	for _, n := range sizes {
		m, err := cs.Recv()
		if err != nil {
			return fmt.Errorf("Recv %d bytes: %w", n, err)
		}
		if len(*m) != n {
			return fmt.Errorf("echo of %d bytes has %d", n, len(*m))
		}
		for i, b := range *m {
			if b != byte(i*31+n) {
				return fmt.Errorf("echo of %d bytes differs at %d", n, i)
			}
		}
	}
	if _, err := cs.Recv(); err != io.EOF {
		return fmt.Errorf("end: %v", err)
	}
	return <-sendErr
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStreamServerStreamWithoutRequest(t *testing.T) {
	c := testServer(t, newStreamServer(nil), nil)
	cs, err := NewStream[seqMsg, seqMsg](testCtx(t, 5*time.Second), c, "Str.Count")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("server stream without a request: %v, want InvalidArgument", err)
	}
}

// TestStreamHalfClose: after CloseSend the handler reads io.EOF and can
// still send; the client can still receive; a Send after CloseSend fails
// with a clear error and sends nothing.
func TestStreamHalfClose(t *testing.T) {
	srv := NewServer(nil)
	HandleBidiStream(srv, "Str.Half", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		n := 0
		for {
			_, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			n++
		}
		// Still io.EOF on a second Recv.
		if _, err := st.Recv(); err != io.EOF {
			return status.Errorf(status.Internal, "second Recv after the end: %v", err)
		}
		// The send side is still open after the client's half-close.
		for i := range 3 {
			if err := st.Send(&seqMsg{Seq: n*100 + i, Text: "after-eof"}); err != nil {
				return err
			}
		}
		return nil
	})
	c := testServer(t, srv, nil)
	cs, err := NewStream[seqMsg, seqMsg](testCtx(t, 5*time.Second), c, "Str.Half")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cs.Send(&seqMsg{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatalf("second CloseSend: %v", err)
	}
	err = cs.Send(&seqMsg{Seq: 99})
	if se := status.FromError(err); se == nil || se.Code != status.FailedPrecondition || !strings.Contains(se.Message, "CloseSend") {
		t.Fatalf("Send after CloseSend: %v, want FailedPrecondition naming CloseSend", err)
	}
	for i := range 3 {
		m, err := cs.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if m.Seq != 300+i || m.Text != "after-eof" {
			t.Fatalf("reply %d: %+v (the server saw the end after %d messages)", i, m, m.Seq/100)
		}
	}
	if _, err := cs.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// TestStreamStatusAtEnd: a handler that sends some messages and then fails
// ends the stream with its status; the client receives every message sent
// before it, then the *status.Error with code, message, details and the
// trailers.
func TestStreamStatusAtEnd(t *testing.T) {
	srv := NewServer(nil)
	HandleServerStream(srv, "Str.FailAfter", func(ctx context.Context, req *seqMsg, st *Stream[seqMsg, seqMsg]) error {
		for i := range req.Seq {
			if err := st.Send(&seqMsg{Seq: i}); err != nil {
				return err
			}
		}
		SetTrailer(ctx, Metadata{"why": {"quota"}})
		return &status.Error{Code: status.ResourceExhausted, Message: "out of quota after " + fmt.Sprint(req.Seq),
			Details: [][]byte{[]byte(`{"limit":3}`), []byte("second")}}
	})
	HandleClientStream(srv, "Str.RejectSecond", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) (*seqMsg, error) {
		for i := 0; ; i++ {
			m, err := st.Recv()
			if err != nil {
				return nil, err
			}
			if i == 1 {
				return nil, status.Errorf(status.InvalidArgument, "bad message %d", m.Seq)
			}
		}
	})
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 5*time.Second)
	for _, n := range []int{0, 3} {
		cs := openServerStream[seqMsg, seqMsg](ctx, t, c, "Str.FailAfter", &seqMsg{Seq: n})
		for i := range n {
			m, err := cs.Recv()
			if err != nil || m.Seq != i {
				t.Fatalf("n=%d: Recv %d: %+v %v", n, i, m, err)
			}
		}
		_, err := cs.Recv()
		var se *status.Error
		if !errors.As(err, &se) {
			t.Fatalf("n=%d: end of stream: %T %v, want *status.Error", n, err, err)
		}
		if se.Code != status.ResourceExhausted || se.Message != fmt.Sprintf("out of quota after %d", n) ||
			len(se.Details) != 2 || string(se.Details[0]) != `{"limit":3}` || string(se.Details[1]) != "second" {
			t.Fatalf("n=%d: status %#v", n, se)
		}
		if cs.Trailer().Get("why") != "quota" {
			t.Fatalf("n=%d: trailer %v", n, cs.Trailer())
		}
		if _, err2 := cs.Recv(); err2 != err {
			t.Fatalf("n=%d: Recv after the end: %v, want the same %v", n, err2, err)
		}
	}

	cs, err := NewStream[seqMsg, seqMsg](ctx, c, "Str.RejectSecond")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := cs.Send(&seqMsg{Seq: 10 + i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CloseAndRecv(); status.CodeOf(err) != status.InvalidArgument || !strings.Contains(err.Error(), "bad message 11") {
		t.Fatalf("CloseAndRecv: %v, want InvalidArgument bad message 11", err)
	}
}

// TestStreamSendAfterServerEnded: a client-streaming handler that rejects
// the call early (after one message) ends the stream with its status. A
// client that keeps sending, in the usual loop of Send until error then
// CloseAndRecv, must get an error from Send soon after the server ended the
// call and then the server's status, rather than block in Send for
// flow-control credit that will never come.
func TestStreamSendAfterServerEnded(t *testing.T) {
	srv := NewServer(nil)
	HandleClientStream(srv, "Str.RejectFirst", func(ctx context.Context, st *Stream[[]byte, []byte]) (*[]byte, error) {
		if _, err := st.Recv(); err != nil {
			return nil, err
		}
		return nil, status.New(status.InvalidArgument, "rejected at the first message")
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cs, err := NewStream[[]byte, []byte](ctx, c, "Str.RejectFirst", WithCodec(codec.Raw))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	msg := make([]byte, 32<<10)
	start := time.Now()
	var sendErr error
	sent := 0
	for sent < 2048 { // 64 MiB in all: far more than any window
		if sendErr = cs.Send(&msg); sendErr != nil {
			break
		}
		sent++
	}
	el := time.Since(start)
	_, recvErr := cs.CloseAndRecv()
	if recvErr == nil {
		_, recvErr = cs.Recv()
	}
	t.Logf("sent %d messages; Send returned %v after %v; then %v", sent, sendErr, el.Round(time.Millisecond), recvErr)
	if sendErr == nil {
		t.Fatalf("the server ended the call, yet %d Sends (64 MiB) all succeeded", sent)
	}
	if el > 2*time.Second || status.CodeOf(sendErr) == status.DeadlineExceeded {
		t.Errorf("Send blocked until the context's deadline (%v, %v) although the server had ended the call", el.Round(time.Millisecond), sendErr)
	}
	if status.CodeOf(sendErr) != status.InvalidArgument && status.CodeOf(recvErr) != status.InvalidArgument {
		t.Errorf("the server's status (InvalidArgument) was lost: Send %v, Recv %v", sendErr, recvErr)
	}
}

// TestStreamSendAfterEnd: once Recv has returned the call's status, Send
// must not report a cancellation the client never asked for: it returns
// the call's status (or io.EOF), as the end of the call is the cause.
func TestStreamSendAfterEnd(t *testing.T) {
	srv := NewServer(nil)
	HandleBidiStream(srv, "End.NotFound", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		return status.New(status.NotFound, "no such thing")
	})
	c := testServer(t, srv, nil)
	cs, err := NewStream[seqMsg, seqMsg](testCtx(t, 5*time.Second), c, "End.NotFound")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); status.CodeOf(err) != status.NotFound {
		t.Fatalf("Recv: %v", err)
	}
	err = cs.Send(&seqMsg{})
	if err == nil {
		t.Fatal("Send after the end of the call succeeded")
	}
	if !errors.Is(err, io.EOF) && status.CodeOf(err) != status.NotFound {
		t.Fatalf("Send after the call ended with NotFound: %v, want the call's status (or io.EOF)", err)
	}
}

// TestStreamMetadata: request metadata reaches the handler of every kind of
// stream; headers set before the first Send arrive with the first message
// (or with the end of the call if there is none); headers set after it are
// not sent; trailers arrive with the end, on success and on error.
func TestStreamMetadata(t *testing.T) {
	srv := NewServer(nil)
	HandleServerStream(srv, "MD.Server", func(ctx context.Context, req *seqMsg, st *Stream[seqMsg, seqMsg]) error {
		in := IncomingMetadata(ctx)
		SetHeader(ctx, Metadata{"h": {"srv-" + in.Get("k")}, "n": {fmt.Sprint(len(in["k"]))}})
		if err := st.Send(&seqMsg{Seq: 1}); err != nil {
			return err
		}
		SetHeader(ctx, Metadata{"late": {"x"}}) // after the first Send: not sent
		if err := st.Send(&seqMsg{Seq: 2}); err != nil {
			return err
		}
		SetTrailer(ctx, Metadata{"t": {"a", "b"}})
		if req.Text == "fail" {
			return status.New(status.Aborted, "as asked")
		}
		return nil
	})
	HandleClientStream(srv, "MD.Client", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) (*seqMsg, error) {
		in := IncomingMetadata(ctx)
		n := 0
		for {
			_, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			n++
		}
		SetHeader(ctx, Metadata{"h": {"cli-" + in.Get("k")}})
		SetTrailer(ctx, Metadata{"t": {fmt.Sprint(n)}})
		return &seqMsg{Seq: n}, nil
	})
	HandleBidiStream(srv, "MD.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		in := IncomingMetadata(ctx)
		SetHeader(ctx, Metadata{"h": {"bidi-" + in.Get("k")}, "method": {Method(ctx)}})
		for {
			m, err := st.Recv()
			if err == io.EOF {
				SetTrailer(ctx, Metadata{"t": {"done"}})
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	HandleBidiStream(srv, "MD.NoMessages", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		SetHeader(ctx, Metadata{"h": {"empty"}})
		SetTrailer(ctx, Metadata{"t": {"empty"}})
		return nil
	})
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 5*time.Second)
	md := WithMetadata(Metadata{"k": {"v1", "v2"}})

	t.Run("ServerStream", func(t *testing.T) {
		for _, fail := range []bool{false, true} {
			req := &seqMsg{}
			if fail {
				req.Text = "fail"
			}
			cs := openServerStream[seqMsg, seqMsg](ctx, t, c, "MD.Server", req, md)
			if _, err := cs.Recv(); err != nil {
				t.Fatal(err)
			}
			if h := cs.Header(); h.Get("h") != "srv-v1" || h.Get("n") != "2" {
				t.Fatalf("header after the first message: %v", h)
			}
			if cs.Trailer() != nil {
				t.Fatalf("trailer before the end: %v", cs.Trailer())
			}
			if _, err := cs.Recv(); err != nil {
				t.Fatal(err)
			}
			_, err := cs.Recv()
			if fail && status.CodeOf(err) != status.Aborted || !fail && err != io.EOF {
				t.Fatalf("fail=%v: end %v", fail, err)
			}
			if tr := cs.Trailer(); len(tr["t"]) != 2 || tr["t"][0] != "a" || tr["t"][1] != "b" {
				t.Fatalf("fail=%v: trailer %v", fail, tr)
			}
			if h := cs.Header(); h.Get("late") != "" {
				t.Fatalf("a header set after the first Send was sent: %v", h)
			}
		}
	})
	t.Run("ClientStream", func(t *testing.T) {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "MD.Client", md)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if err := cs.Send(&seqMsg{Seq: i}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := cs.CloseAndRecv()
		if err != nil || r.Seq != 4 {
			t.Fatalf("CloseAndRecv: %+v %v", r, err)
		}
		if cs.Header().Get("h") != "cli-v1" || cs.Trailer().Get("t") != "4" {
			t.Fatalf("header %v trailer %v", cs.Header(), cs.Trailer())
		}
	})
	t.Run("Bidi", func(t *testing.T) {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "MD.Bidi", md)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Send(&seqMsg{Seq: 7}); err != nil {
			t.Fatal(err)
		}
		if m, err := cs.Recv(); err != nil || m.Seq != 7 {
			t.Fatalf("%+v %v", m, err)
		}
		if h := cs.Header(); h.Get("h") != "bidi-v1" || h.Get("method") != "MD.Bidi" {
			t.Fatalf("header %v", h)
		}
		cs.CloseSend()
		if _, err := cs.Recv(); err != io.EOF {
			t.Fatal(err)
		}
		if cs.Trailer().Get("t") != "done" {
			t.Fatalf("trailer %v", cs.Trailer())
		}
	})
	t.Run("NoMessages", func(t *testing.T) {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "MD.NoMessages", md)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Recv(); err != io.EOF {
			t.Fatal(err)
		}
		if cs.Header().Get("h") != "empty" || cs.Trailer().Get("t") != "empty" {
			t.Fatalf("header %v trailer %v", cs.Header(), cs.Trailer())
		}
	})
}

// TestStreamDeadline: on every kind of stream the handler's context carries
// the client's deadline; when it passes, the client's Recv (and Send)
// return DeadlineExceeded, the handler's context is done and the handler's
// blocked Recv returns.
func TestStreamDeadline(t *testing.T) {
	type seen struct {
		left    time.Duration // time to the deadline when the handler started
		recvErr error         // the error of the handler's blocked Recv, if any
		ctxErr  error
	}
	report := make(chan seen, 1)
	start := func(ctx context.Context) seen {
		d, ok := ctx.Deadline()
		if !ok {
			return seen{left: -1}
		}
		return seen{left: time.Until(d)}
	}
	srv := NewServer(nil)
	HandleServerStream(srv, "DL.Server", func(ctx context.Context, _ *seqMsg, st *Stream[seqMsg, seqMsg]) error {
		s := start(ctx)
		if err := st.Send(&seqMsg{Seq: 1}); err != nil {
			return err
		}
		<-ctx.Done()
		s.ctxErr = ctx.Err()
		report <- s
		return ctx.Err()
	})
	HandleClientStream(srv, "DL.Client", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) (*seqMsg, error) {
		s := start(ctx)
		_, s.recvErr = st.Recv() // the one message
		if s.recvErr == nil {
			_, s.recvErr = st.Recv() // blocks: the client sends no more
		}
		s.ctxErr = ctx.Err()
		report <- s
		return nil, s.recvErr
	})
	HandleBidiStream(srv, "DL.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		s := start(ctx)
		m, err := st.Recv()
		if err == nil {
			err = st.Send(m)
		}
		if err == nil {
			_, s.recvErr = st.Recv() // blocks
		}
		s.ctxErr = ctx.Err()
		report <- s
		return s.recvErr
	})
	c := testServer(t, srv, nil)
	const timeout = 300 * time.Millisecond
	check := func(t *testing.T, begin time.Time, err error, blockedRecv bool) {
		t.Helper()
		if status.CodeOf(err) != status.DeadlineExceeded {
			t.Fatalf("client: %v, want DeadlineExceeded", err)
		}
		if el := time.Since(begin); el < timeout-10*time.Millisecond || el > timeout+2*time.Second {
			t.Fatalf("the stream ended after %v with a %v deadline", el, timeout)
		}
		s := waitFor(t, report, 5*time.Second, "the handler to end")
		if s.left <= 0 || s.left > timeout {
			t.Fatalf("handler's deadline: %v from its start, want in (0, %v]", s.left, timeout)
		}
		if s.ctxErr == nil {
			t.Fatal("handler's context not done")
		}
		if blockedRecv {
			if c := status.CodeOf(s.recvErr); c != status.DeadlineExceeded && c != status.Canceled {
				t.Fatalf("handler's blocked Recv returned %v", s.recvErr)
			}
		}
	}
	t.Run("ServerStream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		begin := time.Now()
		cs := openServerStream[seqMsg, seqMsg](ctx, t, c, "DL.Server", &seqMsg{})
		if _, err := cs.Recv(); err != nil {
			t.Fatal(err)
		}
		_, err := cs.Recv()
		check(t, begin, err, false)
	})
	t.Run("ClientStream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		begin := time.Now()
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "DL.Client")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Send(&seqMsg{}); err != nil {
			t.Fatal(err)
		}
		_, err = cs.Recv() // the reply never comes: the client did not half-close
		check(t, begin, err, true)
		if err := cs.Send(&seqMsg{}); err == nil {
			t.Fatal("Send after the deadline succeeded")
		}
	})
	t.Run("Bidi", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		begin := time.Now()
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "DL.Bidi")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Send(&seqMsg{Seq: 3}); err != nil {
			t.Fatal(err)
		}
		if m, err := cs.Recv(); err != nil || m.Seq != 3 {
			t.Fatalf("%+v %v", m, err)
		}
		_, err = cs.Recv()
		check(t, begin, err, true)
	})
	t.Run("Expired", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := NewStream[seqMsg, seqMsg](ctx, c, "DL.Bidi"); status.CodeOf(err) != status.DeadlineExceeded {
			t.Fatalf("NewStream with an expired context: %v", err)
		}
	})
}

// TestStreamCancelWithoutReading: a client that cancels its context while
// not calling Recv or Send (nobody on the client reads the connection) must
// still cancel the handler promptly, for every kind of stream.
func TestStreamCancelWithoutReading(t *testing.T) {
	started := make(chan string, 1)
	ended := make(chan string, 1)
	block := func(ctx context.Context, name string) error {
		started <- name
		<-ctx.Done()
		ended <- name
		return ctx.Err()
	}
	srv := NewServer(nil)
	HandleServerStream(srv, "CN.Server", func(ctx context.Context, _ *seqMsg, st *Stream[seqMsg, seqMsg]) error {
		if err := st.Send(&seqMsg{}); err != nil { // a reply the client never reads
			return err
		}
		return block(ctx, "server")
	})
	HandleClientStream(srv, "CN.Client", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) (*seqMsg, error) {
		return nil, block(ctx, "client")
	})
	HandleBidiStream(srv, "CN.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		return block(ctx, "bidi")
	})
	c := testServer(t, srv, nil)
	for _, kind := range []string{"server", "client", "bidi"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cs *ClientStream[seqMsg, seqMsg]
			switch kind {
			case "server":
				cs = openServerStream[seqMsg, seqMsg](ctx, t, c, "CN.Server", &seqMsg{})
			case "client":
				var err error
				if cs, err = NewStream[seqMsg, seqMsg](ctx, c, "CN.Client"); err != nil {
					t.Fatal(err)
				}
				if err := cs.Send(&seqMsg{}); err != nil {
					t.Fatal(err)
				}
			case "bidi":
				var err error
				if cs, err = NewStream[seqMsg, seqMsg](ctx, c, "CN.Bidi"); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, started, 5*time.Second, "the handler to start")
			time.Sleep(20 * time.Millisecond) // let the unread reply arrive
			begin := time.Now()
			cancel()
			waitFor(t, ended, 2*time.Second, "the handler to see the cancel")
			t.Logf("handler canceled %v after the client's cancel", time.Since(begin))
			if _, err := cs.Recv(); status.CodeOf(err) != status.Canceled {
				t.Fatalf("client Recv after cancel: %v, want Canceled", err)
			}
			waitCalls(t, srv, 0)
		})
	}
}

// TestStreamCloseCancelsServer: ClientStream.Close abandons the call: the
// handler's context ends and its blocked Recv returns; the client's Recv
// returns Canceled; the connection stays usable.
func TestStreamCloseCancelsServer(t *testing.T) {
	type result struct{ ctxErr, recvErr error }
	res := make(chan result, 1)
	srv := newStreamServer(nil)
	HandleBidiStream(srv, "CL.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if err := st.Send(m); err != nil {
			return err
		}
		_, err = st.Recv() // blocks until the client closes
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		res <- result{ctx.Err(), err}
		return err
	})
	c := testServer(t, srv, nil)
	cs, err := NewStream[seqMsg, seqMsg](context.Background(), c, "CL.Bidi")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&seqMsg{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	cs.Close() // idempotent
	r := waitFor(t, res, 2*time.Second, "the handler to see Close")
	if r.ctxErr == nil || r.recvErr == nil || r.recvErr == io.EOF {
		t.Fatalf("handler after Close: ctx %v, Recv %v", r.ctxErr, r.recvErr)
	}
	if _, err := cs.Recv(); status.CodeOf(err) != status.Canceled {
		t.Fatalf("Recv after Close: %v, want Canceled", err)
	}
	if err := cs.Send(&seqMsg{}); err == nil {
		t.Fatal("Send after Close succeeded")
	}
	if r, err := Call[seqMsg, seqMsg](testCtx(t, 5*time.Second), c, "Str.Unary", &seqMsg{Seq: 5}); err != nil || r.Seq != 5 {
		t.Fatalf("unary call after Close: %+v %v", r, err)
	}
	waitCalls(t, srv, 0)
}

// TestStreamCancelOrder: when the client cancels, the handler's context is
// done by the time its blocked Recv returns the cancellation, so that a
// handler can tell "the client went away" (ctx.Err() != nil) from a failure.
// The race is narrow, so the call is repeated.
func TestStreamCancelOrder(t *testing.T) {
	started := make(chan struct{}, 1)
	type result struct{ recvErr, ctxErr error }
	res := make(chan result, 1)
	srv := NewServer(&ServerOptions{CallRate: -1})
	HandleBidiStream(srv, "CO.Block", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		started <- struct{}{}
		_, err := st.Recv()
		res <- result{err, ctx.Err()}
		return err
	})
	c := testServer(t, srv, nil)
	bad := 0
	var example result
	const n = 2000
	for range n {
		cs, err := NewStream[seqMsg, seqMsg](context.Background(), c, "CO.Block")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, started, 5*time.Second, "the handler")
		cs.Close()
		r := waitFor(t, res, 5*time.Second, "the handler's Recv")
		if r.recvErr == nil || r.recvErr == io.EOF {
			t.Fatalf("handler's Recv after the client's Close: %v", r.recvErr)
		}
		if r.ctxErr == nil {
			bad++
			example = r
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d times the handler's Recv returned %q while its context was not yet done", bad, n, example.recvErr)
	}
}

// TestStreamHandlerPanic: a panicking stream handler ends its call with
// Internal after the messages it sent; the panic is logged and counted and
// the server goes on.
func TestStreamHandlerPanic(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	srv := newStreamServer(&ServerOptions{Logger: newTestLogger(&logged, &mu)})
	HandleBidiStream(srv, "PN.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		for i := range 2 {
			if err := st.Send(&seqMsg{Seq: i}); err != nil {
				return err
			}
		}
		panic("stream boom")
	})
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 5*time.Second)
	cs, err := NewStream[seqMsg, seqMsg](ctx, c, "PN.Bidi")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if m, err := cs.Recv(); err != nil || m.Seq != i {
			t.Fatalf("Recv %d: %+v %v", i, m, err)
		}
	}
	_, err = cs.Recv()
	if se := status.FromError(err); se == nil || se.Code != status.Internal || !strings.Contains(se.Message, "PN.Bidi") {
		t.Fatalf("after a panic: %v, want Internal naming the method", err)
	}
	if srv.Stats().Panics != 1 {
		t.Fatalf("panics = %d", srv.Stats().Panics)
	}
	mu.Lock()
	if !strings.Contains(logged.String(), "stream boom") {
		t.Errorf("panic not logged: %q", logged.String())
	}
	mu.Unlock()
	must(t, streamBidiEcho(c, "Str.Echo", 10))
}

type streamCtxKey struct{}

// TestStreamInterceptors: server and client stream interceptors run in
// order, the first outermost; a client interceptor can add metadata; a
// server interceptor can pass a derived context to the handler, replace the
// handler's error, or refuse the call without running it.
func TestStreamInterceptors(t *testing.T) {
	var mu sync.Mutex
	var order []string
	rec := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	take := func() string {
		mu.Lock()
		defer mu.Unlock()
		s := strings.Join(order, ",")
		order = nil
		return s
	}
	sopts := &ServerOptions{StreamInterceptors: []StreamServerInterceptor{
		func(ctx context.Context, info *CallInfo, next func(context.Context) error) error {
			rec("s1:" + info.Method)
			if info.Method == "IC.Denied" {
				return status.New(status.PermissionDenied, "denied by s1")
			}
			err := next(context.WithValue(ctx, streamCtxKey{}, "from-s1"))
			rec("s1-end")
			if err != nil {
				return status.Errorf(status.Aborted, "s1 wrapped: %v", err)
			}
			return nil
		},
		func(ctx context.Context, info *CallInfo, next func(context.Context) error) error {
			rec(fmt.Sprint("s2 sees ", ctx.Value(streamCtxKey{})))
			err := next(ctx)
			rec("s2-end")
			return err
		},
	}}
	srv := NewServer(sopts)
	HandleBidiStream(srv, "IC.Bidi", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		in := IncomingMetadata(ctx)
		rec(fmt.Sprintf("handler ctx=%v md=%s/%s", ctx.Value(streamCtxKey{}), in.Get("c1"), in.Get("user")))
		m, err := st.Recv()
		if err != nil {
			return err
		}
		if m.Text == "fail" {
			return status.New(status.NotFound, "nothing")
		}
		return st.Send(m)
	})
	HandleBidiStream(srv, "IC.Denied", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		rec("denied handler ran")
		return nil
	})
	copts := &ClientOptions{StreamInterceptors: []StreamClientInterceptor{
		func(ctx context.Context, method string, opts []CallOption, open func(context.Context, ...CallOption) error) error {
			rec("c1:" + method)
			return open(ctx, append(opts, WithMetadata(Metadata{"c1": {"added"}}))...)
		},
		func(ctx context.Context, method string, opts []CallOption, open func(context.Context, ...CallOption) error) error {
			rec(fmt.Sprintf("c2 opts=%d", len(opts)))
			if method == "IC.ClientRefused" {
				return status.New(status.FailedPrecondition, "refused by c2")
			}
			return open(ctx, opts...)
		},
	}}
	c := testServer(t, srv, copts)
	ctx := testCtx(t, 5*time.Second)

	run := func(text string) error {
		cs, err := NewStream[seqMsg, seqMsg](ctx, c, "IC.Bidi", WithMetadata(Metadata{"user": {"u"}}))
		if err != nil {
			return err
		}
		if err := cs.Send(&seqMsg{Text: text}); err != nil {
			return err
		}
		cs.CloseSend()
		for {
			if _, err := cs.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	if err := run("ok"); err != nil {
		t.Fatal(err)
	}
	want := "c1:IC.Bidi,c2 opts=2,s1:IC.Bidi,s2 sees from-s1,handler ctx=from-s1 md=added/u,s2-end,s1-end"
	if got := take(); got != want {
		t.Fatalf("order\n got %s\nwant %s", got, want)
	}
	if err := run("fail"); status.CodeOf(err) != status.Aborted || !strings.Contains(err.Error(), "s1 wrapped") {
		t.Fatalf("wrapped handler error: %v", err)
	}
	take()

	cs, err := NewStream[seqMsg, seqMsg](ctx, c, "IC.Denied")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Recv(); status.CodeOf(err) != status.PermissionDenied {
		t.Fatalf("refused by a server interceptor: %v", err)
	}
	if got := take(); strings.Contains(got, "denied handler ran") {
		t.Fatalf("handler ran although the interceptor refused: %s", got)
	}
	if _, err := NewStream[seqMsg, seqMsg](ctx, c, "IC.ClientRefused"); status.CodeOf(err) != status.FailedPrecondition {
		t.Fatalf("refused by a client interceptor: %v", err)
	}
	if got := take(); got != "c1:IC.ClientRefused,c2 opts=1" {
		t.Fatalf("order when refused on the client: %s", got)
	}
}

// TestStreamInterceptorContext: the context a server stream interceptor
// passes on must be the stream's context too. An interceptor that adds a
// value or imposes a shorter deadline (a common server-side policy) must be
// seen by the handler's context, and the handler's blocked Stream.Recv must end
// when that context ends.
func TestStreamInterceptorContext(t *testing.T) {
	const limit = 100 * time.Millisecond
	srv := NewServer(&ServerOptions{StreamInterceptors: []StreamServerInterceptor{
		func(ctx context.Context, info *CallInfo, next func(context.Context) error) error {
			ctx, cancel := context.WithTimeout(context.WithValue(ctx, streamCtxKey{}, "v"), limit)
			defer cancel()
			return next(ctx)
		},
	}})
	type result struct {
		streamVal any
		recvAfter time.Duration
		recvErr   error
	}
	res := make(chan result, 1)
	HandleBidiStream(srv, "IC.Ctx", func(ctx context.Context, st *Stream[seqMsg, seqMsg]) error {
		r := result{streamVal: ctx.Value(streamCtxKey{})}
		begin := time.Now()
		_, r.recvErr = st.Recv() // the client sends nothing
		r.recvAfter = time.Since(begin)
		res <- r
		return r.recvErr
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := NewStream[seqMsg, seqMsg](ctx, c, "IC.Ctx")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r := waitFor(t, res, 5*time.Second, "the handler")
	if r.streamVal != "v" {
		t.Errorf("the handler's context lacks the value the interceptor added (got %v)", r.streamVal)
	}
	if r.recvAfter > limit+time.Second {
		t.Errorf("the handler's Recv ignored the interceptor's %v deadline: it returned after %v with %v",
			limit, r.recvAfter.Round(time.Millisecond), r.recvErr)
	}
}

func TestStreamIntrospection(t *testing.T) {
	c := testServer(t, newStreamServer(nil), nil)
	list, err := Call[Empty, MethodList](testCtx(t, 5*time.Second), c, IntrospectionMethod, &Empty{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	shapes := map[string]MethodInfo{}
	for _, m := range list.Methods {
		kinds[m.Name] = m.Kind
		shapes[m.Name] = m
	}
	want := map[string]string{
		"Str.Count": "server_stream", "Str.Sum": "client_stream", "Str.Echo": "bidi_stream",
		"Str.Raw": "bidi_stream", "Str.Unary": "unary", IntrospectionMethod: "unary",
	}
	for name, k := range want {
		if kinds[name] != k {
			t.Errorf("%s: kind %q, want %q", name, kinds[name], k)
		}
	}
	if m := shapes["Str.Count"]; m.Request == nil || m.Request.Type != "object" || len(m.Request.Fields) != 2 || m.Request.Fields[0].Name != "seq" {
		t.Errorf("Str.Count request shape %+v", m.Request)
	}
	if m := shapes["Str.Raw"]; m.Request == nil || m.Request.Type != "bytes" || m.Reply.Type != "bytes" {
		t.Errorf("Str.Raw shapes %+v %+v", m.Request, m.Reply)
	}
	for _, k := range []methodKind{kindUnary, kindServerStream, kindClientStream, kindBidiStream, methodKind(9)} {
		if k.String() == "" {
			t.Errorf("Kind(%d) has no name", k)
		}
	}
}

// TestStreamsAndUnaryConcurrently runs streams of every kind and unary
// calls at the same time on one client (one connection).
func TestStreamsAndUnaryConcurrently(t *testing.T) {
	srv := newStreamServer(&ServerOptions{CallRate: -1})
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 30*time.Second)
	var wg sync.WaitGroup
	var unary atomic.Int64
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i >= 100 { // at least 100 calls each, then until the streams end
					select {
					case <-stop:
						return
					default:
					}
				}
				r, err := Call[seqMsg, seqMsg](ctx, c, "Str.Unary", &seqMsg{Seq: w*1_000_000 + i})
				if err != nil || r.Seq != w*1_000_000+i {
					t.Errorf("unary: %+v %v", r, err)
					return
				}
				unary.Add(1)
			}
		})
	}
	var streams sync.WaitGroup
	for range 3 {
		for _, fn := range []func() error{
			func() error { return streamBidiEcho(c, "Str.Echo", 1000) },
			func() error { return streamBidiEcho(c, "Str.EchoPipe", 500) },
			func() error { return streamServerStream(c) },
			func() error { return streamClientStream(c) },
			func() error { return streamRawBidi(c) },
		} {
			streams.Go(func() {
				if err := fn(); err != nil {
					t.Error(err)
				}
			})
		}
	}
	streams.Wait()
	close(stop)
	wg.Wait()
	if unary.Load() == 0 {
		t.Fatal("no unary call completed while the streams ran")
	}
	t.Logf("%d unary calls completed alongside the streams", unary.Load())
	waitCalls(t, srv, 0)
}

// plateau waits until n stops growing (unchanged for quiet) and returns it.
func plateau(t testing.TB, n *atomic.Int64, quiet, limit time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(limit)
	last, since := n.Load(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		if v := n.Load(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return v
		}
	}
	t.Fatalf("still growing after %v: %d", limit, n.Load())
	return 0
}

// unaryWorks makes n unary calls on c, each of which must complete promptly.
func unaryWorks(t testing.TB, c *Client, n int, what string) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := Call[seqMsg, seqMsg](ctx, c, "Str.Unary", &seqMsg{Seq: i})
		cancel()
		if err != nil || r.Seq != i {
			t.Fatalf("%s: unary call %d: %+v %v", what, i, r, err)
		}
	}
}

// TestStreamFlowControlServerToClient: a handler sending as fast as it can
// to a client that does not read gets at most about a stream window ahead
// (its Send blocks), while unary calls on the same connection complete; when
// the client cancels, the blocked Send fails and the handler ends.
func TestStreamFlowControlServerToClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window uint32 // the client's receive window; 0 for the default
		size   int
	}{
		{"window=64KiB", 64 << 10, 4 << 10},
		{"window=default", 0, 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			sendErr := make(chan error, 1)
			srv := newStreamServer(nil)
			HandleServerStream(srv, "FC.Flood", func(ctx context.Context, req *[]byte, st *Stream[[]byte, []byte]) error {
				msg := make([]byte, tc.size)
				for {
					if err := st.Send(&msg); err != nil {
						sendErr <- err
						return err
					}
					sent.Add(1)
				}
			})
			c := testServer(t, srv, &ClientOptions{Settings: wire.Settings{InitialWindow: tc.window}})
			window := int64(tc.window)
			if window == 0 {
				window = 2 << 20 // what a client announces when its window is unset
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			empty := []byte{}
			cs := openServerStream[[]byte, []byte](ctx, t, c, "FC.Flood", &empty, WithCodec(codec.Raw))
			_ = cs // never read
			ahead := plateau(t, &sent, 200*time.Millisecond, 10*time.Second)
			limit := window/int64(tc.size) + 2
			t.Logf("the handler got %d messages (%d KiB) ahead of a client that does not read; window %d KiB",
				ahead, ahead*int64(tc.size)>>10, window>>10)
			if ahead > limit {
				t.Fatalf("handler sent %d messages of %d bytes to a client that reads nothing: over the %d-byte window", ahead, tc.size, window)
			}
			unaryWorks(t, c, 20, "while a stream is stalled")
			if now := sent.Load(); now > limit {
				t.Fatalf("after unary calls the handler is %d messages ahead", now)
			}
			select {
			case err := <-sendErr:
				t.Fatalf("handler's Send failed early: %v", err)
			default:
			}
			cancel()
			err := waitFor(t, sendErr, 2*time.Second, "the handler's blocked Send to fail after the client canceled")
			if err == nil {
				t.Fatal("nil error")
			}
			waitCalls(t, srv, 0)
		})
	}
}

// TestStreamCancelUnblocksServerSend: like the flow-control test, but the
// client makes no other call: nobody on the client reads the connection
// while the handler floods it with the default settings. The client's
// cancel must still reach the handler, whose blocked Send must fail and
// which must end.
func TestStreamCancelUnblocksServerSend(t *testing.T) {
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	ctxDone := make(chan struct{})
	srv := NewServer(nil)
	HandleServerStream(srv, "FC.Flood", func(ctx context.Context, req *[]byte, st *Stream[[]byte, []byte]) error {
		context.AfterFunc(ctx, func() { close(ctxDone) })
		msg := make([]byte, 16<<10)
		for {
			if err := st.Send(&msg); err != nil {
				sendErr <- err
				return err
			}
			sent.Add(1)
		}
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	empty := []byte{}
	openServerStream[[]byte, []byte](ctx, t, c, "FC.Flood", &empty, WithCodec(codec.Raw))
	ahead := plateau(t, &sent, 200*time.Millisecond, 10*time.Second)
	t.Logf("handler blocked after %d messages (%d KiB)", ahead, ahead*16)
	cancel()
	waitFor(t, ctxDone, 2*time.Second, "the handler's context to end")
	select {
	case err := <-sendErr:
		if err == nil {
			t.Fatal("nil error")
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("the handler's context ended, but its Send is still blocked 2s after the client canceled "+
			"(it is %d KiB ahead: blocked writing to the connection, not waiting for credit)", ahead*16)
	}
}

// TestStreamFlowControlClientToServer: the reverse direction. A client
// sending to a handler that stops reading blocks after about the server's
// stream window; unary calls on the same connection go on; canceling the
// client's context fails the blocked Send and ends the handler.
func TestStreamFlowControlClientToServer(t *testing.T) {
	const window, size = 64 << 10, 4 << 10
	handlerEnded := make(chan error, 1)
	srv := newStreamServer(&ServerOptions{Settings: wire.Settings{InitialWindow: window}})
	HandleBidiStream(srv, "FC.Stall", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		if _, err := st.Recv(); err != nil { // one message, then no more reading
			return err
		}
		<-ctx.Done()
		handlerEnded <- ctx.Err()
		return ctx.Err()
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := NewStream[[]byte, []byte](ctx, c, "FC.Stall", WithCodec(codec.Raw))
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		msg := make([]byte, size)
		for {
			if err := cs.Send(&msg); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
	}()
	ahead := plateau(t, &sent, 200*time.Millisecond, 10*time.Second)
	t.Logf("the client got %d messages ahead of a handler that stopped reading; window %d KiB", ahead, window>>10)
	if limit := int64(window/size + 2); ahead > limit {
		t.Fatalf("client sent %d messages of %d bytes to a handler that stopped reading: over the %d-byte window", ahead, size, window)
	}
	unaryWorks(t, c, 20, "while the client's Send is blocked")
	must(t, streamBidiEcho(c, "Str.Echo", 100))
	cancel()
	if err := waitFor(t, sendErr, 2*time.Second, "the blocked Send to fail"); status.CodeOf(err) != status.Canceled {
		t.Fatalf("blocked Send after cancel: %v, want Canceled", err)
	}
	waitFor(t, handlerEnded, 2*time.Second, "the handler to end")
	waitCalls(t, srv, 0)
}

// TestStreamMessageTooLarge: a message over the peer's MaxMessageSize fails
// locally with ResourceExhausted in both directions, without sending
// anything; the client's stream goes on, the server's handler sees the
// error from its Send.
func TestStreamMessageTooLarge(t *testing.T) {
	srv := newStreamServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}})
	sendErr := make(chan error, 1)
	HandleServerStream(srv, "Big.Reply", func(ctx context.Context, req *[]byte, st *Stream[[]byte, []byte]) error {
		big := make([]byte, 2<<20) // over the client's 1 MiB limit
		err := st.Send(&big)
		sendErr <- err
		if err != nil {
			small := []byte("small")
			if err := st.Send(&small); err != nil {
				return err
			}
		}
		return err
	})
	c := testServer(t, srv, &ClientOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}})
	ctx := testCtx(t, 10*time.Second)

	cs, err := NewStream[[]byte, []byte](ctx, c, "Str.Raw", WithCodec(codec.Raw))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20+1)
	if err := cs.Send(&big); status.CodeOf(err) != status.ResourceExhausted {
		t.Fatalf("Send over the server's limit: %v, want ResourceExhausted", err)
	}
	ok := make([]byte, 1<<20)
	if err := cs.Send(&ok); err != nil {
		t.Fatalf("Send at the limit after a refused one: %v", err)
	}
	cs.CloseSend()
	if m, err := cs.Recv(); err != nil || len(*m) != len(ok) {
		t.Fatalf("echo: %d %v", len(derefBytes(m)), err)
	}
	if _, err := cs.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}

	cs2 := openServerStream[[]byte, []byte](ctx, t, c, "Big.Reply", &[]byte{}, WithCodec(codec.Raw))
	if err := waitFor(t, sendErr, 5*time.Second, "the handler's Send"); status.CodeOf(err) != status.ResourceExhausted {
		t.Fatalf("handler's Send over the client's limit: %v, want ResourceExhausted", err)
	}
	if m, err := cs2.Recv(); err != nil || string(*m) != "small" {
		t.Fatalf("after a refused reply: %q %v", derefBytes(m), err)
	}
	if _, err := cs2.Recv(); status.CodeOf(err) != status.ResourceExhausted {
		t.Fatalf("end: %v, want the handler's ResourceExhausted", err)
	}
}

// TestStreamShutdownDrains: Shutdown lets a stream in progress run to its
// end (both directions keep working), refuses new streams, and returns once
// the stream ended.
func TestStreamShutdownDrains(t *testing.T) {
	srv := newStreamServer(nil)
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 10*time.Second)
	cs, err := NewStream[seqMsg, seqMsg](ctx, c, "Str.Echo")
	if err != nil {
		t.Fatal(err)
	}
	echo := func(i int) {
		t.Helper()
		if err := cs.Send(&seqMsg{Seq: i}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		if m, err := cs.Recv(); err != nil || m.Seq != i {
			t.Fatalf("Recv %d: %+v %v", i, m, err)
		}
	}
	echo(0)
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	// The GOAWAY reaches the client: a new stream is not served.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs2, err := NewStream[seqMsg, seqMsg](ctx, c, "Str.Echo")
		if err == nil {
			err = cs2.Send(&seqMsg{})
			if err == nil {
				_, err = cs2.Recv()
			}
			cs2.Close()
		}
		if err != nil {
			if c := status.CodeOf(err); c != status.Unavailable {
				t.Fatalf("new stream during Shutdown: %v, want Unavailable", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new streams still served 5s into Shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a stream was in progress", err)
	default:
	}
	for i := 1; i <= 5; i++ {
		echo(i)
	}
	cs.CloseSend()
	if _, err := cs.Recv(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if err := waitFor(t, shut, 5*time.Second, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestStreamRecvMsgReuse echoes messages of changing sizes (single frames
// and chunked) with RecvMsg reusing one buffer on both sides: every message
// arrives whole and intact although buffers are swapped with the pool.
func TestStreamRecvMsgReuse(t *testing.T) {
	srv := NewServer(nil)
	HandleBidiStream(srv, "Reuse.Echo", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		var m []byte
		for {
			if err := st.RecvMsg(&m); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if err := st.Send(&m); err != nil {
				return err
			}
		}
	})
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 30*time.Second)
	cs, err := NewStream[[]byte, []byte](ctx, c, "Reuse.Echo", WithCodec(codec.Raw))
	must(t, err)
	defer cs.Close()
	sizes := []int{10, 300 << 10, 0, 5, 1 << 20, 64 << 10, 2<<20 + 3, 17}
	const rounds = 5
	fill := func(m []byte, seed int) {
		for i := range m {
			m[i] = byte(i*7 + seed)
		}
	}
	sendErr := make(chan error, 1)
	go func() {
		for r := range rounds {
			for k, n := range sizes {
				m := make([]byte, n)
				fill(m, r*len(sizes)+k)
				if err := cs.Send(&m); err != nil {
					sendErr <- err
					return
				}
			}
		}
		sendErr <- cs.CloseSend()
	}()
	var m, prev []byte
	prevSeed := -1
	for r := range rounds {
		for k, n := range sizes {
			seed := r*len(sizes) + k
			if err := cs.RecvMsg(&m); err != nil {
				t.Fatalf("message %d: %v", seed, err)
			}
			want := make([]byte, n)
			fill(want, seed)
			if !bytes.Equal(m, want) {
				t.Fatalf("message %d (%d bytes) arrived as %d bytes, or differs", seed, n, len(m))
			}
			// A copy the caller kept of the previous message is its own.
			if prevSeed >= 0 {
				w := make([]byte, len(prev))
				fill(w, prevSeed)
				if !bytes.Equal(prev, w) {
					t.Fatalf("kept copy of message %d changed", prevSeed)
				}
			}
			prev, prevSeed = append(prev[:0], m...), seed
		}
	}
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	must(t, <-sendErr)
}
