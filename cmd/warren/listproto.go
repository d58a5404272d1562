package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/warrenipc/warren/rpc"
)

// listProto prints the services of the server at arg as .proto files,
// fetched with gRPC server reflection over HTTP/2 on the same socket, and
// the methods that have no protobuf schema as a comment.
func listProto(ctx context.Context, w io.Writer, arg string, tf *tlsFlags, list *rpc.MethodList, timeout time.Duration) error {
	addr, cfg, err := clientAddr(arg)
	if err != nil {
		return explain(arg, err)
	}
	if cfg, err = tf.clientTLS(addr, cfg); err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if a, err := targetAddr(addr, cfg != nil && cfg.TLS != nil); err == nil {
		addr = a.String() // reflection asks one server: the first
	}
	hc := rpc.HTTPClient(addr, cfg)
	tr := hc.Transport.(*http.Transport)
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true) // reflection is a bidi stream
	defer hc.CloseIdleConnections()
	hc.Transport = bearer{tr}
	st := grpcreflect.NewClient(hc, "http://warren").NewStream(ctx)
	defer st.Close()
	names, err := st.ListServices()
	if err != nil {
		return fmt.Errorf("server reflection: %w", err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var services []protoreflect.FullName
	for _, n := range names {
		if strings.HasPrefix(string(n), "grpc.health.") || strings.HasPrefix(string(n), "grpc.reflection.") {
			continue // served by every warren server
		}
		services = append(services, n)
		files, err := st.FileContainingSymbol(n)
		if err != nil {
			return fmt.Errorf("server reflection: %s: %w", n, err)
		}
		for _, f := range files {
			if !seen[f.GetName()] {
				seen[f.GetName()] = true
				set.File = append(set.File, f)
			}
		}
	}
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return fmt.Errorf("server reflection: the schema does not resolve: %w", err)
	}
	var printed []string
	for _, n := range services {
		d, err := reg.FindDescriptorByName(n)
		if err != nil {
			return err
		}
		fd := d.ParentFile()
		if slices.Contains(printed, fd.Path()) {
			continue
		}
		printed = append(printed, fd.Path())
		if len(printed) > 1 {
			fmt.Fprintln(w)
		}
		writeProtoFile(w, fd)
	}
	var plain []rpc.MethodInfo
	for _, m := range list.Methods {
		if m.Name != rpc.IntrospectionMethod && (m.Request == nil || m.Request.Proto == "") {
			plain = append(plain, m)
		}
	}
	if len(plain) > 0 {
		if len(printed) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "// Methods without a protobuf schema (JSON only):")
		for _, m := range plain {
			fmt.Fprintf(w, "//   %s %s %s -> %s\n", m.Name, m.Kind, formatShape(m.Request), formatShape(m.Reply))
		}
	}
	return nil
}

// writeProtoFile writes fd in .proto syntax: its package, imports,
// messages, enums and services (options and comments are left out).
func writeProtoFile(w io.Writer, fd protoreflect.FileDescriptor) {
	fmt.Fprintf(w, "// %s\n", fd.Path())
	switch fd.Syntax() {
	case protoreflect.Proto2:
		fmt.Fprintln(w, `syntax = "proto2";`)
	case protoreflect.Editions:
		fmt.Fprintln(w, `edition = "2023";`)
	default:
		fmt.Fprintln(w, `syntax = "proto3";`)
	}
	if fd.Package() != "" {
		fmt.Fprintf(w, "\npackage %s;\n", fd.Package())
	}
	if imps := fd.Imports(); imps.Len() > 0 {
		fmt.Fprintln(w)
		for i := range imps.Len() {
			fmt.Fprintf(w, "import %q;\n", imps.Get(i).Path())
		}
	}
	for i := range fd.Services().Len() {
		sd := fd.Services().Get(i)
		fmt.Fprintf(w, "\nservice %s {\n", sd.Name())
		for j := range sd.Methods().Len() {
			md := sd.Methods().Get(j)
			in, out := typeName(fd, md.Input().FullName()), typeName(fd, md.Output().FullName())
			if md.IsStreamingClient() {
				in = "stream " + in
			}
			if md.IsStreamingServer() {
				out = "stream " + out
			}
			fmt.Fprintf(w, "  rpc %s(%s) returns (%s);\n", md.Name(), in, out)
		}
		fmt.Fprintln(w, "}")
	}
	for i := range fd.Messages().Len() {
		fmt.Fprintln(w)
		writeMessage(w, fd, fd.Messages().Get(i), "")
	}
	for i := range fd.Enums().Len() {
		fmt.Fprintln(w)
		writeEnum(w, fd.Enums().Get(i), "")
	}
}

func writeMessage(w io.Writer, fd protoreflect.FileDescriptor, md protoreflect.MessageDescriptor, indent string) {
	fmt.Fprintf(w, "%smessage %s {\n", indent, md.Name())
	in := indent + "  "
	for i := range md.Messages().Len() {
		if nd := md.Messages().Get(i); !nd.IsMapEntry() {
			writeMessage(w, fd, nd, in)
		}
	}
	for i := range md.Enums().Len() {
		writeEnum(w, md.Enums().Get(i), in)
	}
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if od := f.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Fields().Get(0) != f {
				continue // written with the first field of its oneof
			}
			fmt.Fprintf(w, "%soneof %s {\n", in, od.Name())
			for j := range od.Fields().Len() {
				writeField(w, fd, od.Fields().Get(j), in+"  ", true)
			}
			fmt.Fprintf(w, "%s}\n", in)
			continue
		}
		writeField(w, fd, f, in, false)
	}
	fmt.Fprintf(w, "%s}\n", indent)
}

func writeField(w io.Writer, fd protoreflect.FileDescriptor, f protoreflect.FieldDescriptor, indent string, inOneof bool) {
	label := ""
	switch {
	case f.IsMap():
		label = ""
	case f.IsList():
		label = "repeated "
	case inOneof:
	case f.HasOptionalKeyword():
		label = "optional "
	case f.Cardinality() == protoreflect.Required:
		label = "required "
	}
	var typ string
	if f.IsMap() {
		typ = fmt.Sprintf("map<%s, %s>", fieldType(fd, f.MapKey()), fieldType(fd, f.MapValue()))
	} else {
		typ = fieldType(fd, f)
	}
	fmt.Fprintf(w, "%s%s%s %s = %d;\n", indent, label, typ, f.Name(), f.Number())
}

func fieldType(fd protoreflect.FileDescriptor, f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return typeName(fd, f.Message().FullName())
	case protoreflect.EnumKind:
		return typeName(fd, f.Enum().FullName())
	}
	return f.Kind().String()
}

// typeName names a message or enum as seen from fd: relative to its
// package, or fully qualified.
func typeName(fd protoreflect.FileDescriptor, n protoreflect.FullName) string {
	if p := string(fd.Package()); p != "" && strings.HasPrefix(string(n), p+".") {
		return string(n)[len(p)+1:]
	}
	return "." + string(n)
}

func writeEnum(w io.Writer, ed protoreflect.EnumDescriptor, indent string) {
	fmt.Fprintf(w, "%senum %s {\n", indent, ed.Name())
	for i := range ed.Values().Len() {
		v := ed.Values().Get(i)
		fmt.Fprintf(w, "%s  %s = %d;\n", indent, v.Name(), v.Number())
	}
	fmt.Fprintf(w, "%s}\n", indent)
}
