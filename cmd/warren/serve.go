package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/internal/sdnotify"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

var serveHelp = help{
	usage: "warren serve [--addr ADDR] [--mode 0600] [--allow-uid N]... [--allow-gid N]... [--token T | --no-auth] [--event-loop] [--metrics ADDR] [--log-format text|json] [--log-level LEVEL]\n       warren serve --addr tls://HOST:PORT --cert FILE --key FILE [--client-ca FILE [--allow-san NAME]... [--allow-cn NAME]...]",
	text: `
Serve the counter service (Counter.Set, Get, Inc, List and Watch; see
'warren list') over warren RPC and, on the same address, HTTP in the Connect
protocol (POST /Counter.Inc with a JSON body).

serve prints "listening on ADDR" once it accepts connections. Without
--addr it listens on the per-user default address, which 'warren call',
'list' and 'ping' accept as "default": $XDG_RUNTIME_DIR/warren/warren.sock,
or warren-UID/warren.sock in the temporary directory (created with mode 0700).

On a network address (tcp://, ws://, and tls:// or wss:// without
--client-ca), every call, HTTP request and WebSocket
upgrade must carry a token: a random one unless --token sets it. serve
prints the page's URL with the token (http://127.0.0.1:PORT/?token=...);
'warren call --token' or WARREN_TOKEN pass it. --no-auth, on a loopback
address only, turns the token off. Browsers get a live page of the counters
at GET / on every address (other clients get the method list as JSON),
and the server's console at /console/: its methods, a form to call them,
streams followed, live figures.

On a unix socket, only processes of the user running serve may call it; --allow-uid and
--allow-gid (repeatable, or comma-separated) let others in as well, and
--mode must then let them open the socket file. A refused client gets a
permission-denied error naming the reason.

For tls:// and wss:// addresses, --cert and --key are the server's
certificate and key. With --client-ca, clients must present a certificate
signed by that CA (mutual TLS); --allow-san and --allow-cn then narrow the
callers to certificates with one of those DNS or URI subject alternative
names (a name with a colon, such as spiffe://example.org/web, is a URI)
or common names. A refused client gets a permission-denied error naming
the reason. TLS 1.3 at least, unless --tls-min 1.2. 'warren certs DIR'
writes development certificates.

SIGINT or SIGTERM shuts down gracefully: calls in flight finish, watches end
with "unavailable: server is shutting down", the socket file is removed and
serve exits 0. A second signal stops at once. The last log record,
"counter increments applied", gives the Counter.Inc calls this process
applied (calls) and the sum they added (sum), over every protocol.

--addr systemd: serves the socket systemd passed by socket activation
(LISTEN_FDS; the first one), and systemd:NAME the one its socket unit names
with FileDescriptorName=; the unit sets its mode and owner (no --mode), and
stopping leaves its file. A unix socket's callers are checked as above. serve
tells systemd it is ready (READY=1 on NOTIFY_SOCKET) once it serves, and
that it is stopping (STOPPING=1); with WatchdogSec= it sends WATCHDOG=1 every
half of it. See examples/systemd.

The log on stderr (--log-format text or json, --log-level debug, info, warn
or error) has one record per refused connection, shed idle connection,
drain and call refused by a limit, with the peer's network, uid, gid, pid
and address and the reason as attributes; a peer refused again within 10 s
is counted into one summary record.

--metrics ADDR serves GET /metrics in the Prometheus text format on
another address (any of --addr's kinds) with the same callers allowed and,
on a network address, the same token (a random one, printed, if the service
is on a unix socket and --token is not given); it also answers GET /metrics
on --addr. See README, "Metrics".

--event-loop serves unix, tcp and ws connections from an epoll event loop
(Linux; rpc.ServerOptions.EventLoop): an idle connection holds no goroutine.
Calls, limits and policies are the same as without it. tls and wss
addresses, and other platforms, are served a goroutine per connection.`,
	examples: `  warren serve
  warren serve --addr unix:///run/counter/counter.sock --mode 0660 --allow-gid 100
  warren serve --addr tcp://127.0.0.1:7000
  warren serve --addr tcp://127.0.0.1:7000 --token "$(cat token-file)"
  warren serve --addr tls://0.0.0.0:7443 --cert server.pem --key server-key.pem --client-ca ca.pem --allow-cn client
  warren serve --addr ws://127.0.0.1:8080/warren
  warren serve --log-format json --log-level warn
  systemd-socket-activate -l /run/user/1000/counter.sock warren serve --addr systemd:`,
}

