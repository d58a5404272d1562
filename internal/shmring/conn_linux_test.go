package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/internal/testutil"
	"golang.org/x/sys/unix"
)

func sockPair(t testing.TB) (client, server net.Conn) { return testutil.UnixPair(t) }

// ringPair switches both ends of a new connection to rings of size bytes.
func ringPair(t testing.TB, size uint32) (client, server *Conn) {
	t.Helper()
	cs, ss := sockPair(t)
	return switchPair(t, cs, ss, size)
}

func switchPair(t testing.TB, cs, ss net.Conn, size uint32) (client, server *Conn) {
	t.Helper()
	answer := Answer(ss, size, Ask(cs, size))
	if answer != size {
		t.Fatalf("answer %d, want %d", answer, size)
	}
	done := make(chan error, 1)
	var sc net.Conn
	go func() {
		var err error
		sc, err = Server(ss, answer)
		done <- err
	}()
	cc, err := Client(cs, size, answer)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	client, server = cc.(*Conn), sc.(*Conn)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestAnswer(t *testing.T) {
	cs, ss := sockPair(t)
	defer cs.Close()
	defer ss.Close()
	for _, tc := range []struct{ want, ask, answer uint32 }{
		{0, 1 << 20, 0}, {1 << 20, 0, 0}, {1 << 20, 1 << 16, 1 << 16},
		{100000, 1 << 20, 65536}, {1 << 20, 5000, 4096}, {1 << 20, 4000, 0}, {1 << 30, 1 << 30, MaxSize},
	} {
		if got := Answer(ss, tc.want, tc.ask); got != tc.answer {
			t.Errorf("Answer(%d, %d) = %d, want %d", tc.want, tc.ask, got, tc.answer)
		}
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if Ask(p, 1<<20) != 0 || Answer(p, 1<<20, 1<<20) != 0 {
		t.Error("a ring announced on a connection that is not a unix socket")
	}
}

// TestConnStream moves bytes both ways at once, in writes and reads of
// random sizes, many larger than the ring, and checks they arrive intact.
func TestConnStream(t *testing.T) {
	c, s := ringPair(t, MinSize)
	const total = 4 << 20
	src := make([]byte, total)
	rand.New(rand.NewSource(1)).Read(src)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	pump := func(w, r *Conn, seed int64) {
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := 0; off < total; {
				n := min(1+rng.Intn(3*MinSize), total-off)
				if _, err := w.Write(src[off : off+n]); err != nil {
					errs <- err
					return
				}
				off += n
			}
		}()
		got := make([]byte, 0, total)
		buf := make([]byte, 7000)
		for len(got) < total {
			n, err := r.Read(buf[:1+len(got)%len(buf)])
			if err != nil {
				errs <- err
				return
			}
			got = append(got, buf[:n]...)
		}
		if !bytes.Equal(got, src) {
			errs <- errors.New("bytes differ")
		}
	}
	wg.Add(2)
	go pump(c, s, 2)
	go pump(s, c, 3)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestConnEnd: what was written before the peer closed is read, then EOF;
// a write to a peer that closed fails.
func TestConnEnd(t *testing.T) {
	c, s := ringPair(t, MinSize)
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
}

// TestConnDeadlines: a read with nothing to read ends at its deadline,
// also one set while it waits, and reading resumes after; a writer whose
// peer does not read fills the ring and ends at its deadline.
func TestConnDeadlines(t *testing.T) {
	c, s := ringPair(t, MinSize)
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	s.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.SetReadDeadline(time.Unix(1, 0))
	}()
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read interrupted by a past deadline: %v", err)
	}
	s.SetReadDeadline(time.Time{})
	c.Write([]byte("ok"))
	if b := make([]byte, 2); func() bool { n, err := io.ReadFull(s, b); return n != 2 || err != nil }() {
		t.Fatal("no read after the deadline was cleared")
	}
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(make([]byte, 3*MinSize))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != MinSize {
		t.Fatalf("write to a peer that does not read: %d bytes, %v; want %d and a deadline error", n, err, MinSize)
	}
}

// TestConnFiles: descriptors sent with a write are queued before its bytes
// can be read.
func TestConnFiles(t *testing.T) {
	cs, ss := sockPair(t)
	cw, sw := shm.Wrap(cs, 4, 64), shm.Wrap(ss, 4, 64)
	c, s := switchPair(t, cw, sw, MinSize)
	for i := range 20 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WriteFiles([]byte{byte(i)}, []int{int(r.Fd()), int(w.Fd())}); err != nil {
			t.Fatal(err)
		}
		r.Close()
		w.Close()
		var b [1]byte
		if _, err := s.Read(b[:]); err != nil || b[0] != byte(i) {
			t.Fatalf("read %v, %v", b, err)
		}
		fds, err := sw.Take(2)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		shm.CloseAll(fds)
	}
}

