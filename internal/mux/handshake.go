package mux

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/internal/shmring"
	"github.com/warrenipc/warren/wire"
)

// The handshake: prefaces both ways, and a server's answer to a client that
// speaks HTTP instead.

// Client performs the client side of the handshake on conn and starts the
// session. On error conn is closed.
func Client(conn net.Conn, cfg *Config) (*Session, error) {
	s, err := newSession(conn, true, cfg)
	if err != nil {
		return nil, err
	}
	if s.cfg.Settings.MaxFrameSize == 0 {
		s.local.MaxFrameSize = largeFrameSize
	}
	if s.cfg.Settings.InitialWindow == 0 {
		s.local.InitialWindow = largeWindow
	}
	s.wrapFiles(conn)
	s.local.ShmRing = shmring.Ask(conn, s.local.ShmRing)
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout()))
	if _, err := conn.Write(wire.AppendPreface(nil, s.local)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("warren: sending preface: %w", err)
	}
	peer, err := wire.ReadPreface(conn)
	if err != nil {
		err = fmt.Errorf("warren: reading server preface: %w", err)
	} else {
		s.conn, err = shmring.Client(s.conn, s.local.ShmRing, peer.ShmRing)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	s.start(peer)
	return s, nil
}

// Server performs the server side of the handshake on conn and starts the
// session. A peer that is not warren gets an error within the handshake
// timeout; an HTTP client is left to the caller with cfg.KeepHTTP or,
// without it, answered with an HTTP 400 explaining what the socket speaks.
// On error conn is closed, unless KeepHTTP kept it.
func Server(conn net.Conn, cfg *Config) (*Session, error) {
	s, err := newSession(conn, false, cfg)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout()))
	peer, err := wire.ReadPreface(conn)
	if err != nil {
		var nw *wire.NotWarrenError
		if errors.As(err, &nw) && nw.HTTP {
			if s.cfg.KeepHTTP {
				return nil, fmt.Errorf("warren: reading client preface: %w", err)
			}
			conn.Write(httpRejectResponse)
		}
		conn.Close()
		return nil, fmt.Errorf("warren: reading client preface: %w", err)
	}
	widen(&s.local, s.cfg.Settings, peer)
	s.wrapFiles(conn)
	s.local.ShmRing = shmring.Answer(conn, s.local.ShmRing, peer.ShmRing)
	if _, err = conn.Write(wire.AppendPreface(nil, s.local)); err != nil {
		err = fmt.Errorf("warren: sending preface: %w", err)
	} else if s.local.ShmRing != 0 {
		s.conn, err = shmring.Server(s.conn, s.local.ShmRing)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	s.start(peer)
	return s, nil
}

// widen gives local, a server's settings made from the configured set,
// large frames and window for a client (peer) that asked for them, both
// ways, where set leaves them unset; a client that announced the defaults
// gets the defaults.
func widen(local *wire.Settings, set, peer wire.Settings) {
	if set.MaxFrameSize == 0 && peer.MaxFrameSize > local.MaxFrameSize {
		local.MaxFrameSize = min(peer.MaxFrameSize, largeFrameSize)
	}
	if set.InitialWindow == 0 && peer.InitialWindow > local.InitialWindow {
		local.InitialWindow = min(peer.InitialWindow, largeWindow)
	}
}

// ServerSettings returns the settings a server configured with set
// announces to a client that announced peer (as Server does): set with
// the defaults, widened for a client that asked for large frames.
func ServerSettings(set, peer wire.Settings) wire.Settings {
	local := set.WithDefaults()
	widen(&local, set, peer)
	local.ShmRing = 0 // a fed session keeps the socket
	return local
}

// readsResume reports whether a read on conn that a past read deadline
// interrupts leaves the byte stream intact, so that reading can go on once
// the deadline is cleared: true for unix and tcp sockets, and for
// connections that say so (rawio.Ext: transport.Conn for unix and tcp);
// false for TLS and WebSocket, which can stop inside a record or frame.
func readsResume(conn net.Conn) bool {
	switch c := rawio.View(conn).(type) {
	case *net.UnixConn, *net.TCPConn:
		return true
	case interface{ ReadsResume() bool }:
		return c.ReadsResume()
	}
	return false
}

func (s *Session) handshakeTimeout() time.Duration {
	if s.cfg.HandshakeTimeout > 0 {
		return s.cfg.HandshakeTimeout
	}
	return 10 * time.Second
}

// httpRejectResponse is a complete HTTP/1.1 400 response (Connection: close,
// plain-text body) explaining that the socket speaks the warren protocol. A
// listener that does not serve HTTP writes it to a peer whose preface is an
// HTTP request (wire.ErrHTTPRequest), then closes the connection.
var httpRejectResponse = httpReject()

func httpReject() []byte {
	body := "This socket speaks the warren protocol (version " + strconv.Itoa(wire.Version) + "), not HTTP.\n" +
		"Connect with a warren client; see PROTOCOL.md in github.com/warrenipc/warren.\n"
	return []byte("HTTP/1.1 400 Bad Request\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n" +
		"\r\n" + body)
}
