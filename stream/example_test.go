package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/warrenipc/warren/stream"
	"github.com/warrenipc/warren/transport"
)

// Word is what the client sends.
type Word struct {
	Word string `json:"word"`
}

// Sum is what the server answers after every three words.
type Sum struct {
	Sum []string `json:"sum"`
}

// A client streams words to a server, which sends back a summary of every
// three words it received, while the client is still writing: a full-duplex
// stream of JSON messages over a socket file.
func Example() {
	dir, err := os.MkdirTemp("", "warren-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "words.sock")

	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	// The server.
	served := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			served <- err
			return
		}
		s, err := stream.New(conn, nil) // JSON by default
		if err != nil {
			served <- err
			return
		}
		defer s.Close()
		sum := Sum{}
		for {
			var w Word
			if err := s.Read(&w); err != nil {
				if err == io.EOF { // the client is done
					err = nil
				}
				served <- err
				return
			}
			sum.Sum = append(sum.Sum, w.Word)
			if len(sum.Sum) == 3 {
				if err := s.Write(sum); err != nil {
					served <- err
					return
				}
				sum = Sum{}
			}
		}
	}()

	// The client writes from one goroutine and reads from another.
	conn, err := transport.Dial(context.Background(), addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	s, err := stream.New(conn, nil)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for _, w := range strings.Fields("alpha beta gamma delta epsilon zeta") {
			if err := s.Write(Word{Word: w}); err != nil {
				log.Print(err)
				return
			}
		}
		s.CloseWrite() // the server reads io.EOF after the last word
	}()
	for {
		var sum Sum
		err := s.Read(&sum)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("sum:", strings.Join(sum.Sum, " "))
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	if err := <-served; err != nil {
		log.Fatal(err)
	}
	// Output:
	// sum: alpha beta gamma
	// sum: delta epsilon zeta
}

// Raw messages: WriteBytes sends bytes as they are, and ReadBytes reuses the
// caller's buffer, so a loop like this one allocates nothing once the
// buffer has grown to the largest message.
func ExampleStream_ReadBytes() {
	c1, c2 := net.Pipe()
	go func() {
		s, err := stream.New(c1, nil)
		if err != nil {
			return
		}
		for _, m := range []string{"one", "two", "three"} {
			s.WriteBytes([]byte(m))
		}
		s.Close()
	}()
	s, err := stream.New(c2, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	var buf []byte
	for {
		buf, err = s.ReadBytes(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", buf)
	}
	// Output:
	// one
	// two
	// three
}
