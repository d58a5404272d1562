package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/wire"
)

// rawFilesConn is a hand-made client of a server serving sharedPair's
// methods: it announces MaxFiles and sends frames with whatever
// descriptors a test wants.
type rawFilesConn struct {
	t  *testing.T
	uc *net.UnixConn
	id uint32
}

func dialRawFiles(t *testing.T, c *Client) *rawFilesConn {
	t.Helper()
	addr := strings.TrimPrefix(c.addr, "unix://")
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := uc.Write(wire.AppendPreface(nil, wire.Settings{MaxFiles: 16})); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadPreface(uc); err != nil {
		t.Fatal(err)
	}
	return &rawFilesConn{t: t, uc: uc, id: 1}
}

// call opens a call of T.Sum and sends one DATA frame with payload and
// fds, flagged FlagFiles unless plain is set.
func (r *rawFilesConn) call(payload []byte, fds []int, flags wire.Flags) uint32 {
	return r.callMethod("T.Sum", payload, fds, flags)
}

func (r *rawFilesConn) callMethod(method string, payload []byte, fds []int, flags wire.Flags) uint32 {
	r.t.Helper()
	id := r.id
	r.id += 2
	b := wire.AppendFrame(nil, id, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, method, codec.IDRaw, 0, nil))
	b = wire.AppendFrame(b, id, wire.TypeData, flags|wire.FlagEnd, payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := r.uc.WriteMsgUnix(b, oob, nil); err != nil {
		r.t.Fatal(err)
	}
	return id
}

// trailer reads frames until the TRAILERS of stream id, and returns its
// status; io.EOF if the server closed the connection.
func (r *rawFilesConn) trailer(id uint32) (wire.Trailer, error) {
	for {
		var hb [wire.HeaderSize]byte
		if _, err := io.ReadFull(r.uc, hb[:]); err != nil {
			return wire.Trailer{}, err
		}
		h, _ := wire.ParseHeader(hb[:])
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r.uc, p); err != nil {
			return wire.Trailer{}, err
		}
		if h.Type == wire.TypeTrailers && h.Stream == id {
			return wire.ParseTrailer(p)
		}
	}
}

func sharedBlock(n int) []byte {
	return shm.AppendBlock(nil, shm.Block{Count: 1, Kind: shm.KindShared, Length: uint64(n)})
}

// memfd makes a memfd of n bytes with the given seals.
func memfd(t *testing.T, n int, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// TestSharedHostile sends the server shared messages it must refuse: each
// is a stream error (InvalidArgument) on a connection that goes on, and
// nothing received is left open or mapped.
func TestSharedHostile(t *testing.T) { testSharedHostile(t, false) }

func testSharedHostile(t *testing.T, loop bool) {
	c := sharedPair(t,
		ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: 64 << 10},
		ClientOptions{Settings: filesSettings(), SharedThreshold: 64 << 10})
	ctx := context.Background()
	var out []byte
	in := []byte{1, 2, 3}
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil { // the server is up
		t.Fatal(err)
	}
	fds, maps := countFDs(t), countMemfdMaps(t)
	r := dialRawFiles(t, c)
	const n = 1 << 20
	cases := []struct {
		name  string
		fd    func() int
		size  int
		seals string
	}{
		{"unsealed", func() int { return memfd(t, n, 0) }, n, "seals"},
		{"write seal missing", func() int { return memfd(t, n, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL) }, n, "seals"},
		{"size larger than the file", func() int { return memfd(t, n, shm.Seals) }, 2 * n, "bytes"},
		{"not a memfd", func() int {
			p, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			unix.Close(p[1])
			return p[0]
		}, n, "memfd"},
	}
	for _, tc := range cases {
		fd := tc.fd()
		id := r.call(sharedBlock(tc.size), []int{fd}, wire.FlagFiles)
		unix.Close(fd)
		tr, err := r.trailer(id)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tr.Code != 3 || !strings.Contains(string(tr.Message), tc.seals) { // InvalidArgument
			t.Errorf("%s: status %d %q", tc.name, tr.Code, tr.Message)
		}
	}
	// A well-made one on the same connection still works.
	fd, err := shm.NewSealed(make([]byte, n))
	if err != nil {
		t.Fatal(err)
	}
	id := r.call(sharedBlock(n), []int{fd}, wire.FlagFiles)
	unix.Close(fd)
	if tr, err := r.trailer(id); err != nil || tr.Code != 0 {
		t.Fatalf("sealed memfd after refused ones: %v %v %q", err, tr.Code, tr.Message)
	}
	r.uc.Close()
	checkNoLeak(t, fds, maps, 0)
}