// sendSwitch sends a switch byte with fds as a hostile client would.
func sendSwitch(t *testing.T, b byte, fds ...int) error {
	cs, ss := sockPair(t)
	defer cs.Close()
	defer ss.Close()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := cs.(*net.UnixConn).WriteMsgUnix([]byte{b}, oob, nil); err != nil {
		t.Fatal(err)
	}
	c, err := Server(ss, MinSize)
	if err == nil && c != ss {
		c.Close()
	}
	return err
}

// TestServerChecksMemfd: the server maps only a memfd sealed against
// resizing and not against writing, of the exact size.
func TestServerChecksMemfd(t *testing.T) {
	memfd := func(size int, seals int) int {
		fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		unix.Ftruncate(fd, int64(size))
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	good := memfd(MapLen(MinSize), Seals)
	if err := sendSwitch(t, byteRing, good); err != nil {
		t.Fatalf("a good memfd refused: %v", err)
	}
	if err := sendSwitch(t, byteSocket); err != nil {
		t.Fatalf("fallback refused: %v", err)
	}
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	for name, fds := range map[string][]int{
		"unsealed":        {memfd(MapLen(MinSize), 0)},
		"may grow":        {memfd(MapLen(MinSize), unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)},
		"write-sealed":    {memfd(MapLen(MinSize), Seals|unix.F_SEAL_WRITE)},
		"too small":       {memfd(MapLen(MinSize)-4096, Seals)},
		"too large":       {memfd(MapLen(2*MinSize), Seals)},
		"a pipe":          {int(r.Fd())},
		"no descriptor":   nil,
		"two descriptors": {good, good},
	} {
		if err := sendSwitch(t, byteRing, fds...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := sendSwitch(t, 'x'); err == nil {
		t.Error("switch byte 'x' accepted")
	}
	if err := sendSwitch(t, byteSocket, good); err == nil {
		t.Error("socket switch with a descriptor accepted")
	}
}

// TestConnHostilePeer: a peer that scribbles over the whole mapping while
// the other side reads and writes gets a connection error at worst,
// never a crash; a garbage tail is an index error.
func TestConnHostilePeer(t *testing.T) {
	c, s := ringPair(t, MinSize)
	binary.NativeEndian.PutUint64(c.mem[DirClient*ctlSize+offTail:], 1<<40)
	if _, err := s.Read(make([]byte, 10)); !errors.Is(err, ErrIndex) {
		t.Fatalf("garbage tail: %v", err)
	}

	c, s = ringPair(t, MinSize)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the peer's process, scribbling
		defer wg.Done()
		rng := rand.New(rand.NewSource(4))
		mem := c.mem
		for {
			select {
			case <-stop:
				return
			default:
			}
			off := rng.Intn(len(mem) / 8)
			binary.NativeEndian.PutUint64(mem[off*8:], rng.Uint64()>>uint(rng.Intn(64)))
		}
	}()
	s.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 3*MinSize)
	var err error
	for err == nil {
		if _, err = s.Read(buf); err == nil {
			_, err = s.Write(buf[:rand.Intn(len(buf))])
		}
	}
	close(stop)
	wg.Wait()
	if !errors.Is(err, ErrIndex) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hostile peer: %v", err)
	}
}

// TestIdleRingsCPU holds 100 ring connections idle, after a round trip on
// each, and measures the process's CPU time over 10 s: once the spin
// window is over, sleeping sides cost nothing.
func TestIdleRingsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s")
	}
	const conns = 100
	var pairs [conns][2]*Conn
	for i := range pairs {
		c, s := ringPair(t, MinSize)
		pairs[i] = [2]*Conn{c, s}
	}
	var wg sync.WaitGroup
	for _, p := range pairs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var b [128]byte
			p[0].Write(b[:])
			io.ReadFull(p[0], b[:]) // sleeps until the echo
		}()
		go func() {
			defer wg.Done()
			var b [128]byte
			io.ReadFull(p[1], b[:])
			p[1].Write(b[:])
		}()
	}
	wg.Wait()
	for _, p := range pairs { // a reader asleep on each side
		go p[0].Read(make([]byte, 1))
		go p[1].Read(make([]byte, 1))
	}
	time.Sleep(10 * SpinWindow)
	before := cpuTime(t)
	time.Sleep(10 * time.Second)
	used := cpuTime(t) - before
	t.Logf("%d idle ring connections (both ends in this process): %v of CPU in 10 s", conns, used)
	if used > 100*time.Millisecond {
		t.Errorf("idle rings used %v of CPU in 10 s", used)
	}
}

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
