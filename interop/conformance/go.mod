module github.com/warrenipc/warren/interop/conformance

go 1.26.0

replace github.com/warrenipc/warren => ../..

require (
	github.com/warrenipc/warren v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.49.0
	google.golang.org/protobuf v1.36.12
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	connectrpc.com/grpchealth v1.5.0 // indirect
	connectrpc.com/grpcreflect v1.3.1 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/ws v1.5.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
