package counter

// Regenerate counter.pb.go and counter_warren.pb.go from counter.proto
// (needs protoc, e.g. Debian's protobuf-compiler; protoc-gen-go is built
// from this module's google.golang.org/protobuf, protoc-gen-go-warren from
// cmd/protoc-gen-go-warren):
//
//	go generate ./examples/counter
//
// or, with buf (npm's @bufbuild/buf) and the plugins on $PATH, in this
// directory: buf generate (buf.gen.yaml). Both write the same files.
//
//go:generate go build -o protoc-gen-go.tmp google.golang.org/protobuf/cmd/protoc-gen-go
//go:generate go build -o protoc-gen-go-warren.tmp github.com/warrenipc/warren/cmd/protoc-gen-go-warren
//go:generate protoc --plugin=protoc-gen-go=protoc-gen-go.tmp --plugin=protoc-gen-go-warren=protoc-gen-go-warren.tmp --go_out=. --go_opt=paths=source_relative --go-warren_out=. --go-warren_opt=paths=source_relative counter.proto
//go:generate rm protoc-gen-go.tmp protoc-gen-go-warren.tmp
