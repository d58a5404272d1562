package rpc

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/status"
)

// Open files travel with a unary call's request or reply, or with a
// stream's messages, on unix sockets where both sides set
// Settings.MaxFiles: each side gets its own
// descriptors for them (SCM_RIGHTS), close-on-exec. See PROTOCOL.md,
// "Descriptors and shared messages". Files that cannot be sent (the
// connection is not a unix socket (tcp, tls, WebSocket, HTTP), a side did
// not set Settings.MaxFiles, or there are more files than the peer
// accepts) fail the call or reply at once, with a
// cause that matches errors.ErrUnsupported; nothing of it is sent.

// NewSharedBuffer returns a buffer of n bytes of shared memory (a memfd
// mapped into this process) to fill in place and send without a copy.
// Sent whole, as the raw request of a call (codec.Raw) or a raw message
// of a stream, on a unix socket where both sides set Settings.MaxFiles,
// it travels as its sealed memfd whatever SharedThreshold is; anywhere
// else it is copied like any []byte.
//
// Lifetime: buf is writable until it is first sent. That send seals it:
// buf stays mapped at the same address but read-only (a write to it
// crashes the process) and can be sent again, any number of times,
// without a copy; a reply that is buf echoed back is read through this
// mapping, not mapped again. release unmaps it: buf must not be used
// after it (messages already sent are not affected: the peer has its own
// descriptor). release may be called more than once.
func (c *Client) NewSharedBuffer(n int) (buf []byte, release func(), err error) {
	buf, err = shm.NewBuffer(n)
	if err != nil {
		return nil, nil, &status.Error{Code: status.InvalidArgument, Message: err.Error(), Cause: err}
	}
	var once sync.Once
	return buf, func() { once.Do(func() { shm.Release(buf) }) }, nil
}

// callFiles are the files of a server call: the request, whose
// descriptors the handler may take, those of a stream's messages not yet
// taken, and those of the reply (or of the stream's next message).
type callFiles struct {
	mu    sync.Mutex // protects following: a stream's handler may send and receive on two goroutines
	req   *pool.Buf
	in    []int
	reply []int
}

// files returns c's callFiles, made on first use.
func (c *serverCall) files() *callFiles {
	c.mdMu.Lock()
	defer c.mdMu.Unlock()
	if c.fx == nil {
		c.fx = new(callFiles)
	}
	return c.fx
}

// filesIfAny returns c's callFiles, nil if none was made: a stream's
// handler may make them on one goroutine (Recv) while another reads them.
func (c *serverCall) filesIfAny() *callFiles {
	c.mdMu.Lock()
	defer c.mdMu.Unlock()
	return c.fx
}

// keepFiles keeps the files of a stream message received, for Files.
func (c *serverCall) keepFiles(buf *pool.Buf) {
	if buf.Files == nil {
		return
	}
	fx := c.files()
	fx.mu.Lock()
	fx.in = append(fx.in, buf.Files...)
	buf.Files = nil
	fx.mu.Unlock()
}

// sendStream sends a stream message, with the files of ReplyFiles if
// there are some.
func (c *serverCall) sendStream(ctx context.Context, data []byte) error {
	var fds []int
	if fx := c.filesIfAny(); fx != nil {
		fx.mu.Lock()
		fds, fx.reply = fx.reply, nil
		fx.mu.Unlock()
	}
	if fds == nil {
		return c.st.Send(ctx, data, false)
	}
	defer closeFDs(fds)
	return c.st.SendFiles(ctx, data, fds, false)
}

// closeStreamFiles closes the files of a stream call nobody took or sent.
func (c *serverCall) closeStreamFiles() {
	if fx := c.filesIfAny(); fx != nil {
		fx.mu.Lock()
		closeFDs(fx.in)
		closeFDs(fx.reply)
		fx.in, fx.reply = nil, nil
		fx.mu.Unlock()
	}
}

// sendStreamMsg sends a client stream's message, with the files of
// WithFiles if it is the first.
func sendStreamMsg(ctx context.Context, st *mux.Stream, o *callOptions, data []byte) error {
	if o.files == nil {
		return st.Send(ctx, data, false)
	}
	files := o.files
	o.files = nil
	if n, ok := st.Session().CanSendFiles(); !ok || len(files) > n {
		return noFiles(fmt.Sprintf("%d files, the peer accepts %d", len(files), n))
	}
	fds, err := dupFiles(files)
	if err != nil {
		return err
	}
	defer closeFDs(fds)
	return st.SendFiles(ctx, data, fds, false)
}

