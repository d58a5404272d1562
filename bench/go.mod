module github.com/warrenipc/warren/bench

go 1.26.0

replace github.com/warrenipc/warren => ../

require (
	github.com/containerd/ttrpc v1.2.10
	github.com/gobwas/ws v1.5.0
	github.com/lesismal/nbio v1.6.8
	github.com/warrenipc/warren v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	storj.io/drpc v1.0.0
)

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/lesismal/llib v1.2.2 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/zeebo/errs v1.2.2 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)
