package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

var callHelp = help{
	usage: "warren call [-timeout D] [-H KEY:VALUE]... [--ca FILE] [--cert FILE --key FILE] [--server-name NAME] [--server-uid N] [--token T] ADDR METHOD [JSON]",
	text: `
Call METHOD on the server at ADDR with the JSON request (default {}; "-"
reads it from stdin) and print the reply as JSON on stdout. For a method
that streams replies (see 'warren list'), print one JSON value per line
until the stream ends or Ctrl-C. For a method that takes a stream of
requests, send JSON if given, and otherwise the sequence of JSON values
read from stdin.

A Counter.Watch of a counter that does not exist yet says so on stderr
and waits for it to be set.

-H KEY:VALUE (repeatable) sends the call metadata KEY with VALUE; KEY
is lowercased, as metadata keys are.

A failed call prints "error: CODE: message" on stderr (CODE as the Connect
protocol names it, such as not_found) and exits 1.

--server-uid N requires the server to run as uid N, as the kernel reports
it on the connected socket: with an abstract address (unix:@name), which
has no file permissions, any local user could have bound the name first.
With "default", the server must run as you.
` + tlsClientText,
	examples: `  warren call default Counter.Set '{"name":"a","value":1}'
  warren call default Counter.Inc '{"name":"a","by":5}'
  warren call unix:///run/app.sock Counter.Watch '{"name":"a"}'
  echo '{"name":"a"}' | warren call default Counter.Get -
  warren call -H 'authorization:Bearer T' default Counter.List
  warren call --ca ca.pem --cert client.pem --key client-key.pem tls://host:7443 Counter.Get '{"name":"a"}'`,
}

var listHelp = help{
	usage: "warren list [--json | --proto] [-timeout D] [--token T] [--ca FILE] [--cert FILE --key FILE] [--server-name NAME] [--server-uid N] ADDR",
	text: `
List the methods of the server at ADDR (from its Warren.Methods), with
their kind and the shapes of their request and reply messages. With
--proto, print the services that have a protobuf schema as .proto files
(fetched with gRPC server reflection on the same socket), and the
methods without one as a comment.
` + tlsClientText,
	examples: `  warren list default
  warren list --json unix:///run/app.sock
  warren list --proto default > counter.proto
  warren list --ca ca.pem --cert client.pem --key client-key.pem tls://host:7443`,
}

var pingHelp = help{
	usage: "warren ping [-n N] [-timeout D] [--ca FILE] [--cert FILE --key FILE] [--server-name NAME] [--server-uid N] [--token T] ADDR",
	text: `
Send N pings to the server at ADDR, one after another on one connection,
and print the round-trip times: min, p50, p99 and max.
` + tlsClientText,
	examples: `  warren ping default
  warren ping -n 2000 --ca ca.pem --cert client.pem --key client-key.pem tls://host:7443
  warren ping -n 1000 unix:///run/app.sock`,
}

// interruptContext returns a context canceled by SIGINT or SIGTERM.
func interruptContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// dial resolves a client's ADDR and returns a client for it, with the
// certificate flags tf. serverUID, if not -1, is the uid the server must
// run as (--server-uid).
func dial(arg string, tf *tlsFlags, serverUID int) (*rpc.Client, error) {
	addr, cfg, err := clientAddr(arg)
	if err != nil {
		return nil, explain(arg, err)
	}
	if serverUID >= 0 {
		cfg = &transport.DialConfig{ServerPolicy: peer.PolicyFunc(func(p *peer.Peer) error {
			if !p.HasCred || p.UID != serverUID {
				return fmt.Errorf("%w: the server at %s runs as %s, not as uid %d (--server-uid)", errServerUID, arg, serverIdentity(p), serverUID)
			}
			return nil
		})}
	}
	if cfg, err = tf.clientTLS(addr, cfg); err != nil {
		return nil, err
	}
	c, err := rpc.Dial(addr, clientOptions(&rpc.ClientOptions{Dial: cfg}))
	if err != nil {
		return nil, explain(arg, err)
	}
	return c, nil
}

// errServerUID marks a server refused by --server-uid.
var errServerUID = fmt.Errorf("%w", peer.ErrDenied)

func serverIdentity(p *peer.Peer) string {
	if !p.HasCred {
		return "a process whose credentials cannot be read (not a unix socket)"
	}
	return fmt.Sprintf("uid %d", p.UID)
}

