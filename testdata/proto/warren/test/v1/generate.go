// Package testv1 is the code generated from everything.proto, the test
// schema with every field kind and every stream kind: everything.pb.go by
// protoc-gen-go, everything_warren.pb.go by protoc-gen-go-warren.
// Regenerate it (needs protoc, e.g. Debian's protobuf-compiler) with
//
//	go generate ./testdata/proto/warren/test/v1
package testv1

//go:generate go build -o protoc-gen-go.tmp google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate go build -o protoc-gen-go-warren.tmp github.com/warrenipc/warren/cmd/protoc-gen-go-warren
//go:generate protoc -I ../../.. --plugin=protoc-gen-go=protoc-gen-go.tmp --plugin=protoc-gen-go-warren=protoc-gen-go-warren.tmp --go_out=../../.. --go_opt=paths=source_relative --go-warren_out=../../.. --go-warren_opt=paths=source_relative warren/test/v1/everything.proto
//go:generate rm protoc-gen-go.tmp protoc-gen-go-warren.tmp
