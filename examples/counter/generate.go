package counter

// Regenerate counter.pb.go from counter.proto (needs protoc, e.g. Debian's
// protobuf-compiler; protoc-gen-go is built from this module's
// google.golang.org/protobuf):
//
//	go generate ./examples/counter
//
//go:generate go build -o protoc-gen-go.tmp google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate protoc --plugin=protoc-gen-go=protoc-gen-go.tmp --go_out=. --go_opt=paths=source_relative counter.proto
//go:generate rm protoc-gen-go.tmp
