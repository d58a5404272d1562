// Command conformance is a warren server implementing the Connect
// conformance suite's ConformanceService (connectrpc.com/conformance), for
// its runner in server mode:
//
//	go install connectrpc.com/conformance/cmd/connectconformance@v1.0.7
//	cd interop/conformance && connectconformance --mode server --conf config.yaml -- go run .
//
// It reads a ServerCompatRequest on stdin (a 4-byte big-endian length,
// then the message), starts a warren server on a loopback TCP port as the
// request asks (TLS, client certificates, message limit), writes a
// ServerCompatResponse with its address on stdout, and serves until it is
// signalled.
//
// The suite's .proto files are copied, unchanged, into proto/ (Apache
// License 2.0, proto/LICENSE); regenerate internal/conformancev1 with
//
//	go generate
package main

//go:generate go build -o protoc-gen-go.tmp google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate protoc -I proto --plugin=protoc-gen-go=protoc-gen-go.tmp --go_out=internal/conformancev1 --go_opt=paths=source_relative --go_opt=Mconnectrpc/conformance/v1/config.proto=github.com/warrenipc/warren/interop/conformance/internal/conformancev1 --go_opt=Mconnectrpc/conformance/v1/server_compat.proto=github.com/warrenipc/warren/interop/conformance/internal/conformancev1 --go_opt=Mconnectrpc/conformance/v1/service.proto=github.com/warrenipc/warren/interop/conformance/internal/conformancev1 connectrpc/conformance/v1/config.proto connectrpc/conformance/v1/server_compat.proto connectrpc/conformance/v1/service.proto
//go:generate sh -c "mv internal/conformancev1/connectrpc/conformance/v1/*.pb.go internal/conformancev1/ && rm -r internal/conformancev1/connectrpc protoc-gen-go.tmp"