// TestSharedShrinkAfterSend: a sender cannot shrink a memfd it sent, so a
// receiver reading it cannot be killed by SIGBUS.
func TestSharedShrinkAfterSend(t *testing.T) {
	fd, err := shm.NewSealed(make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m, err := shm.Map(fd, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Unmap(m)
	if err := unix.Ftruncate(fd, 4096); !errors.Is(err, unix.EPERM) {
		t.Fatalf("ftruncate of a sealed memfd: %v, want EPERM", err)
	}
	if _, err := unix.Pwrite(fd, []byte{1}, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("write to a sealed memfd: %v, want EPERM", err)
	}
	if _, err := unix.Mmap(fd, 0, 4096, unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		t.Fatal("writable mapping of a sealed memfd")
	}
	_ = m[len(m)-1] // still readable
}

// TestFilesHostileConn: descriptors the connection cannot take are a
// connection error, and every one that arrived is closed.
func TestFilesHostileConn(t *testing.T) { testFilesHostileConn(t, false) }

func testFilesHostileConn(t *testing.T, loop bool) {
	c := sharedPair(t,
		ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: 64 << 10},
		ClientOptions{Settings: filesSettings()})
	ctx := context.Background()
	var out []byte
	in := []byte{1}
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil {
		t.Fatal(err)
	}
	fds := countFDs(t)
	devnull := func(k int) []int {
		var s []int
		for range k {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			s = append(s, fd)
		}
		return s
	}
	cases := []struct {
		name    string
		payload []byte
		fds     int
		flags   wire.Flags
	}{
		{"more than MaxFiles in a frame", []byte{17, shm.KindFiles, 'x'}, 17, wire.FlagFiles},
		{"a frame naming more than arrived", []byte{3, shm.KindFiles, 'x'}, 1, wire.FlagFiles},
		{"descriptors no frame names", []byte{'x'}, 4, 0},
		{"more in flight than the limit", []byte{'x'}, 250, 0}, // over 64 in one read: truncated, or over the queue
		{"bad block", []byte{1, 9}, 1, wire.FlagFiles},
	}
	for _, tc := range cases {
		r := dialRawFiles(t, c)
		sent := devnull(tc.fds)
		id := r.call(tc.payload, sent, tc.flags)
		shm.CloseAll(sent)
		tr, err := r.trailer(id)
		if tc.name == "descriptors no frame names" {
			// The call itself is fine; the descriptors wait for a frame
			// naming them and are closed with the connection.
			if err != nil || tr.Code != 0 {
				t.Errorf("%s: %v %d %q", tc.name, err, tr.Code, tr.Message)
			}
		} else if err == nil {
			t.Errorf("%s: the connection survived: status %d %q", tc.name, tr.Code, tr.Message)
		}
		r.uc.Close()
		checkNoLeak(t, fds, 0, 0)
	}
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil { // the server survived
		t.Fatal(err)
	}
}

// TestFilesHeldBound: descriptors held by messages not yet released are
// bounded per connection (4 x MaxFiles, at least 64): the message over the
// bound is refused with ResourceExhausted, and all are closed in the end.
func TestFilesHeldBound(t *testing.T) { testFilesHeldBound(t, false) }

func testFilesHeldBound(t *testing.T, loop bool) {
	c := sharedPair(t, ServerOptions{EventLoop: loop, Settings: filesSettings()}, ClientOptions{Settings: filesSettings()})
	ctx := context.Background()
	var out []byte
	in := []byte{1}
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	r := dialRawFiles(t, c)
	var last uint32
	for range 5 { // 5 x 16 = 80 > 64
		fds := make([]int, 16)
		for i := range fds {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			fds[i] = fd
		}
		last = r.callMethod("T.Block", []byte{16, shm.KindFiles}, fds, wire.FlagFiles)
		shm.CloseAll(fds)
	}
	tr, err := r.trailer(last)
	if err != nil || tr.Code != 8 {
		t.Fatalf("over the bound: %v, status %d %q", err, tr.Code, tr.Message)
	}
	r.uc.Close()
	checkNoLeak(t, before, 0, 0)
}

// TestSharedHostileReply: a server replying with an unsealed memfd fails
// the call with a clear error; the caller keeps nothing open or mapped.
func TestSharedHostileReply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan error, 1)
	go func() {
		uc, err := l.AcceptUnix()
		if err != nil {
			served <- err
			return
		}
		defer uc.Close()
		if _, err := wire.ReadPreface(uc); err != nil {
			served <- err
			return
		}
		uc.Write(wire.AppendPreface(nil, wire.Settings{MaxFiles: 16}))
		for { // the request: up to its DATA with END
			var hb [wire.HeaderSize]byte
			if _, err := io.ReadFull(uc, hb[:]); err != nil {
				served <- err
				return
			}
			h, _ := wire.ParseHeader(hb[:])
			if _, err := io.ReadFull(uc, make([]byte, h.Length)); err != nil {
				served <- err
				return
			}
			if h.Type == wire.TypeData && h.Flags&wire.FlagEnd != 0 {
				break
			}
		}
		fd := memfd(t, 1<<20, 0) // not sealed
		b := wire.AppendFrame(nil, 1, wire.TypeData, wire.FlagFiles, sharedBlock(1<<20))
		b = wire.AppendFrame(b, 1, wire.TypeTrailers, wire.FlagEnd, wire.AppendTrailer(nil, 0, "", nil, nil))
		_, _, err = uc.WriteMsgUnix(b, unix.UnixRights(fd), nil)
		unix.Close(fd)
		io.Copy(io.Discard, uc) // until the client goes
		served <- err
	}()
	fds, maps := countFDs(t), countMemfdMaps(t)
	c, err := Dial("unix://"+path, &ClientOptions{Settings: filesSettings()})
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("x")
	out := make([]byte, 0, 2<<20) // lent memory: the reply would be read into it
	err = c.Invoke(context.Background(), "T.Echo", &in, &out)
	if err == nil || !strings.Contains(err.Error(), "seals") {
		t.Fatalf("reply in an unsealed memfd: %v", err)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, fds, maps, 0)
}

