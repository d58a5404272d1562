package mux_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// A client and a server session over an in-memory connection. The server
// answers every message on a stream with the same text in upper case and
// ends the stream with an OK status once the client half-closes.
func Example() {
	ctx := context.Background()
	cconn, sconn := net.Pipe()

	var handlers sync.WaitGroup
	serverCfg := &mux.Config{
		// OnStream runs on the session's reader goroutine and must not
		// block: hand the stream to a goroutine.
		OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			handlers.Go(func() {
				for {
					m, err := st.Recv(ctx)
					if err == io.EOF { // the client half-closed
						st.Finish(ctx, mux.Reply{Code: codeOK})
						return
					}
					if err != nil {
						return
					}
					if err := st.Send(ctx, bytes.ToUpper(m.B), false); err != nil {
						return
					}
				}
			})
		},
	}
	servers := make(chan *mux.Session, 1)
	go func() {
		s, err := mux.Server(sconn, serverCfg)
		if err != nil {
			log.Fatal(err)
		}
		servers <- s
	}()
	client, err := mux.Client(cconn, nil)
	if err != nil {
		log.Fatal(err)
	}
	server := <-servers

	st, err := client.Open(ctx, mux.Call{Method: "Echo.Upper"})
	if err != nil {
		log.Fatal(err)
	}
	words := []string{"hello", "warren", "bye"}
	for i, w := range words {
		if err := st.Send(ctx, []byte(w), i == len(words)-1); err != nil {
			log.Fatal(err)
		}
		m, err := st.Recv(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(m.B))
	}
	if _, err := st.Recv(ctx); err == io.EOF {
		p, _ := st.Trailer()
		tr, _ := wire.ParseTrailer(p)
		fmt.Println("status:", wire.Code(tr.Code))
	}
	st.Release()

	client.Close()
	server.Close()
	handlers.Wait()
	// Output:
	// HELLO
	// WARREN
	// BYE
	// status: ok
}

// A client lends the memory a large reply is to end up in (Call.Recv, or
// RecvInto), so that the reply is read from the socket straight into it. Lending needs a
// connection whose reads can be interrupted and resumed, such as a unix
// socket.
func ExampleSession_Open_recv() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mux-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	var handlers sync.WaitGroup
	servers := make(chan *mux.Session, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		s, err := mux.Server(conn, &mux.Config{OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			handlers.Go(func() { // echo the request
				m, err := st.Recv(ctx)
				if err != nil {
					return
				}
				st.Finish(ctx, mux.Reply{Msg: m.B, HasMsg: true, Code: codeOK})
			})
		}})
		if err != nil {
			log.Fatal(err)
		}
		servers <- s
	}()
	conn, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	client, err := mux.Client(conn, nil)
	if err != nil {
		log.Fatal(err)
	}
	server := <-servers

	req := bytes.Repeat([]byte("w"), 100<<10)
	reply := make([]byte, 1<<20) // reused from call to call
	// Call.Recv offers reply's memory for the first message received: a
	// stream may write it until Release returns.
	st, err := client.Open(ctx, mux.Call{Method: "Blob.Echo", Msg: req, End: true, Recv: reply})
	if err != nil {
		log.Fatal(err)
	}
	m, err := st.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(m.B), "bytes, in the lent memory:", &m.B[0] == &reply[0], bytes.Equal(m.B, req))
	st.Release()

	client.Close()
	server.Close()
	handlers.Wait()
	// Output:
	// 102400 bytes, in the lent memory: true true
}
