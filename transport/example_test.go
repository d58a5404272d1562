package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// A server listens on a socket file, and each side of the connection learns
// who the other is from the kernel.
func ExampleListen() {
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "app.sock")

	// Mode 0600 and the SameUser policy are the defaults for socket files.
	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		c := nc.(*transport.Conn)
		p := c.Peer() // the client
		fmt.Printf("server: client is a %s peer, same user %t, same process %t\n",
			p.Network, p.UID == os.Geteuid(), p.PID == os.Getpid())
		io.Copy(c, c)
	}()

	c, err := transport.Dial(context.Background(), addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(c, "hello")
	reply := make([]byte, len("hello\n"))
	if _, err := io.ReadFull(c, reply); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client: server echoed %q, server pid known %t\n", reply, c.Peer().PID != 0)
	c.Close()
	<-done
	// Output:
	// server: client is a unix peer, same user true, same process true
	// client: server echoed "hello\n", server pid known true
}

// Policies on both sides: the server lets in its own user and one group; the
// client checks the socket file and then the credentials of the process that
// actually accepts on it.
func ExampleDialConfig() {
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "app.sock")

	l, err := transport.Listen(addr, &transport.ListenConfig{
		Mode:   0o660,
		Policy: peer.AnyOf(peer.SameUser(), peer.AllowGIDs(os.Getegid())),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	c, err := transport.Dial(context.Background(), addr, &transport.DialConfig{
		RequireOwner: &transport.Owner{UID: os.Geteuid(), GID: -1},
		RequireModes: []os.FileMode{0o600, 0o660},
		ServerPolicy: peer.SameUser(),
	})
	fmt.Println("trusted server:", err == nil)
	if err == nil {
		c.Close()
	}

	// A client that trusts only some other uid refuses this server.
	_, err = transport.Dial(context.Background(), addr, &transport.DialConfig{
		ServerPolicy: peer.AllowUIDs(os.Geteuid() + 1),
	})
	fmt.Println("other server refused:", errors.Is(err, peer.ErrDenied))
	// Output:
	// trusted server: true
	// other server refused: true
}

// A Conn is a plain io.ReadWriteCloser: here a byte stream is echoed back
// over an authenticated Unix socket, with no framing at all.
func Example_rawStream() {
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "echo.sock")

	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(c, c) // echo until the client stops writing
		c.Close()
	}()

	c, err := transport.Dial(context.Background(), addr, &transport.DialConfig{ServerPolicy: peer.SameUser()})
	if err != nil {
		log.Fatal(err)
	}
	var stream io.ReadWriteCloser = c
	io.WriteString(stream, "any bytes at all\n")
	c.CloseWrite() // the server reads io.EOF and closes
	reply, err := io.ReadAll(stream)
	if err != nil {
		log.Fatal(err)
	}
	stream.Close()
	<-done
	fmt.Printf("%s", reply)
	// Output:
	// any bytes at all
}

func ExampleParseAddr() {
	for _, s := range []string{"unix:///run/app.sock", "tcp://localhost:0080", "wss://example.com:443/warren", "unix:/run/app.sock"} {
		a, err := transport.ParseAddr(s)
		if err != nil {
			fmt.Println("error:", err.(*transport.AddrError).Reason)
			continue
		}
		fmt.Println(a.Network(), a.Address, a.Path, a)
	}
	// Output:
	// unix /run/app.sock  unix:///run/app.sock
	// tcp localhost:80  tcp://localhost:80
	// tcp example.com:443 /warren wss://example.com:443/warren
	// error: an absolute path is written with three slashes, as in unix:///run/app.sock
}

// A WebSocket listener and client: the same byte stream as over TCP, carried
// in binary WebSocket messages, which a browser can send and receive too.
func Example_webSocket() {
	l, err := transport.Listen("ws://127.0.0.1:0/warren", &transport.ListenConfig{
		// Browsers let any page connect anywhere: accept only pages from
		// this host (and clients that are not browsers).
		WebSocket: &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // the first Read runs the opening handshake; then echo
	}()

	// Endpoint is ws://127.0.0.1:PORT/warren.
	c, err := transport.Dial(context.Background(), l.Endpoint().String(), nil)
	if err != nil {
		log.Fatal(err)
	}
	io.WriteString(c, "hello, ") // one binary message
	io.WriteString(c, "browser") // and another
	reply := make([]byte, len("hello, browser"))
	if _, err := io.ReadFull(c, reply); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s peer, path %s: %s\n", c.Peer().Network, l.Endpoint().Path, reply)
	c.Close() // the close handshake: the server reads io.EOF
	<-done
	// Output:
	// ws peer, path /warren: hello, browser
}

// An HTTP server that serves WebSocket next to plain requests on one
// listener, as the HTTP bridge of package rpc does: IsWebSocketUpgrade picks
// the requests to upgrade and UpgradeWebSocket turns them into connections
// that keep the listener's peer identity.
func ExampleUpgradeWebSocket() {
	l, err := transport.Listen("tcp://127.0.0.1:0", nil) // tcp, not ws: HTTP decides
	if err != nil {
		log.Fatal(err)
	}
	upgraded := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !transport.IsWebSocketUpgrade(r) {
			io.WriteString(w, "plain HTTP\n")
			return
		}
		c, err := transport.UpgradeWebSocket(w, r, nil)
		if err != nil {
			return // refused with an HTTP error
		}
		defer c.Close()
		upgraded <- c.(*transport.Conn).Peer().Network
		io.Copy(c, c)
	})}
	go srv.Serve(l)
	defer srv.Close()

	c, err := transport.Dial(context.Background(), "ws://"+l.Endpoint().Address+"/echo", nil)
	if err != nil {
		log.Fatal(err)
	}
	io.WriteString(c, "over the bridge")
	reply := make([]byte, len("over the bridge"))
	if _, err := io.ReadFull(c, reply); err != nil {
		log.Fatal(err)
	}
	c.Close()
	fmt.Printf("%s (server sees a %s peer)\n", reply, <-upgraded)
	// Output:
	// over the bridge (server sees a tcp peer)
}
