package rpc

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
)

// The HTTP side also serves, over gRPC, gRPC-Web and Connect, the gRPC
// server reflection service (grpc.reflection.v1 and v1alpha), describing
// the services whose methods were registered WithSchema, and the standard
// health service (grpc.health.v1.Health): SERVING for the server ("") and
// those services until the server shuts down, NOT_SERVING from then on.
// Tools such as buf curl, grpcurl and grpcui list and call methods through
// them with no local schema. They describe what Warren.Methods already
// lists, and run on connections the server has authorized.

// services holds the HTTP handlers of the reflection and health services,
// by path prefix ("/grpc.health.v1.Health/").
type services map[string]http.Handler

func (s *Server) newServices() services {
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(s.schemaServices))
	out := services{}
	for _, mk := range []func() (string, http.Handler){
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1(reflector) },
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1Alpha(reflector) },
		func() (string, http.Handler) { return grpchealth.NewHandler(healthChecker{s}) },
	} {
		path, h := mk()
		out[path] = h
	}
	return out
}

// lookup returns the handler for a request path, nil if none.
func (sv services) lookup(path string) http.Handler {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return nil
	}
	return sv[path[:i+1]]
}

// schemaServices returns the full names of the services whose methods were
// registered WithSchema, and the health service's, sorted.
func (s *Server) schemaServices() []string {
	names := []string{grpchealth.HealthV1ServiceName}
	for _, h := range *s.handlers.Load() {
		if h.schema != nil {
			names = append(names, string(h.schema.Parent().FullName()))
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// healthChecker answers the health service for a server.
type healthChecker struct{ s *Server }

func (hc healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(hc.s.schemaServices(), req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
	}
	if isClosed(hc.s.closed) {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
