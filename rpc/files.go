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

// Open files travel with a unary call's request or reply on unix sockets
// where both sides set Settings.MaxFiles: each side gets its own
// descriptors for them (SCM_RIGHTS), close-on-exec. See PROTOCOL.md,
// "Descriptors and shared messages". Files that cannot be sent (the
// connection is not a unix socket (tcp, tls, WebSocket, HTTP), a side did
// not set Settings.MaxFiles, the server runs the event loop, or there are
// more files than the peer accepts) fail the call or reply at once, with a
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
// descriptors the handler may take, and those of the reply.
type callFiles struct {
	req   *pool.Buf
	reply []int
}

// WithFiles sends files with the call's request; the caller keeps them
// (the server gets its own descriptors). A request with files is one
// frame: at most the server's MaxFrameSize less 2 bytes.
func WithFiles(files ...*os.File) CallOption {
	return func(o *callOptions) { o.files = append(o.files, files...) }
}

// ReceiveFiles stores in *dst the files that came with the reply (nil if
// none). The caller owns them and must close them. Without this option
// such files are closed.
func ReceiveFiles(dst *[]*os.File) CallOption {
	return func(o *callOptions) { o.recvFiles = dst }
}

// Files returns the files that came with the request of the call whose
// handler received ctx, and hands them over: the handler owns them and
// must close them; a second call returns nil. Files the handler does not
// take are closed when it returns.
func Files(ctx context.Context) []*os.File {
	c, ok := ctx.Value(callKey{}).(*serverCall)
	if !ok || c.fx == nil || c.fx.req == nil {
		return nil
	}
	fds := c.fx.req.Files
	c.fx.req.Files = nil
	return toFiles(fds)
}

// ReplyFiles sends files with the reply of the call whose handler
// received ctx; the handler keeps them (the caller gets its own
// descriptors). It fails at once, with a cause that matches errors.ErrUnsupported, if they
// cannot be sent on the call's connection. A reply with files is one
// frame: at most the caller's MaxFrameSize less 2 bytes.
func ReplyFiles(ctx context.Context, files ...*os.File) error {
	c, ok := ctx.Value(callKey{}).(*serverCall)
	if !ok || c.hs != nil {
		return noFiles("not a unary call over a warren connection")
	}
	if n, ok := c.st.Session().CanSendFiles(); !ok || len(files) > n {
		return noFiles(fmt.Sprintf("%d files, the peer accepts %d", len(files), n))
	}
	fds, err := dupFiles(files)
	if err != nil {
		return err
	}
	if c.fx == nil {
		c.fx = new(callFiles)
	}
	closeFDs(c.fx.reply)
	c.fx.reply = fds
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
