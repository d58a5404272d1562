package counter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a counter service on a unix socket and a client of it.
type env struct {
	addr   string
	path   string
	store  *counter.Store
	srv    *rpc.Server
	client *rpc.Client
}

func start(t *testing.T) *env {
	t.Helper()
	return startOpts(t, nil)
}

// startOpts is start with the server's options.
func startOpts(t *testing.T, opts *rpc.ServerOptions) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	addr := "unix://" + path
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{addr: addr, path: path, store: counter.New(), srv: rpc.NewServer(opts)}
	e.store.Register(e.srv)
	served := make(chan error, 1)
	go func() { served <- e.srv.Serve(l) }()
	e.client, err = rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.client.Close()
		e.store.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func set(t *testing.T, e *env, name string, v int64) {
	t.Helper()
	c, err := rpc.Call[counter.SetRequest, counter.Entry](ctxT(t), e.client, "Counter.Set", &counter.SetRequest{Name: name, Value: v})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != name || c.Value != v {
		t.Fatalf("Set reply %+v", c)
	}
}

func inc(ctx context.Context, c *rpc.Client, name string, by *int64) (*counter.Entry, error) {
	return rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: name, By: by})
}

func get(ctx context.Context, c *rpc.Client, name string) (*counter.Entry, error) {
	return rpc.Call[counter.GetRequest, counter.Entry](ctx, c, "Counter.Get", &counter.GetRequest{Name: name})
}

func ptr(v int64) *int64 { return &v }

func wantCode(t *testing.T, what string, err error, code status.Code, msgPart string) {
	t.Helper()
	if status.CodeOf(err) != code {
		t.Fatalf("%s: err = %v, want %v", what, err, code)
	}
	if !strings.Contains(status.FromError(err).Message, msgPart) {
		t.Fatalf("%s: message %q lacks %q", what, status.FromError(err).Message, msgPart)
	}
}

func TestSetGetInc(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	set(t, e, "a", 5)
	if c, err := get(ctx, e.client, "a"); err != nil || c.Value != 5 || c.Name != "a" {
		t.Fatalf("Get = %+v, %v", c, err)
	}
	for _, tc := range []struct {
		by   *int64
		want int64
	}{
		{nil, 6},       // by defaults to 1
		{ptr(10), 16},  // explicit
		{ptr(0), 16},   // an explicit 0 adds nothing
		{ptr(-20), -4}, // negative
		{ptr(1 << 40), 1<<40 - 4},
	} {
		c, err := inc(ctx, e.client, "a", tc.by)
		if err != nil || c.Value != tc.want || c.Name != "a" {
			t.Fatalf("Inc by %v = %+v, %v; want %d", tc.by, c, err, tc.want)
		}
	}
	set(t, e, "a", 3) // Set overwrites
	if c, err := get(ctx, e.client, "a"); err != nil || c.Value != 3 {
		t.Fatalf("Get after Set = %+v, %v", c, err)
	}
}

// The JSON a client sends: "by" omitted means 1, as the HTTP bridge and
// `warren call` send it.
func TestIncByDefaultRawJSON(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	set(t, e, "a", 0)
	for _, tc := range []struct{ req, want string }{
		{`{"name":"a"}`, `{"name":"a","value":"1"}`},
		{`{"name":"a","by":null}`, `{"name":"a","value":"2"}`},
		{`{"name":"a","by":5}`, `{"name":"a","value":"7"}`},    // int64 as a number is accepted
		{`{"name":"a","by":"-2"}`, `{"name":"a","value":"5"}`}, // and as a string, as emitted
	} {
		req, resp := json.RawMessage(tc.req), json.RawMessage(nil)
		if err := e.client.Invoke(ctx, "Counter.Inc", &req, &resp); err != nil {
			t.Fatalf("%s: %v", tc.req, err)
		}
		if !jsonEqual(resp, tc.want) {
			t.Fatalf("%s: got %s, want %s", tc.req, resp, tc.want)
		}
	}
}

// jsonEqual reports whether got and want are the same JSON value
// (protojson varies its spacing on purpose).
func jsonEqual(got []byte, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}