// idList is a repeatable flag of numeric ids.
type idList struct {
	what string // "uid" or "gid"
	ids  []int
}

func (l *idList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(l.ids))
	for i, id := range l.ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 31)
		if err != nil {
			return fmt.Errorf("%q is not a %s: give a number such as 1000 (see `id -u` and `id -g`)", f, l.what)
		}
		l.ids = append(l.ids, int(n))
	}
	return nil
}

// parseMode parses an octal permission mode: 0600, 600 or 0o600.
func parseMode(s string) (fs.FileMode, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	n, err := strconv.ParseUint(t, 8, 32)
	if err != nil || n&^0o777 != 0 || n == 0 {
		return 0, fmt.Errorf("invalid --mode %q: give octal permission bits such as 0600 or 0660", s)
	}
	return fs.FileMode(n), nil
}

func cmdServe(e *env, args []string) error {
	fset := newFlagSet("serve")
	addrFlag := fset.String("addr", defaultKeyword, "address to listen on: unix:///path, unix:rel/path, unix:@name, tcp://host:port, tls://host:port, ws://host:port/path, wss://host:port/path, systemd:[NAME] (a socket passed by systemd), or default")
	modeFlag := fset.String("mode", "0600", "permission bits of the socket file (octal)")
	uids := &idList{what: "uid"}
	gids := &idList{what: "gid"}
	fset.Var(uids, "allow-uid", "also allow callers with this uid (repeatable)")
	fset.Var(gids, "allow-gid", "also allow callers with this primary gid (repeatable)")
	var tf tlsFlags
	tf.add(fset, true)
	grace := fset.Duration("grace", 10*time.Second, "how long a graceful shutdown waits for calls in flight")
	token := fset.String("token", "", "token network callers must send (default: a random one, printed in the page's URL)")
	noAuth := fset.Bool("no-auth", false, "accept calls without a token (loopback network addresses only)")
	eventLoop := fset.Bool("event-loop", false, "serve unix, tcp and ws connections from an epoll event loop (Linux)")
	var shmRing bool
	shmRingFlag(fset, &shmRing)
	logFormat := fset.String("log-format", "text", "format of the log on stderr: text or json")
	logLevel := fset.String("log-level", "info", "least severe log records written: debug, info, warn or error")
	metricsAddr := fset.String("metrics", "", "also serve GET /metrics (Prometheus) on this address (default: off)")
	_, err := parseArgs(e, fset, serveHelp, args, 0, 0)
	if err != nil {
		return err
	}
	logger, err := newLogger(e.stderr, *logFormat, *logLevel)
	if err != nil {
		return &usageError{cmd: "serve", msg: err.Error()}
	}
	mode, err := parseMode(*modeFlag)
	if err != nil {
		return &usageError{cmd: "serve", msg: err.Error()}
	}
	addr := *addrFlag
	if addr == defaultKeyword {
		if _, err := prepareDefaultDir(); err != nil {
			return err
		}
		if addr, err = defaultAddr(); err != nil {
			return err
		}
	}
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return &usageError{cmd: "serve", msg: trimWarren(err.Error())}
	}
	modeSet := false
	fset.Visit(func(f *flag.Flag) { modeSet = modeSet || f.Name == "mode" })
	// A socket passed by systemd is taken now: what follows depends on
	// whether it is a unix or a tcp socket.
	var l *transport.Listener
	activated := a.Scheme == transport.SchemeSystemd
	if activated {
		if modeSet {
			return &usageError{cmd: "serve", msg: "--mode does not apply to a socket passed by systemd: the socket unit's SocketMode=, SocketUser= and SocketGroup= set it"}
		}
		if l, err = transport.Listen(addr, &transport.ListenConfig{Policy: peer.AllowAll(), Logger: logger}); err != nil {
			return fmt.Errorf("%s: %s", addr, trimWarren(err.Error()))
		}
		defer l.Close()
		a = l.Endpoint()
	}
	if modeSet && a.Scheme == transport.SchemeUnix && strings.HasPrefix(a.Address, "@") {
		return &usageError{cmd: "serve", msg: "--mode cannot apply to an abstract address (" + addr + "): it has no file, so any local user can connect (the policy still decides who may call) or bind the name first; use a socket file (unix:///path) to restrict who can connect, and have clients check the server with --server-uid"}
	}
	tlsConf, policy, policyText, err := tf.serverTLS(a)
	if err != nil {
		return err
	}
	if a.Scheme != transport.SchemeUnix && (len(uids.ids) > 0 || len(gids.ids) > 0) {
		return &usageError{cmd: "serve", msg: fmt.Sprintf("--allow-uid and --allow-gid need a unix socket address: %s peers have no kernel credentials", a.Scheme)}
	}
	switch a.Scheme {
	case transport.SchemeUnix:
		pols := []peer.Policy{peer.SameUser()}
		words := []string{fmt.Sprintf("uid %d (you)", os.Geteuid())}
		if len(uids.ids) > 0 {
			pols = append(pols, peer.AllowUIDs(uids.ids...))
			words = append(words, "uid "+uids.String())
		}
		if len(gids.ids) > 0 {
			pols = append(pols, peer.AllowGIDs(gids.ids...))
			words = append(words, "gid "+gids.String())
		}
		policy = peer.AnyOf(pols...)
		policyText = "callers allowed: " + strings.Join(words, ", or ")
	default:
		switch {
		case *noAuth:
			policyText = "no token required (--no-auth)"
		case tf.clientCA != "" && *token == "":
			// Mutual TLS authenticates every caller; a token would add nothing.
		default:
			if policyText != "" {
				policyText += "; "
			}
			policyText += "callers must send the token in the URL below (warren call --token, or WARREN_TOKEN)"
		}
	}

	var auth *rpc.TokenAuth
	if tf.clientCA == "" || *token != "" || *noAuth {
		if auth, err = serveAuth(e.stderr, a, *token, *noAuth); err != nil {
			return err
		}
	}

	var ml *transport.Listener
	if *metricsAddr != "" {
		if ml, err = metricsListen(*metricsAddr, a, &policy, &auth, *token, *noAuth, mode, tlsConf, logger); err != nil {
			return err
		}
		defer ml.Close()
	}

	// The server's rpc policy, not the listener's, decides who may call.
	// Both apply it at accept, before reading a byte; a listener closes a
	// refused peer without a word, while the rpc server first writes it
	// the reason (a GOAWAY with PermissionDenied) and closes it at once.
	if l == nil {
		if l, err = transport.Listen(addr, &transport.ListenConfig{Mode: mode, Policy: peer.AllowAll(), TLS: tlsConf, WebSocket: wsOptions(auth), Logger: logger}); err != nil {
			return listenError(a, err)
		}
	}
	var tally incTally
	srv := rpc.NewServer(&rpc.ServerOptions{Policy: policy, Logger: logger, Auth: auth, Page: pageHandler{}, Console: true, EventLoop: *eventLoop, Bridge: grpcbridge.New(), Metrics: ml != nil,
		Settings: wire.Settings{ShmRing: ringSize(shmRing)}, Interceptors: []rpc.UnaryServerInterceptor{tally.interceptor}})
	store := counter.New()
	store.Register(srv)
	defer tally.log(logger) // once no call runs any more

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	served := make(chan error, 2)
	go func() { served <- srv.Serve(l) }()
	servers := 1
	if ml != nil {
		servers++
		go func() { served <- srv.Serve(ml) }()
	}

	ep := l.Endpoint().String()
	fmt.Fprintf(e.stdout, "listening on %s\n", ep)
	if ml != nil {
		fmt.Fprintf(e.stdout, "metrics on %s (GET /metrics)\n", ml.Endpoint())
		if me := ml.Endpoint(); auth != nil && me.Scheme != transport.SchemeUnix {
			fmt.Fprintf(e.stderr, "warren serve: scrape with  curl -H 'Authorization: Bearer %s' %s\n", auth.Token, pageURL(me, ml.Addr(), nil)+"metrics")
		}
	}
	switch {
	case activated:
		fmt.Fprintf(e.stderr, "warren serve: socket passed by systemd (%s), its mode and owner set by the socket unit; %s\n", addr, policyText)
	case a.Scheme == transport.SchemeUnix && !strings.HasPrefix(a.Address, "@"):
		fmt.Fprintf(e.stderr, "warren serve: socket mode %#o; %s\n", mode, policyText)
	default:
		fmt.Fprintf(e.stderr, "warren serve: %s\n", policyText)
	}
	shown := ep
	if *addrFlag == defaultKeyword {
		shown = defaultKeyword
	}
	hint := tf.clientHint()
	if auth != nil {
		hint = "--token " + auth.Token + " " + hint
	}
	fmt.Fprintf(e.stderr, "warren serve: try  warren call %s%s Counter.Set '{\"name\":\"a\",\"value\":1}'\n", hint, shown)
	if a.Scheme == transport.SchemeUnix && !strings.HasPrefix(a.Address, "@") {
		fmt.Fprintf(e.stderr, "warren serve: or   curl --unix-socket %s http://warren/Counter.Inc -H 'Content-Type: application/json' -d '{\"name\":\"a\"}'\n", a.Address)
	}
	if a.Scheme == transport.SchemeTCP || a.Scheme == transport.SchemeTLS {
		// The page is served by the HTTP bridge; a ws:// or wss://
		// listener serves only its WebSocket path.
		u := pageURL(a, l.Addr(), auth)
		fmt.Fprintf(e.stdout, "open %s\n", u)
		if base, query, ok := strings.Cut(u, "?"); ok {
			fmt.Fprintf(e.stderr, "warren serve: the console: %sconsole/?%s\n", base, query)
		} else {
			fmt.Fprintf(e.stderr, "warren serve: the console: %sconsole/\n", u)
		}
	}
	if *eventLoop {
		if runtime.GOOS == "linux" && a.Scheme != transport.SchemeTLS && a.Scheme != transport.SchemeWSS {
			fmt.Fprintln(e.stderr, "warren serve: connections are served from an event loop")
		} else {
			fmt.Fprintf(e.stderr, "warren serve: --event-loop: %s on %s is served a goroutine per connection\n", a.Scheme, runtime.GOOS)
		}
	}
	fmt.Fprintln(e.stderr, "warren serve: stop with Ctrl-C (or SIGTERM)")
	if _, err := sdnotify.Notify(fmt.Sprintf("READY=1\nSTATUS=serving %s\nMAINPID=%d", ep, os.Getpid())); err != nil {
		fmt.Fprintf(e.stderr, "warren serve: telling systemd it is ready: %v\n", err)
	}
	watchCtx, stopWatchdog := context.WithCancel(context.Background())
	defer stopWatchdog()
	go sdnotify.Watchdog(watchCtx)

	select {
	case err := <-served:
		// Serve failed on its own (an accept error).
		srv.Close()
		return fmt.Errorf("serving %s: %w", ep, err)
	case sig := <-sigs:
		fmt.Fprintf(e.stderr, "warren serve: %v: shutting down gracefully (send it again to stop at once)\n", sig)
	}
	stopWatchdog()
	sdnotify.Notify("STOPPING=1")
	store.Shutdown() // end watches, which would otherwise hold up Shutdown
	ctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	var shutErr error
	select {
	case shutErr = <-shut:
	case sig := <-sigs:
		fmt.Fprintf(e.stderr, "warren serve: %v: stopping at once\n", sig)
		srv.Close()
		shutErr = <-shut
	}
	for range servers {
		if err := <-served; !errors.Is(err, rpc.ErrServerClosed) {
			return fmt.Errorf("serving %s: %w", ep, err)
		}
	}
	if shutErr != nil {
		fmt.Fprintf(e.stderr, "warren serve: calls still in flight after %v were cut off\n", *grace)
		return exitStatus(exitError)
	}
	if a.Scheme == transport.SchemeUnix && !strings.HasPrefix(a.Address, "@") && !activated {
		fmt.Fprintf(e.stderr, "warren serve: stopped; removed %s\n", a.Address)
	} else {
		fmt.Fprintln(e.stderr, "warren serve: stopped")
	}
	return nil
}

// newLogger returns the logger of --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	switch level {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, fmt.Errorf("invalid --log-level %q: give debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: give text or json", format)
}

// listenError says what to do about a failed Listen.
func listenError(a transport.Addr, err error) error {
	path := a.Address
	switch {
	case errors.Is(err, transport.ErrAddrInUse):
		return fmt.Errorf("%s is in use by a running server: stop that server first, or choose another --addr", a)
	case errors.Is(err, transport.ErrNotSocket):
		return fmt.Errorf("%s exists and is not a socket, so it was left alone: remove it yourself if it is not needed, or choose another --addr", path)
	case errors.Is(err, syscall.ENOENT) && a.Scheme == transport.SchemeUnix:
		return fmt.Errorf("cannot create the socket %s: directory %s does not exist: create it first, or choose another --addr", path, filepath.Dir(path))
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fmt.Errorf("cannot listen on %s: permission denied (%s): choose a directory you can write to, or --addr default", a, trimWarren(err.Error()))
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s is in use: stop whatever listens there, or choose another --addr", a)
	}
	return err
}
