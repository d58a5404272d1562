//go:build linux

package eventloop

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// echoCore is a Core whose every call echoes its request. Calls whose
// method is "Worker" go to a worker goroutine; the others run on the loop.
type echoCore struct {
	adm     *admit.Core
	wg      sync.WaitGroup
	closing chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	mu         sync.Mutex
	registered map[*admit.Conn]bool
	places     chan string // where each call ran: "loop" or "worker"
}

func newEchoCore() *echoCore {
	k := &echoCore{
		adm:        admit.New(admit.Limits{MaxConns: 100, MaxConnsPerUID: 100, MaxConnsPerPID: 100, CallRate: 1e9, CallBurst: 1e6}, nil, slog.Default),
		closing:    make(chan struct{}),
		registered: map[*admit.Conn]bool{},
		places:     make(chan string, 16),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

func (k *echoCore) Admission() *admit.Core   { return k.adm }
func (k *echoCore) Logger() *slog.Logger     { return slog.Default() }
func (k *echoCore) Closing() <-chan struct{} { return k.closing }
func (k *echoCore) Context() context.Context { return k.ctx }
func (k *echoCore) ServeConn(c net.Conn)     { c.Close() }

func (k *echoCore) Go(fn func()) {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		fn()
	}()
}

// echoCall is a call: the stream and its method.
type echoCall struct {
	st     mux.Stream
	worker bool
}

func (k *echoCore) NewSession(c net.Conn, p *peer.Peer, adm *admit.Conn, cfg *mux.Config) Session {
	se := &echoSession{k: k, adm: adm}
	cfg.NewStream = func() *mux.Stream {
		c := new(echoCall)
		c.st.Owner = c
		return &c.st
	}
	cfg.OnStream = func(st *mux.Stream, h *wire.CallHeader) {
		st.Owner.(*echoCall).worker = string(h.Method) == "Worker"
	}
	cfg.OnReset = func(*mux.Stream, error) {}
	return se
}

func (k *echoCore) OnRequest(st *mux.Stream) bool {
	if st.Owner.(*echoCall).worker {
		k.Dispatch(st)
		return false
	}
	return true
}

func (k *echoCore) Run(st *mux.Stream) {
	place := "worker"
	if buf := make([]byte, 16<<10); strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*evLoop).runInline") {
		place = "loop"
	}
	k.places <- place
	req, err := st.Recv(context.Background())
	if err != nil {
		return
	}
	st.Finish(context.Background(), mux.Reply{Msg: req.B, HasMsg: true, Code: status.OK})
}

func (k *echoCore) Dispatch(st *mux.Stream) { k.Go(func() { k.Run(st) }) }

func (k *echoCore) numRegistered() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.registered)
}

type echoSession struct {
	k   *echoCore
	adm *admit.Conn
}

func (se *echoSession) Work() (calls, running int32, last uint32) { return 0, 0, admit.Now() }

func (se *echoSession) Register(*mux.Session) bool {
	se.k.mu.Lock()
	defer se.k.mu.Unlock()
	se.k.registered[se.adm] = true
	select {
	case <-se.k.closing:
		return true
	default:
		return false
	}
}

func (se *echoSession) Unregister() {
	se.k.mu.Lock()
	defer se.k.mu.Unlock()
	delete(se.k.registered, se.adm)
}