// serverUIDFlag adds --server-uid to fset.
func serverUIDFlag(fset *flag.FlagSet) *int {
	return fset.Int("server-uid", -1, "require the server to run as this uid (read from the kernel on the connected unix socket; for any address, abstract ones too)")
}

// methods fetches the server's method list.
func methods(ctx context.Context, c *rpc.Client, timeout time.Duration, opts ...rpc.CallOption) (*rpc.MethodList, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return rpc.Call[rpc.Empty, rpc.MethodList](ctx, c, rpc.IntrospectionMethod, &rpc.Empty{}, opts...)
}

// closestMethod returns the method of list nearest to name by edit
// distance (ignoring case), or "" if none is near enough to be a typo.
func closestMethod(name string, list []rpc.MethodInfo) string {
	best, bestD := "", 3 // at most two edits
	for _, m := range list {
		if d := editDistance(strings.ToLower(name), strings.ToLower(m.Name)); d < bestD {
			best, bestD = m.Name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// headerFlags is the repeatable -H KEY:VALUE flag: call metadata.
type headerFlags rpc.Metadata

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	k = strings.ToLower(strings.TrimSpace(k))
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY:VALUE", s)
	}
	rpc.Metadata(h).Add(k, strings.TrimSpace(v))
	return nil
}

func cmdCall(e *env, args []string) error {
	fset := newFlagSet("call")
	var tf tlsFlags
	tf.add(fset, false)
	tokenFlag(fset)
	timeout := fset.Duration("timeout", 0, "give up after this long (0: no limit)")
	serverUID := serverUIDFlag(fset)
	shmRingFlag(fset, &clientShmRing)
	md := headerFlags{}
	fset.Var(md, "H", "send call metadata `KEY:VALUE` (repeatable)")
	pos, err := parseArgs(e, fset, callHelp, args, 2, 3)
	if err != nil {
		return err
	}
	addrArg, method := pos[0], pos[1]
	var req json.RawMessage
	fromStdin := len(pos) == 3 && pos[2] == "-"
	if len(pos) == 3 && !fromStdin {
		req = json.RawMessage(pos[2])
		if !json.Valid(req) {
			return &callError{status.InvalidArgument, fmt.Sprintf("the request %q is not valid JSON; quote it for the shell, as in '{\"name\":\"a\"}'", pos[2])}
		}
	}

	ctx, stop := interruptContext()
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	c, err := dial(addrArg, &tf, *serverUID)
	if err != nil {
		return err
	}
	defer c.Close()

	var opts []rpc.CallOption
	if len(md) > 0 {
		opts = append(opts, rpc.WithMetadata(rpc.Metadata(md)))
	}
	kind := "unary"
	var suggest string // a known method close to a mistyped one
	list, err := methods(ctx, c, 10*time.Second, opts...)
	switch {
	case err == nil:
		if i := slices.IndexFunc(list.Methods, func(m rpc.MethodInfo) bool { return m.Name == method }); i >= 0 {
			kind = list.Methods[i].Kind
		} else {
			suggest = closestMethod(method, list.Methods)
		}
	case refusedConn(err) || ctx.Err() != nil:
		return interrupted(ctx, explain(addrArg, err))
	default:
		// No introspection (or not for us): assume a unary method.
	}

	streamIn := kind == "client_stream" || kind == "bidi_stream"
	if req == nil && !streamIn {
		if fromStdin {
			if req, err = readOneJSON(e.stdin); err != nil {
				return &callError{status.InvalidArgument, "reading the request from stdin: " + err.Error()}
			}
		} else {
			req = json.RawMessage("{}")
		}
	}

	out := &jsonLines{w: e.stdout}
	switch {
	case kind == "unary":
		var resp json.RawMessage
		if err := c.Invoke(ctx, method, &req, &resp, append(opts, rpc.WithCodec(codec.JSON))...); err != nil {
			ce := explain(addrArg, err)
			if ce.code == status.Unimplemented && suggest != "" {
				ce.msg += fmt.Sprintf("; did you mean %s?", suggest)
			}
			return interrupted(ctx, ce)
		}
		return out.write(resp)
	case kind == "server_stream", streamIn:
		noteMissingCounter(ctx, e, c, method, req, opts)
		return callStream(ctx, e, c, addrArg, method, req, out, opts)
	}
	return &callError{status.Unimplemented, fmt.Sprintf("%s is a %s method, which this command cannot call", method, kind)}
}

// noteMissingCounter says on stderr when a Counter.Watch is for a counter
// that does not exist yet: its stream stays open but silent until the
// counter is first set.
func noteMissingCounter(ctx context.Context, e *env, c *rpc.Client, method string, req json.RawMessage, opts []rpc.CallOption) {
	if method != "Counter.Watch" && method != "warren.counter.v1.Counter.Watch" || req == nil {
		return
	}
	var w struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(req, &w) != nil || w.Name == "" {
		return
	}
	getReq, _ := json.Marshal(w)
	get := strings.TrimSuffix(method, "Watch") + "Get"
	var resp json.RawMessage
	err := c.Invoke(ctx, get, (*json.RawMessage)(&getReq), &resp, append(opts, rpc.WithCodec(codec.JSON))...)
	if status.CodeOf(err) == status.NotFound {
		fmt.Fprintf(e.stderr, "no counter named %q yet: waiting for it to be set (Ctrl-C to stop)\n", w.Name)
	}
}

// interrupted returns a quiet exit (status 130, as a shell reports SIGINT)
// after Ctrl-C, and err otherwise. ctx is canceled only by a signal.
func interrupted(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return exitStatus(130)
	}
	return err
}

