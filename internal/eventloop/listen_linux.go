//go:build linux

package eventloop

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/acceptshed"
	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// Listener set-up: which listeners the event loop can serve, and Serve,
// which starts the loop.

// loopListener is what the loop knows of its listener.
type loopListener struct {
	tl    *transport.Listener // nil for a plain net listener
	ws    bool                // a ws:// listener: every connection opens with a WebSocket handshake
	unix  bool
	netw  string   // peer.Peer.Network: "unix" or "tcp"
	local net.Addr // unix: the listener's address (the path of a socket file)
}

// loopListenerOf returns the listening socket of l, if the loop can serve it.
func loopListenerOf(l net.Listener) (*loopListener, syscall.RawConn) {
	ls := &loopListener{}
	var rc syscall.RawConn
	var err error
	switch tl := l.(type) {
	case *transport.Listener:
		if rc, err = tl.SyscallConn(); err != nil {
			if tl.Endpoint().Scheme != transport.SchemeWS {
				return nil, nil
			}
			if rc, err = transportinternal.WSSocket(tl); err != nil {
				return nil, nil
			}
			ls.ws = true
		}
		ls.tl, ls.netw = tl, tl.Endpoint().Scheme
		ls.unix = ls.netw == transport.SchemeUnix
	case *net.UnixListener:
		if tl.Addr().Network() != "unix" {
			return nil, nil // unixpacket
		}
		if rc, err = tl.SyscallConn(); err != nil {
			return nil, nil
		}
		ls.netw, ls.unix = "unix", true
	case *net.TCPListener:
		if rc, err = tl.SyscallConn(); err != nil {
			return nil, nil
		}
		ls.netw = "tcp"
	default:
		return nil, nil
	}
	if ls.unix {
		ls.local = l.Addr()
	}
	return ls, rc
}

// Serve serves l for core from an event loop until the server closes or
// the listener is closed. handled is false when the loop cannot serve l:
// the server then uses the goroutine mode.
func Serve(core Core, l net.Listener, opts *Options) (handled bool, err error) {
	ls, rc := loopListenerOf(l)
	if rc == nil {
		return false, nil
	}
	local := opts.Settings.WithDefaults()
	local.MaxFiles = loopMaxFiles(ls, local.MaxFiles) // unix sockets only, as in goroutine mode
	local.ShmRing = 0                                 // the loop declines the shared-memory rings
	if local.Validate() != nil {
		return false, nil // every connection fails its handshake: as the goroutine mode does
	}
	// The loop accepts on its own descriptor of the listening socket, so
	// that the listener's Close (by Shutdown, or by the user) cannot make
	// it accept on a closed or reused descriptor.
	lfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { lfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return false, nil
	}
	if err := unix.SetNonblock(lfd, true); err != nil {
		unix.Close(lfd)
		return false, nil
	}
	p, err := evloop.NewPoller(maxEvents)
	if err != nil {
		unix.Close(lfd)
		core.Logger().Warn("warren: event loop unavailable; serving a goroutine per connection", "err", err)
		return false, nil
	}
	if err := p.Add(lfd, evloop.In); err != nil {
		p.Close()
		unix.Close(lfd)
		return false, nil
	}
	lp := &evLoop{
		core: core, opts: *opts, adm: core.Admission(), ctx: core.Context(), closed: core.Closing(),
		ls: ls, p: p, lfd: lfd,
		rbuf:        make([]byte, readBufSize),
		local:       local,
		preface:     wire.AppendPreface(nil, local),
		settings:    map[wire.Settings]*wire.Settings{},
		start:       time.Now(),
		readTimeout: opts.ReadTimeout,
		idleTimeout: opts.IdleTimeout,
		hsTimeout:   opts.HandshakeTimeout,
		stop:        make(chan struct{}),
		lrc:         rc,
		reserve:     acceptshed.New(),
		lost:        make(chan struct{}),
		done:        make(chan error, 1),
	}
	lp.eng = lp.adm.NewEngine(lp.shedConn)
	lp.eng.Loop = true
	lp.initFiles()
	opts.Counters.Loops.Add(1)
	opts.Counters.Open.Add(1)
	Started.Add(1)
	// The loop runs on its own goroutine so that Serve can return when the
	// listener is closed (as the goroutine mode's does) while the loop
	// goes on serving the connections it has.
	lp.launch()
	select {
	case err := <-lp.done:
		return true, err
	case <-lp.lost:
		return true, fmt.Errorf("warren: accept: %w", net.ErrClosed)
	}
}