// TestUnknownField checks that a JSON field the schema lacks is discarded,
// over warren and over HTTP, and refused with InvalidArgument naming it
// (and no increment) with ServerOptions.RejectUnknownFields.
func TestUnknownField(t *testing.T) {
	ctx := ctxT(t)
	req := json.RawMessage(`{"name":"a","bye":{"x":[3]}}`)
	e := start(t)
	set(t, e, "a", 0)
	var resp json.RawMessage
	if err := e.client.Invoke(ctx, "Counter.Inc", &req, &resp); err != nil || string(resp) != `{"name":"a","value":"1"}` {
		t.Fatalf("unknown field over warren: %s %v", resp, err)
	}
	hc := rpc.HTTPClient(e.addr, nil)
	defer hc.CloseIdleConnections()
	r, err := hc.Post("http://warren/Counter.Inc", "application/json", bytes.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || string(body) != `{"name":"a","value":"2"}` {
		t.Fatalf("unknown field over HTTP: %d %s", r.StatusCode, body)
	}

	strict := startOpts(t, &rpc.ServerOptions{RejectUnknownFields: true})
	set(t, strict, "a", 0)
	err = strict.client.Invoke(ctx, "Counter.Inc", &req, &resp)
	if status.CodeOf(err) != status.InvalidArgument || !strings.Contains(err.Error(), `unknown field "bye"`) {
		t.Fatalf("unknown field, RejectUnknownFields: %v", err)
	}
	if c, err := get(ctx, strict.client, "a"); err != nil || c.Value != 0 {
		t.Fatalf("after the refused call: %v %v", c, err)
	}
}

func TestErrors(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	_, err := get(ctx, e.client, "nope")
	wantCode(t, "Get of a missing counter", err, status.NotFound, `no counter named "nope"`)
	// Inc creates a missing counter at 0, then adds: by defaults to 1.
	if c, err := inc(ctx, e.client, "fresh", nil); err != nil || c.Value != 1 {
		t.Fatalf("Inc of a missing counter = %+v, %v; want 1", c, err)
	}
	by := int64(-3)
	if c, err := inc(ctx, e.client, "fresh2", &by); err != nil || c.Value != -3 {
		t.Fatalf("Inc by -3 of a missing counter = %+v, %v; want -3", c, err)
	}
	if c, err := get(ctx, e.client, "fresh"); err != nil || c.Value != 1 {
		t.Fatalf("Get after Inc created it = %+v, %v", c, err)
	}
	_, err = get(ctx, e.client, "")
	wantCode(t, "Get without a name", err, status.InvalidArgument, `missing "name"`)
	_, err = inc(ctx, e.client, "", nil)
	wantCode(t, "Inc without a name", err, status.InvalidArgument, `missing "name"`)
	_, err = rpc.Call[counter.SetRequest, counter.Entry](ctx, e.client, "Counter.Set", &counter.SetRequest{Value: 1})
	wantCode(t, "Set without a name", err, status.InvalidArgument, `missing "name"`)

	// A Watch without a name fails on its first Recv.
	ws, err := rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, e.client, "Counter.Watch")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.Send(&counter.WatchRequest{}); err != nil {
		t.Fatal(err)
	}
	ws.CloseSend()
	_, err = ws.Recv()
	wantCode(t, "Watch without a name", err, status.InvalidArgument, `missing "name"`)

	// Malformed JSON is the codec's InvalidArgument.
	req, resp := json.RawMessage(`{"name":"a","by":"x"}`), json.RawMessage(nil)
	set(t, e, "a", 1)
	err = e.client.Invoke(ctx, "Counter.Inc", &req, &resp)
	wantCode(t, "Inc with a string by", err, status.InvalidArgument, "")

	// Overflow is OutOfRange and leaves the counter alone.
	set(t, e, "big", math.MaxInt64-1)
	_, err = inc(ctx, e.client, "big", ptr(2))
	wantCode(t, "Inc past MaxInt64", err, status.OutOfRange, "overflow")
	set(t, e, "small", math.MinInt64+1)
	_, err = inc(ctx, e.client, "small", ptr(-2))
	wantCode(t, "Inc past MinInt64", err, status.OutOfRange, "overflow")
	if c, err := get(ctx, e.client, "big"); err != nil || c.Value != math.MaxInt64-1 {
		t.Fatalf("big = %+v, %v", c, err)
	}
	if c, err := inc(ctx, e.client, "big", nil); err != nil || c.Value != math.MaxInt64 {
		t.Fatalf("Inc to MaxInt64 = %+v, %v", c, err)
	}
}