// callStream runs a streaming call, printing each reply on its own line.
// Without req, the requests are read from stdin.
func callStream(ctx context.Context, e *env, c *rpc.Client, addrArg, method string, req json.RawMessage, out *jsonLines, opts []rpc.CallOption) error {
	cs, err := rpc.NewStream[json.RawMessage, json.RawMessage](ctx, c, method, append(opts, rpc.WithCodec(codec.JSON))...)
	if err != nil {
		return interrupted(ctx, explain(addrArg, err))
	}
	defer cs.Close()
	// The sender: the one request, or those read from stdin. Bad input
	// on stdin abandons the call; that, not the cancellation, is the
	// error to report. A sender still reading stdin when the call ends is
	// left to the process's exit.
	// (A failed send needs no report of its own: Recv returns the call's
	// outcome.)
	var badInput atomic.Pointer[callError]
	if req != nil {
		if err := cs.Send(&req); err == nil {
			cs.CloseSend()
		}
	} else {
		go func() {
			var ce *callError
			if err := sendFromStdin(e.stdin, cs); errors.As(err, &ce) {
				badInput.Store(ce)
				cs.Close()
			}
		}()
	}
	for {
		resp, err := cs.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ce := badInput.Load(); ce != nil {
				return ce
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil // Ctrl-C: the normal end of a watch
			}
			return explain(addrArg, err)
		}
		if err := out.write(*resp); err != nil {
			cs.Close()
			return err
		}
	}
}

// sendFromStdin sends each JSON value read from r, then closes the send
// side.
func sendFromStdin(r io.Reader, cs *rpc.ClientStream[json.RawMessage, json.RawMessage]) error {
	dec := json.NewDecoder(r)
	for {
		var m json.RawMessage
		err := dec.Decode(&m)
		if err == io.EOF {
			return cs.CloseSend()
		}
		if err != nil {
			return &callError{status.InvalidArgument, "reading requests from stdin: " + err.Error()}
		}
		if err := cs.Send(&m); err != nil {
			return err
		}
	}
}