// call makes a call on sess and checks the echo.
func call(t *testing.T, sess *mux.Session, method string, msg []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := sess.Open(ctx, mux.Call{Method: method, Msg: msg, End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	b, err := st.Recv(ctx)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if !bytes.Equal(b.B, msg) {
		t.Fatalf("%s: reply %q; want %q", method, b.B, msg)
	}
}

// TestServeThroughCore serves a unix listener for a Core of the test's:
// calls run where the core says, an idle session hibernates (and
// unregisters) and wakes up for the next call, and Serve returns
// ErrServerClosed once the core's context ends.
func TestServeThroughCore(t *testing.T) {
	k := newEchoCore()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	var cnt Counters
	served := make(chan error, 1)
	go func() {
		handled, err := Serve(k, l, &Options{HandshakeTimeout: 5 * time.Second, Counters: &cnt})
		if !handled {
			err = errors.New("not handled")
		}
		served <- err
	}()
	conn, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := mux.Client(conn, &mux.Config{})
	if err != nil {
		t.Fatal(err)
	}
	call(t, sess, "Loop", []byte("on the loop"))
	call(t, sess, "Worker", []byte("on a worker"))
	if a, b := <-k.places, <-k.places; a != "loop" || b != "worker" {
		t.Fatalf("calls ran on %s and %s; want loop and worker", a, b)
	}
	if cnt.Loops.Load() != 1 || k.numRegistered() != 1 {
		t.Fatalf("%d loops, %d sessions registered", cnt.Loops.Load(), k.numRegistered())
	}
	testutil.WaitFor(t, func() bool { return cnt.Hibernations.Load() == 1 })
	if n := k.numRegistered(); n != 0 {
		t.Fatalf("%d sessions registered after hibernation", n)
	}
	call(t, sess, "Loop", []byte("after a nap"))
	<-k.places
	if w := cnt.Wakes.Load(); w != 2 {
		t.Fatalf("%d wakes; want 2", w)
	}

	close(k.closing)
	k.cancel()
	if err := <-served; err != ErrServerClosed {
		t.Fatalf("Serve: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st, err := sess.Open(ctx, mux.Call{Method: "Loop", Msg: []byte("late"), End: true}); err == nil {
		if _, err := st.Recv(ctx); err == nil || ctx.Err() != nil {
			t.Fatalf("a call after the end: %v", err)
		}
		st.Release()
	}
	sess.Close()
	k.wg.Wait()
	if cnt.Loops.Load() != 0 || k.adm.Conns() != 0 || k.numRegistered() != 0 {
		t.Fatalf("after the end: %d loops, %d admitted, %d registered", cnt.Loops.Load(), k.adm.Conns(), k.numRegistered())
	}
}

// TestServeRefusesOtherListeners: Serve leaves to the goroutine mode the
// listeners the loop cannot serve.
func TestServeRefusesOtherListeners(t *testing.T) {
	l, err := net.Listen("unixpacket", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	var cnt Counters
	if handled, err := Serve(newEchoCore(), l, &Options{Counters: &cnt}); handled || err != nil {
		t.Fatalf("handled %v, %v", handled, err)
	}
}

// TestRecordSize: an idle connection's record, most of the memory it
// holds, stays at most 104 bytes, and what it packs reads back.
func TestRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(loopConn{}); n > 104 {
		t.Fatalf("loopConn is %d bytes, want at most 104", n)
	}
	var rec loopConn
	rec.setCred(1000, -1, 42)
	if rec.adm.UID != 1000 || rec.gid() != -1 || rec.adm.PID != 42 || rec.flags&flCred == 0 {
		t.Fatalf("credentials read back as uid %d gid %d pid %d", rec.adm.UID, rec.gid(), rec.adm.PID)
	}
	for _, st := range []mux.FedState{
		{LastPeerID: 7, GoAwayLast: 5, GoAwaySent: true, ConnSendWin: 1 << 40, ConnRecvWin: -3, ConnUnacked: 9},
		{LastPeerID: 9, ConnSendWin: 1, ConnRecvWin: 2, ConnUnacked: 3},
	} {
		rec.keepFed(st)
		if got := rec.fedState(); got != st {
			t.Fatalf("fed state %+v read back as %+v", st, got)
		}
	}
}

// TestConnTable: records keep their place while in use, pages come and go
// with their records.
func TestConnTable(t *testing.T) {
	var tb connTable
	fds := []int{3, 511, 512, 2000}
	recs := map[int]*loopConn{}
	for _, fd := range fds {
		rec := tb.get(fd)
		rec.adm.ID, rec.state = int32(fd), stOpen
		recs[fd] = rec
	}
	for _, fd := range fds {
		if tb.lookup(fd) != recs[fd] {
			t.Fatalf("lookup(%d) moved", fd)
		}
	}
	if tb.lookup(-1) != nil || tb.lookup(1<<20) != nil {
		t.Fatal("lookup outside the table")
	}
	n := 0
	tb.each(func(*loopConn) { n++ })
	if n != len(fds) {
		t.Fatalf("each saw %d records; want %d", n, len(fds))
	}
	tb.free(512)
	if tb.pages[1] != nil || tb.lookup(512) != nil {
		t.Fatal("a page without records was kept")
	}
	tb.free(511)
	if tb.pages[0] == nil || tb.lookup(3) != recs[3] {
		t.Fatal("a page with a record in use was dropped")
	}
}