// TestSharedPeerLeaves: peers that send a sealed memfd request and close
// the connection at once leave nothing open or mapped in the server.
func TestSharedPeerLeaves(t *testing.T) { testSharedPeerLeaves(t, false) }

func testSharedPeerLeaves(t *testing.T, loop bool) {
	c := sharedPair(t,
		ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: 64 << 10, MaxConnsPerPID: 4096, MaxConnsPerUID: 4096},
		ClientOptions{Settings: filesSettings(), SharedThreshold: 64 << 10})
	ctx := context.Background()
	var out []byte
	in := []byte{1}
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil {
		t.Fatal(err)
	}
	fds, maps := countFDs(t), countMemfdMaps(t)
	const peers, n = 1000, 64 << 10
	msg := make([]byte, n)
	for i := range peers {
		r := dialRawFiles(t, c)
		fd, err := shm.NewSealed(msg)
		if err != nil {
			t.Fatal(err)
		}
		method := "T.Sum"
		if i%2 == 1 {
			method = "T.Block" // held by a handler when the peer goes
		}
		r.callMethod(method, sharedBlock(n), []int{fd}, wire.FlagFiles)
		unix.Close(fd)
		r.uc.Close()
	}
	checkNoLeak(t, fds, maps, 0)
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil { // the server survived
		t.Fatal(err)
	}
}