func readOneJSON(r io.Reader) (json.RawMessage, error) {
	dec := json.NewDecoder(r)
	var m json.RawMessage
	if err := dec.Decode(&m); err != nil {
		if err == io.EOF {
			return nil, errors.New("no JSON value")
		}
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return m, nil
}

// jsonLines writes JSON values compactly, one a line.
type jsonLines struct {
	w   io.Writer
	buf bytes.Buffer
}

func (j *jsonLines) write(v json.RawMessage) error {
	j.buf.Reset()
	if err := json.Compact(&j.buf, v); err != nil {
		j.buf.Reset()
		j.buf.Write(v)
	}
	j.buf.WriteByte('\n')
	_, err := j.w.Write(j.buf.Bytes())
	return err
}

func cmdList(e *env, args []string) error {
	fset := newFlagSet("list")
	var tf tlsFlags
	tf.add(fset, false)
	tokenFlag(fset)
	asJSON := fset.Bool("json", false, "print the Warren.Methods reply as JSON")
	asProto := fset.Bool("proto", false, "print the services as .proto files (server reflection)")
	timeout := fset.Duration("timeout", 10*time.Second, "give up after this long")
	serverUID := serverUIDFlag(fset)
	pos, err := parseArgs(e, fset, listHelp, args, 1, 1)
	if err != nil {
		return err
	}
	if *asJSON && *asProto {
		return &usageError{cmd: "list", msg: "--json and --proto exclude each other"}
	}
	ctx, stop := interruptContext()
	defer stop()
	c, err := dial(pos[0], &tf, *serverUID)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := methods(ctx, c, *timeout)
	if err != nil {
		return interrupted(ctx, explain(pos[0], err))
	}
	if *asProto {
		return interrupted(ctx, listProto(ctx, e.stdout, pos[0], &tf, list, *timeout))
	}
	if *asJSON {
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "METHOD\tKIND\tREQUEST\tREPLY")
	for _, m := range list.Methods {
		req, reply := formatShape(m.Request), formatShape(m.Reply)
		switch m.Kind {
		case "server_stream":
			reply = "stream " + reply
		case "client_stream":
			req = "stream " + req
		case "bidi_stream":
			req, reply = "stream "+req, "stream "+reply
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, m.Kind, req, reply)
	}
	return tw.Flush()
}

// formatShape writes a message shape the way one would write its JSON:
// {name: string, by: integer}. A named Go type is spelled out once; where
// it appears again (as in a recursive type) its Go name stands for it.
func formatShape(s *rpc.Shape) string {
	var b strings.Builder
	writeShape(&b, s, map[string]bool{})
	return b.String()
}

func writeShape(b *strings.Builder, s *rpc.Shape, seen map[string]bool) {
	named := s != nil && s.Type == "object" && s.Elem == nil && s.Go != "" && !strings.ContainsAny(s.Go, "{ ")
	switch {
	case s == nil:
		b.WriteString("?")
	case s.Proto != "" && s.Type != "object": // an enum
		b.WriteString(s.Proto)
	case named && seen[s.Go]:
		b.WriteString(s.Go)
	case s.Type == "object" && s.Elem != nil:
		b.WriteString("{string: ")
		writeShape(b, s.Elem, seen)
		b.WriteString("}")
	case s.Type == "object":
		if named {
			seen[s.Go] = true
		}
		b.WriteString("{")
		for i, f := range s.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(f.Name)
			b.WriteString(": ")
			writeShape(b, f.Shape, seen)
		}
		b.WriteString("}")
	case s.Type == "array":
		b.WriteString("[")
		writeShape(b, s.Elem, seen)
		b.WriteString("]")
	default:
		b.WriteString(s.Type)
	}
}

func cmdPing(e *env, args []string) error {
	fset := newFlagSet("ping")
	var tf tlsFlags
	tf.add(fset, false)
	tokenFlag(fset)
	n := fset.Int("n", 10, "number of pings")
	timeout := fset.Duration("timeout", 10*time.Second, "give up on a ping after this long")
	serverUID := serverUIDFlag(fset)
	shmRingFlag(fset, &clientShmRing)
	pos, err := parseArgs(e, fset, pingHelp, args, 1, 1)
	if err != nil {
		return err
	}
	if *n < 1 {
		return &usageError{cmd: "ping", msg: "-n must be at least 1"}
	}
	ctx, stop := interruptContext()
	defer stop()
	c, err := dial(pos[0], &tf, *serverUID)
	if err != nil {
		return err
	}
	defer c.Close()
	// A ping is answered even on a connection the server is refusing (it
	// sends GOAWAY and closes it a moment later): make a call first to
	// learn whether the server lets us in.
	if _, err := methods(ctx, c, *timeout); err != nil && refusedConn(err) {
		return interrupted(ctx, explain(pos[0], err))
	}
	rtts := make([]time.Duration, 0, *n)
	for range *n {
		pctx, cancel := context.WithTimeout(ctx, *timeout)
		rtt, err := c.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil && len(rtts) > 0 {
				break // Ctrl-C: report what we have
			}
			return interrupted(ctx, explain(pos[0], err))
		}
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	fmt.Fprintf(e.stdout, "%d pings to %s: min %s  p50 %s  p99 %s  max %s\n", len(rtts), pos[0],
		fmtDur(rtts[0]), fmtDur(quantile(rtts, 0.50)), fmtDur(quantile(rtts, 0.99)), fmtDur(rtts[len(rtts)-1]))
	return nil
}

// quantile returns the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// fmtDur formats a duration with three significant digits or so.
func fmtDur(d time.Duration) string {
	switch {
	case d < 10*time.Microsecond:
		return d.Round(10 * time.Nanosecond).String()
	case d < time.Millisecond:
		return d.Round(100 * time.Nanosecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
