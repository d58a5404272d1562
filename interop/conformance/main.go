package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/warrenipc/warren/grpcbridge"
	v1 "github.com/warrenipc/warren/interop/conformance/internal/conformancev1"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance server:", err)
		os.Exit(1)
	}
}

func run() error {
	endWithParent()
	var req v1.ServerCompatRequest
	if err := readMessage(os.Stdin, &req); err != nil {
		return fmt.Errorf("reading the ServerCompatRequest: %w", err)
	}
	opts := &rpc.ServerOptions{
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Bridge: grpcbridge.New(),
	}
	if req.MessageReceiveLimit > 0 {
		opts.Settings = wire.Settings{MaxMessageSize: req.MessageReceiveLimit}
	}
	srv := rpc.NewServer(opts)
	register(srv)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var pemCert []byte
	if req.UseTls {
		conf, err := tlsConfig(&req)
		if err != nil {
			return err
		}
		pemCert = req.ServerCreds.GetCert()
		l = tls.NewListener(l, conf)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()

	addr := l.Addr().(*net.TCPAddr)
	resp := &v1.ServerCompatResponse{Host: "127.0.0.1", Port: uint32(addr.Port), PemCert: pemCert}
	if err := writeMessage(os.Stdout, resp); err != nil {
		return err
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-done:
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
	return nil
}

// tlsConfig is the server's TLS configuration: the runner's certificate,
// HTTP/2 negotiated with ALPN, and client certificates when asked for.
func tlsConfig(req *v1.ServerCompatRequest) (*tls.Config, error) {
	creds := req.ServerCreds
	if creds == nil {
		return nil, errors.New("TLS asked for without server credentials")
	}
	cert, err := tls.X509KeyPair(creds.Cert, creds.Key)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	if len(req.ClientTlsCert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(req.ClientTlsCert) {
			return nil, errors.New("client CA certificate: no PEM certificate")
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, nil
}

// readMessage reads a message framed as the runner frames them: a 4-byte
// big-endian length, then the message.
func readMessage(r io.Reader, m proto.Message) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 16<<20 {
		return fmt.Errorf("message of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

func writeMessage(w io.Writer, m proto.Message) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	_, err = w.Write(append(out, b...))
	return err
}

// register registers the ConformanceService methods, by their short names
// with their schema, so that they answer to the full names the suite calls.
func register(srv *rpc.Server) {
	methods := v1.File_connectrpc_conformance_v1_service_proto.Services().ByName("ConformanceService").Methods()
	schema := func(name protoreflect.Name) rpc.MethodOption { return rpc.WithSchema(methods.ByName(name)) }
	rpc.Handle(srv, "ConformanceService.Unary", func(ctx context.Context, req *v1.UnaryRequest) (*v1.UnaryResponse, error) {
		p, err := unary(ctx, req.GetResponseDefinition(), []proto.Message{req})
		if err != nil {
			return nil, err
		}
		return &v1.UnaryResponse{Payload: p}, nil
	}, schema("Unary"))
	rpc.Handle(srv, "ConformanceService.IdempotentUnary", func(ctx context.Context, req *v1.IdempotentUnaryRequest) (*v1.IdempotentUnaryResponse, error) {
		p, err := unary(ctx, req.GetResponseDefinition(), []proto.Message{req})
		if err != nil {
			return nil, err
		}
		return &v1.IdempotentUnaryResponse{Payload: p}, nil
	}, schema("IdempotentUnary"), rpc.WithNoSideEffects())
	rpc.HandleClientStream(srv, "ConformanceService.ClientStream", func(ctx context.Context, st *rpc.Stream[v1.ClientStreamRequest, v1.ClientStreamResponse]) (*v1.ClientStreamResponse, error) {
		var def *v1.UnaryResponseDefinition
		var reqs []proto.Message
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			if len(reqs) == 0 {
				def = m.GetResponseDefinition()
			}
			reqs = append(reqs, m)
		}
		p, err := unary(ctx, def, reqs)
		if err != nil {
			return nil, err
		}
		return &v1.ClientStreamResponse{Payload: p}, nil
	}, schema("ClientStream"))
	rpc.HandleServerStream(srv, "ConformanceService.ServerStream", func(ctx context.Context, req *v1.ServerStreamRequest, st *rpc.Stream[v1.ServerStreamRequest, v1.ServerStreamResponse]) error {
		def := req.GetResponseDefinition()
		if def == nil {
			return nil
		}
		setMetadata(ctx, def.ResponseHeaders, def.ResponseTrailers)
		if len(def.ResponseData) > 0 {
			if err := st.SendHeader(); err != nil {
				return err
			}
		}
		delay := time.Duration(def.ResponseDelayMs) * time.Millisecond
		n := 0
		for _, data := range def.ResponseData {
			resp := &v1.ServerStreamResponse{Payload: &v1.ConformancePayload{Data: data}}
			if n == 0 {
				resp.Payload.RequestInfo = requestInfo(ctx, []proto.Message{req})
			}
			if err := sleep(ctx, delay); err != nil {
				return err
			}
			if err := st.Send(resp); err != nil {
				return err
			}
			n++
		}
		if def.Error != nil {
			var info *v1.ConformancePayload_RequestInfo
			if n == 0 {
				info = requestInfo(ctx, []proto.Message{req})
			}
			return statusOf(def.Error, info)
		}
		return nil
	}, schema("ServerStream"))
	rpc.HandleBidiStream(srv, "ConformanceService.BidiStream", bidi, schema("BidiStream"))
}

func bidi(ctx context.Context, st *rpc.Stream[v1.BidiStreamRequest, v1.BidiStreamResponse]) error {
	var def *v1.StreamResponseDefinition
	var delay time.Duration
	fullDuplex, first, n := false, true, 0
	var reqs []proto.Message
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		req, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
		if first {
			first = false
			def, fullDuplex = req.GetResponseDefinition(), req.GetFullDuplex()
			if def != nil {
				setMetadata(ctx, def.ResponseHeaders, def.ResponseTrailers)
				if fullDuplex && len(def.ResponseData) > 0 {
					if err := st.SendHeader(); err != nil {
						return err
					}
				}
				delay = time.Duration(def.ResponseDelayMs) * time.Millisecond
			}
		}
		if fullDuplex {
			if n >= len(def.GetResponseData()) {
				break
			}
			resp := &v1.BidiStreamResponse{Payload: &v1.ConformancePayload{Data: def.ResponseData[n]}}
			if n == 0 {
				resp.Payload.RequestInfo = requestInfo(ctx, reqs)
			} else {
				resp.Payload.RequestInfo = &v1.ConformancePayload_RequestInfo{Requests: anys(reqs)}
			}
			if err := sleep(ctx, delay); err != nil {
				return err
			}
			if err := st.Send(resp); err != nil {
				return err
			}
			n++
			reqs = nil
		}
	}
	if !fullDuplex && len(def.GetResponseData()) > 0 {
		if err := st.SendHeader(); err != nil {
			return err
		}
	}
	if def == nil {
		return nil
	}
	for ; n < len(def.ResponseData); n++ {
		resp := &v1.BidiStreamResponse{Payload: &v1.ConformancePayload{Data: def.ResponseData[n]}}
		if n == 0 {
			resp.Payload.RequestInfo = requestInfo(ctx, reqs)
		}
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
	if def.Error != nil {
		var info *v1.ConformancePayload_RequestInfo
		if n == 0 {
			info = requestInfo(ctx, reqs)
		}
		return statusOf(def.Error, info)
	}
	return nil
}

// unary answers a unary or client-streaming call as def says.
func unary(ctx context.Context, def *v1.UnaryResponseDefinition, reqs []proto.Message) (*v1.ConformancePayload, error) {
	info := requestInfo(ctx, reqs)
	if def == nil {
		return &v1.ConformancePayload{RequestInfo: info}, nil
	}
	setMetadata(ctx, def.ResponseHeaders, def.ResponseTrailers)
	if e := def.GetError(); e != nil {
		return nil, statusOf(e, info)
	}
	if err := sleep(ctx, time.Duration(def.ResponseDelayMs)*time.Millisecond); err != nil {
		return nil, err
	}
	return &v1.ConformancePayload{RequestInfo: info, Data: def.GetResponseData()}, nil
}

// sleep waits d, the response delay the suite asked for, even past the
// call's deadline, as the suite's reference server does: its timeout cases
// check that the client gives up at its deadline, and an answer from the
// server at that very moment would race the client's own cancellation. A
// call whose client went away ends at once.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		if ctx.Err() != context.DeadlineExceeded {
			return ctx.Err()
		}
	}
	<-t.C
	return nil
}

func setMetadata(ctx context.Context, headers, trailers []*v1.Header) {
	rpc.SetHeader(ctx, metadataOf(headers))
	rpc.SetTrailer(ctx, metadataOf(trailers))
}

func metadataOf(hs []*v1.Header) rpc.Metadata {
	if len(hs) == 0 {
		return nil
	}
	md := rpc.Metadata{}
	for _, h := range hs {
		md[h.Name] = append(md[h.Name], h.Value...)
	}
	return md
}

// requestInfo describes the call to the suite: its headers, timeout and
// requests.
func requestInfo(ctx context.Context, reqs []proto.Message) *v1.ConformancePayload_RequestInfo {
	info := &v1.ConformancePayload_RequestInfo{Requests: anys(reqs)}
	for k, vs := range rpc.IncomingMetadata(ctx) {
		info.RequestHeaders = append(info.RequestHeaders, &v1.Header{Name: k, Value: vs})
	}
	if d, ok := ctx.Deadline(); ok {
		ms := time.Until(d).Milliseconds()
		info.TimeoutMs = &ms
	}
	return info
}

func anys(ms []proto.Message) []*anypb.Any {
	out := make([]*anypb.Any, 0, len(ms))
	for _, m := range ms {
		a, err := anypb.New(m)
		if err == nil {
			out = append(out, a)
		}
	}
	return out
}

// statusOf is the error the suite asked for, with the request's
// description as a last detail if info is set. Details go as encoded
// google.protobuf.Any values, which the HTTP side sends as themselves.
func statusOf(e *v1.Error, info *v1.ConformancePayload_RequestInfo) error {
	se := &status.Error{Code: status.Code(e.Code), Message: e.GetMessage()}
	details := e.Details
	if info != nil {
		if a, err := anypb.New(info); err == nil {
			details = append(details, a)
		}
	}
	for _, d := range details {
		b, err := proto.Marshal(d)
		if err == nil {
			se.Details = append(se.Details, b)
		}
	}
	return se
}