// recvStreamFiles appends the files of a client stream's message to
// ReceiveFiles' slice, or leaves them to be closed.
func recvStreamFiles(o *callOptions, buf *pool.Buf) {
	if buf.Files != nil && o.recvFiles != nil {
		*o.recvFiles = append(*o.recvFiles, toFiles(buf.Files)...)
		buf.Files = nil
	}
}

// WithFiles sends files with the call's request, or with a stream's first
// message; the caller keeps them (the server gets its own descriptors). A
// message with files is one frame: at most the server's MaxFrameSize
// less 2 bytes. On a stream they go with the first Send, and must stay
// open until it returns; files that cannot be sent fail that Send.
func WithFiles(files ...*os.File) CallOption {
	return func(o *callOptions) { o.files = append(o.files, files...) }
}

// ReceiveFiles stores in *dst the files that came with the reply (nil if
// none); on a stream, Recv appends those that come with each message. The
// caller owns them and must close them. Without this option such files
// are closed.
func ReceiveFiles(dst *[]*os.File) CallOption {
	return func(o *callOptions) { o.recvFiles = dst }
}

// Files returns the files that came with the request of the call whose
// handler received ctx (on a stream: with the messages received so far),
// and hands them over: the handler owns them and must close them; a
// second call returns only those received since. Files the handler does
// not take are closed when it returns.
func Files(ctx context.Context) []*os.File {
	c, ok := ctx.Value(callKey{}).(*serverCall)
	if !ok {
		return nil
	}
	fx := c.filesIfAny()
	if fx == nil {
		return nil
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fds := fx.in
	fx.in = nil
	if fx.req != nil {
		fds = append(fds, fx.req.Files...)
		fx.req.Files = nil
	}
	return toFiles(fds)
}

// ReplyFiles sends files with the reply of the call whose handler
// received ctx, or on a stream with the handler's next Send; the handler
// keeps them (the caller gets its own descriptors). It fails at once, with
// a cause that matches errors.ErrUnsupported, if they cannot be sent on
// the call's connection. A message with files is one frame: at most the
// caller's MaxFrameSize less 2 bytes.
func ReplyFiles(ctx context.Context, files ...*os.File) error {
	c, ok := ctx.Value(callKey{}).(*serverCall)
	if !ok || c.hs != nil {
		return noFiles("not a call over a warren connection")
	}
	if n, ok := c.st.Session().CanSendFiles(); !ok || len(files) > n {
		return noFiles(fmt.Sprintf("%d files, the peer accepts %d", len(files), n))
	}
	fds, err := dupFiles(files)
	if err != nil {
		return err
	}
	fx := c.files()
	fx.mu.Lock()
	closeFDs(fx.reply)
	fx.reply = fds
	fx.mu.Unlock()
	return nil
}

func noFiles(why string) error {
	return &status.Error{Code: status.FailedPrecondition, Message: "files cannot be sent: " + why, Cause: mux.ErrNoFiles}
}

// dupFiles duplicates the descriptors of files, without putting them in
// blocking mode as File.Fd would.
func dupFiles(files []*os.File) ([]int, error) {
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fd, err := dupFile(f)
		if err != nil {
			closeFDs(fds)
			return nil, &status.Error{Code: status.InvalidArgument, Message: fmt.Sprintf("file %s: %v", f.Name(), err), Cause: err}
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func toFiles(fds []int) []*os.File {
	if fds == nil {
		return nil
	}
	fs := make([]*os.File, len(fds))
	for i, fd := range fds {
		fs[i] = os.NewFile(uintptr(fd), fmt.Sprintf("warren-fd-%d", i))
	}
	return fs
}

// sendWithFiles is the client side of a call with files: the call header,
// then the request with its descriptors.
func sendWithFiles(ctx context.Context, s *mux.Session, c mux.Call, files []*os.File) (*mux.Stream, error) {
	if n, ok := s.CanSendFiles(); !ok || len(files) > n {
		return nil, noFiles(fmt.Sprintf("%d files, the peer accepts %d", len(files), n))
	}
	fds, err := dupFiles(files)
	if err != nil {
		return nil, err
	}
	defer closeFDs(fds)
	msg := c.Msg
	c.Msg, c.End = nil, false
	st, err := s.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := st.SendFiles(ctx, msg, fds, true); err != nil {
		st.Cancel()
		st.Release()
		return nil, err
	}
	return st, nil
}
