package rpc_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/wire"
)

// The classic use of passing descriptors: a privileged process opens what
// an unprivileged one may not (a protected file, a socket on a privileged
// port) and hands it over. The client gets its own descriptor; it never
// needed the right to open the file.
func ExampleReplyFiles() {
	dir, _ := os.MkdirTemp("", "warren-files")
	defer os.RemoveAll(dir)
	secret := filepath.Join(dir, "secret.txt")
	os.WriteFile(secret, []byte("the key is 42\n"), 0o600)

	// Both sides accept descriptors (MaxFiles), on a unix socket.
	settings := wire.Settings{MaxFiles: 16}
	srv := rpc.NewServer(&rpc.ServerOptions{Settings: settings})
	rpc.HandleRaw(srv, "Broker.OpenSecret", func(ctx context.Context, req []byte) ([]byte, error) {
		// The privileged side decides (ServerOptions.Policy and the
		// caller's credentials apply as for any call), opens the file,
		// and replies with it.
		f, err := os.Open(secret)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the caller gets its own descriptor
		return []byte("ok"), rpc.ReplyFiles(ctx, f)
	})
	addr, stop := serve(srv)
	defer stop()

	client, err := rpc.Dial(addr, &rpc.ClientOptions{Settings: settings})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	var files []*os.File
	var reply []byte
	req := []byte("secret.txt")
	if err := client.Invoke(context.Background(), "Broker.OpenSecret", &req, &reply, rpc.ReceiveFiles(&files)); err != nil {
		log.Fatal(err)
	}
	defer files[0].Close()
	b, _ := io.ReadAll(files[0])
	fmt.Printf("%s: %s", reply, b)

	// A listening socket travels the same way: its *os.File (from
	// (*net.TCPListener).File) in ReplyFiles, and net.FileListener on the
	// other side.

	// Output:
	// ok: the key is 42
}

// A large message without a copy: the caller fills a shared buffer in
// place, and the server reads the same pages. The buffer is sealed by its
// first send and can then be sent again as it is, until release.
func ExampleClient_NewSharedBuffer() {
	settings := wire.Settings{MaxFiles: 16, MaxMessageSize: 64 << 20}
	srv := rpc.NewServer(&rpc.ServerOptions{Settings: settings})
	rpc.HandleRaw(srv, "Image.Sum", func(ctx context.Context, req []byte) ([]byte, error) {
		var sum byte // req is a read-only view of the caller's pages
		for _, b := range req {
			sum += b
		}
		return []byte{sum}, nil
	})
	addr, stop := serve(srv)
	defer stop()

	client, err := rpc.Dial(addr, &rpc.ClientOptions{Settings: settings})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	buf, release, err := client.NewSharedBuffer(32 << 20)
	if err != nil {
		log.Fatal(err)
	}
	defer release() // after the calls that send it
	for i := range buf {
		buf[i] = byte(i % 3) // fill it in place: no copy of 32 MiB follows
	}
	var sum []byte
	for range 2 { // sent twice, as the same sealed memfd
		if err := client.Invoke(context.Background(), "Image.Sum", &buf, &sum); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(sum[0])

	// Output:
	// 255
}