func TestListSorted(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	list := func() []*counter.Entry {
		t.Helper()
		r, err := rpc.Call[counter.ListRequest, counter.ListReply](ctx, e.client, "Counter.List", &counter.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Counters
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("empty store lists %v", got)
	}
	// An empty list is left out, as the protobuf JSON mapping does.
	req, resp := json.RawMessage(`{}`), json.RawMessage(nil)
	if err := e.client.Invoke(ctx, "Counter.List", &req, &resp); err != nil || string(resp) != `{}` {
		t.Fatalf("empty List JSON = %s, %v", resp, err)
	}
	for i, name := range []string{"delta", "alpha", "charlie", "Bravo", "bravo", "alpha2"} {
		set(t, e, name, int64(i))
	}
	got := list()
	want := []string{"Bravo=3", "alpha=1", "alpha2=5", "bravo=4", "charlie=2", "delta=0"}
	var gotNames []string
	for _, c := range got {
		gotNames = append(gotNames, fmt.Sprintf("%s=%d", c.Name, c.Value))
	}
	if fmt.Sprint(gotNames) != fmt.Sprint(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
}

// watch opens a Watch on name and returns its stream.
func watch(t *testing.T, ctx context.Context, e *env, name string) *rpc.ClientStream[counter.WatchRequest, counter.Entry] {
	t.Helper()
	ws, err := rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, e.client, "Counter.Watch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.Close)
	if err := ws.Send(&counter.WatchRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	if err := ws.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return ws
}

func recvValue(t *testing.T, ws *rpc.ClientStream[counter.WatchRequest, counter.Entry], name string, want int64) {
	t.Helper()
	c, err := ws.Recv()
	if err != nil {
		t.Fatalf("watch: %v (want %d)", err, want)
	}
	if c.Name != name || c.Value != want {
		t.Fatalf("watch got %+v, want %s = %d", c, name, want)
	}
}

func TestWatch(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	set(t, e, "w", 7)
	ws := watch(t, ctx, e, "w")
	recvValue(t, ws, "w", 7) // the current value first
	// Then every change, in order. The watch is registered by the time its
	// first message arrives, so none of these is missed.
	if _, err := inc(ctx, e.client, "w", nil); err != nil {
		t.Fatal(err)
	}
	recvValue(t, ws, "w", 8)
	set(t, e, "w", 100)
	recvValue(t, ws, "w", 100)
	set(t, e, "other", 1) // another counter's changes do not show
	if _, err := inc(ctx, e.client, "w", ptr(-1)); err != nil {
		t.Fatal(err)
	}
	recvValue(t, ws, "w", 99)

	// A second watcher of the same counter sees the same changes.
	ws2 := watch(t, ctx, e, "w")
	recvValue(t, ws2, "w", 99)
	set(t, e, "w", 1)
	recvValue(t, ws, "w", 1)
	recvValue(t, ws2, "w", 1)

	// Closing the client's stream cancels the call on the server.
	ws.Close()
	waitCalls(t, e.srv, 1)
	set(t, e, "w", 2)
	recvValue(t, ws2, "w", 2)
}

func TestWatchBeforeCreate(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	ws := watch(t, ctx, e, "later")
	// The watch has no first message until the counter exists. Whether
	// the Set lands before the watch is registered (the watch then starts
	// with the current value) or after (it is a change), it sees 3 first.
	waitCalls(t, e.srv, 1)
	set(t, e, "later", 3)
	recvValue(t, ws, "later", 3)
	if _, err := inc(ctx, e.client, "later", nil); err != nil {
		t.Fatal(err)
	}
	recvValue(t, ws, "later", 4)
}

// waitCalls waits until srv has n calls in progress.
func waitCalls(t *testing.T, srv *rpc.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().Calls != n {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d calls in progress, want %d", srv.Stats().Calls, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A watcher that does not read loses intermediate values but always gets
// the latest, and does not hold up writers.
func TestWatchSlowReaderSeesLatest(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	set(t, e, "s", 0)
	ws := watch(t, ctx, e, "s")
	recvValue(t, ws, "s", 0)
	const n = 1000 // many times the watch's backlog
	for range n {
		if _, err := inc(ctx, e.client, "s", nil); err != nil {
			t.Fatal(err)
		}
	}
	var last int64
	for last != n {
		c, err := ws.Recv()
		if err != nil {
			t.Fatalf("watch: %v after %d", err, last)
		}
		if c.Value <= last {
			t.Fatalf("watch went from %d to %d", last, c.Value)
		}
		last = c.Value
	}
}

func TestShutdownEndsWatches(t *testing.T) {
	e := start(t)
	ctx := ctxT(t)
	set(t, e, "w", 1)
	ws := watch(t, ctx, e, "w")
	recvValue(t, ws, "w", 1)
	e.store.Shutdown()
	_, err := ws.Recv()
	wantCode(t, "watch after Shutdown", err, status.Unavailable, "shutting down")
	// New watches fail at once; the other methods still work.
	ws2 := watch(t, ctx, e, "w")
	_, err = ws2.Recv()
	wantCode(t, "watch opened after Shutdown", err, status.Unavailable, "shutting down")
	if c, err := inc(ctx, e.client, "w", nil); err != nil || c.Value != 2 {
		t.Fatalf("Inc after Shutdown = %+v, %v", c, err)
	}
	e.store.Shutdown() // idempotent
}

// The direct API, without a server.
func TestStoreDirect(t *testing.T) {
	s := counter.New()
	if _, err := s.Get("x"); status.CodeOf(err) != status.NotFound {
		t.Fatalf("Get = %v", err)
	}
	if c, err := s.Inc("y", 4); err != nil || c.Value != 4 {
		t.Fatalf("Inc of a missing counter = %+v, %v; want 4", c, err)
	}
	s.Set("x", 1)
	if c, err := s.Inc("x", 2); err != nil || c.Value != 3 {
		t.Fatalf("Inc = %+v, %v", c, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vals := make(chan int64)
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, "x", func(c *counter.Entry) error {
			vals <- c.Value
			return nil
		})
	}()
	if v := <-vals; v != 3 {
		t.Fatalf("first watched value %d, want 3", v)
	}
	s.Set("x", 10)
	if v := <-vals; v != 10 {
		t.Fatalf("watched %d, want 10", v)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v", err)
	}
	// A send error ends the watch with that error.
	errStop := errors.New("stop")
	if err := s.Watch(context.Background(), "x", func(*counter.Entry) error { return errStop }); err != errStop {
		t.Fatalf("Watch returned %v, want the send error", err)
	}
}

// The concurrency requirement: 200 concurrent clients, each on its own
// connection, half over warren RPC and half over HTTP (plain net/http,
// POST /Counter.Inc), make 20,000 increments in all and the counter ends
// at exactly 20,000, every reply value distinct.
func TestConcurrentIncMixed(t *testing.T) {
	e := start(t)
	set(t, e, "n", 0)
	hc, closeIdle := httpClient(e.addr)
	defer closeIdle()
	probeHTTP(t, hc)
	concurrentInc(t, e, 100, 100)
	if t.Failed() {
		return
	}
	// And over HTTP the value is the same.
	c, err := httpInc(context.Background(), hc, `{"name":"n","by":0}`)
	if err != nil || c.Value != 20000 {
		t.Fatalf("HTTP Inc by 0 = %+v, %v", c, err)
	}
}

// concurrentInc runs rpcClients and httpClients clients, each on its own
// connection, that make 20,000 increments of "n" in all, concurrently,
// and checks the result and that every reply value is distinct.
func concurrentInc(t *testing.T, e *env, rpcClients, httpClients int) {
	const total = 20000
	clients := rpcClients + httpClients
	per := total / clients
	// Generous: with the race detector on a loaded 2-core machine this
	// takes tens of seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[int64]bool, total)
	dups := 0
	errs := make(chan error, clients)
	for i := range clients {
		useHTTP := i >= rpcClients
		wg.Go(func() {
			var do func() (int64, error)
			if useHTTP {
				hc, closeIdle := httpClient(e.addr)
				defer closeIdle()
				do = func() (int64, error) {
					c, err := httpInc(ctx, hc, `{"name":"n"}`)
					if err != nil {
						return 0, err
					}
					return c.Value, nil
				}
			} else {
				c, err := rpc.Dial(e.addr, nil)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				do = func() (int64, error) {
					r, err := inc(ctx, c, "n", nil)
					if err != nil {
						return 0, err
					}
					return r.Value, nil
				}
			}
			<-start
			vals := make([]int64, 0, per)
			for range per {
				v, err := do()
				if err != nil {
					errs <- fmt.Errorf("http=%v: %w", useHTTP, err)
					return
				}
				vals = append(vals, v)
			}
			mu.Lock()
			for _, v := range vals {
				if seen[v] {
					dups++
				}
				seen[v] = true
			}
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	c, err := get(ctx, e.client, "n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Value != total || len(seen) != total || dups != 0 {
		t.Fatalf("counter = %d with %d distinct replies (%d duplicates), want %d", c.Value, len(seen), dups, total)
	}
}

// httpClient returns an HTTP client whose every connection goes to the
// warren address addr (a unix socket), and a function that closes its idle
// connections.
func httpClient(addr string) (*http.Client, func()) {
	path := strings.TrimPrefix(addr, "unix://")
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr.CloseIdleConnections
}

// httpInc POSTs body to /Counter.Inc, as the Connect protocol has it.
func httpInc(ctx context.Context, hc *http.Client, body string) (*counter.Entry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://warren/Counter.Inc", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	c := new(counter.Entry)
	if err := protojson.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("reply %q: %w", b, err)
	}
	return c, nil
}

// probeHTTP fails the test unless the server answers an HTTP call.
func probeHTTP(t *testing.T, hc *http.Client) {
	t.Helper()
	c, err := httpInc(ctxT(t), hc, `{"name":"n","by":0}`)
	if err != nil {
		t.Fatalf("HTTP Counter.Inc: %v", err)
	}
	if c.Name != "n" || c.Value != 0 {
		t.Fatalf("HTTP Counter.Inc by 0 = %+v", c)
	}
}
