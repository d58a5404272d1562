package rpc_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// Plain net/http over a unix socket: transport.Listen makes the socket file
// (mode 0600, same-user peers only) and any HTTP server can serve on it;
// rpc.HTTPClient gives an http.Client that dials it, whatever the URL's
// host. This is the pattern of local APIs such as Docker's.
func ExampleHTTPClient() {
	dir, err := os.MkdirTemp("", "warren-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "api.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", r.Host)
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(l)
	defer hs.Close()

	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://localhost/hello")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.Status, ": ", string(body))
	// Output:
	// 200 OK: hello, localhost
}

// Every rpc.Server also answers HTTP on the same listener, in the Connect
// protocol: POST /Service/Method (or /Service.Method) with a JSON body, as
// with curl --unix-socket /path/app.sock http://x/Counter.Inc -d '{"name":"a"}'.
// Errors are Connect's JSON error with a matching HTTP status.
func ExampleHTTPClient_callMethod() {
	srv := rpc.NewServer(nil)
	counter.New().Register(srv)
	addr, stop := serve(srv)
	defer stop()

	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	call := func(path, body string) {
		resp, err := hc.Post("http://warren"+path, "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, string(reply))
	}
	call("/Counter/Get", `{"name":"a"}`)
	call("/Counter/Set", `{"name":"a","value":"41"}`)
	call("/Counter.Inc", `{"name":"a"}`)
	// Output:
	// 404 {"code":"not_found","message":"no counter named \"a\" (create it with Counter.Set)"}
	// 200 {"name":"a","value":"41"}
	// 200 {"name":"a","value":"42"}
}
