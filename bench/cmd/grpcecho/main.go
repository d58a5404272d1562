// Command grpcecho serves gRPC-Go's echo (bench.Bench/Echo, a
// google.protobuf.BytesValue answered with itself, as in bench/systems) on
// a unix socket, for the Python client's benchmark (clients/python,
// python -m warren.bench) to call with grpcio. It prints "listening on
// PATH" once it accepts connections and exits when its standard input
// closes.
//
//	cd bench && go run ./cmd/grpcecho -socket /tmp/grpc.sock
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/warrenipc/warren/bench/systems"
)

func main() {
	socket := flag.String("socket", "", "unix socket path to serve on")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "grpcecho: -socket is required")
		os.Exit(2)
	}
	addr, stop, err := systems.GRPC{}.Serve("unix", *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcecho:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", addr)
	io.Copy(io.Discard, os.Stdin)
	stop()
	os.Remove(*socket)
}
