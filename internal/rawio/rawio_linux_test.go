package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// rawPair returns the two ends of a connection over network ("unix" or
// "tcp"), closed when the test ends.
func rawPair(t *testing.T, network string) (a, b net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	a, err = net.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		a.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

func mustRaw(t *testing.T, c net.Conn) *IO {
	t.Helper()
	r := For(c)
	if r == nil {
		t.Fatalf("no raw I/O for %T", c)
	}
	return r
}

// TestRawIOTransfer sends messages larger than the socket's buffers both
// ways at once, so that writes stop on a full buffer and resume where they
// stopped, and reads come in pieces: every byte arrives, in order.
func TestRawIOTransfer(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			a, b := rawPair(t, network)
			ra, rb := mustRaw(t, a), mustRaw(t, b)
			msg := make([]byte, 8<<20)
			for i := range msg {
				msg[i] = byte(i*7 + i>>11)
			}
			done := make(chan error, 2)
			for _, w := range []*IO{ra, rb} {
				go func() {
					n, err := w.Write(msg)
					if err == nil && n != len(msg) {
						err = io.ErrShortWrite
					}
					done <- err
				}()
			}
			for _, r := range []*IO{ra, rb} {
				got := make([]byte, 0, len(msg))
				buf := make([]byte, 64<<10)
				for len(got) < len(msg) {
					n, err := r.Read(buf)
					if err != nil {
						t.Fatalf("read after %d bytes: %v", len(got), err)
					}
					got = append(got, buf[:n]...)
				}
				if !bytes.Equal(got, msg) {
					t.Fatal("received bytes differ from those sent")
				}
			}
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if n, err := ra.Read(nil); n != 0 || err != nil {
				t.Fatalf("Read(nil) = %d, %v", n, err)
			}
		})
	}
}

// TestRawIODeadline: a read deadline ends a blocked read with a timeout
// error, as net.Conn's Read does, and nothing is lost: once it is cleared,
// the next read gets what was sent meanwhile. A write deadline ends a write
// blocked on a full buffer, reporting what was written.
func TestRawIODeadline(t *testing.T) {
	a, b := rawPair(t, "unix")
	ra, rb := mustRaw(t, a), mustRaw(t, b)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 16)
	n, err := ra.Read(buf)
	var oe *net.OpError
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "read" || !oe.Timeout() {
		t.Fatalf("Read past the deadline = %d, %#v; want a read *net.OpError that is a timeout", n, err)
	}
	if _, err := rb.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	a.SetReadDeadline(time.Time{})
	if n, err := ra.Read(buf); err != nil || string(buf[:n]) != "after" {
		t.Fatalf("Read after clearing the deadline = %q, %v", buf[:n], err)
	}

	big := make([]byte, 64<<20) // more than the socket buffers hold
	b.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err = rb.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= len(big) {
		t.Fatalf("Write past the deadline = %d, %v; want part of %d bytes and a timeout", n, err, len(big))
	}
}

// TestRawIOEnds: the peer's close is io.EOF; Close during a blocked read
// ends it with net.ErrClosed; a write to a closed peer fails with a write
// *net.OpError.
func TestRawIOEnds(t *testing.T) {
	a, b := rawPair(t, "unix")
	ra, rb := mustRaw(t, a), mustRaw(t, b)
	b.Close()
	if n, err := ra.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want io.EOF", n, err)
	}
	var err error
	for range 100 { // the first write may still be accepted
		if _, err = ra.Write([]byte("x")); err != nil {
			break
		}
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || oe.Net != "unix" {
		t.Fatalf("Write to a closed peer: %#v; want a write *net.OpError", err)
	}
	if _, err := rb.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed connection: %v; want net.ErrClosed", err)
	}

	c, d := rawPair(t, "unix")
	rc := mustRaw(t, c)
	_ = d
	errc := make(chan error, 1)
	go func() {
		_, err := rc.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read ended by Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a blocked Read")
	}
}

// TestRawIOWriteBuffers writes buffers of many sizes, empty ones among
// them and more than one writev takes, in all more than the socket holds,
// so that writev stops part-way through a buffer and resumes there: the
// peer gets them in order, and the buffers are consumed.
func TestRawIOWriteBuffers(t *testing.T) {
	a, b := rawPair(t, "unix")
	ra, rb := mustRaw(t, a), mustRaw(t, b)
	var want []byte
	var v net.Buffers
	for i := range 40 {
		n := (i * 37 % 11) << (i % 17)
		if i%10 == 5 {
			n = 2<<20 + i
		}
		buf := make([]byte, n)
		for j := range buf {
			buf[j] = byte(i + j*3)
		}
		want = append(want, buf...)
		v = append(v, buf)
	}
	orig := len(v)
	done := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = ra.WriteBuffers(&v)
		done <- err
	}()
	got := make([]byte, 0, len(want))
	buf := make([]byte, 32<<10)
	for len(got) < len(want) {
		k, err := rb.Read(buf)
		if err != nil {
			t.Fatalf("read after %d of %d bytes: %v", len(got), len(want), err)
		}
		got = append(got, buf[:k]...)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("received bytes differ from those sent")
	}
	if n != int64(len(want)) || len(v) != 0 {
		t.Fatalf("WriteBuffers = %d of %d bytes, %d of %d buffers left", n, len(want), len(v), orig)
	}
	if len(want) < 4<<20 {
		t.Fatalf("only %d bytes: not enough to fill the socket", len(want))
	}
}

// TestRawIOBlockingSocket: a socket switched to blocking mode behind the
// connection's back (os.File.Fd does that to the descriptor's shared
// flags) still never blocks a raw call: a read with nothing to read waits
// for the poller, so its deadline ends it, and data then flows as before.
func TestRawIOBlockingSocket(t *testing.T) {
	a, b := rawPair(t, "unix")
	ra, rb := mustRaw(t, a), mustRaw(t, b)
	sc, err := a.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	sc.Control(func(fd uintptr) { err = syscall.SetNonblock(int(fd), false) })
	if err != nil {
		t.Fatal(err)
	}
	a.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 8))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read on a blocking socket: %v; want the deadline", err)
		}
	case <-time.After(5 * time.Second):
		b.Close() // unblock the read, or the test leaks it
		t.Fatal("Read on a blocking socket blocked past its deadline")
	}
	a.SetReadDeadline(time.Time{})
	if _, err := rb.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := ra.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if _, err := ra.Write([]byte("yo")); err != nil {
		t.Fatal(err)
	}
	if n, err := rb.Read(buf); err != nil || string(buf[:n]) != "yo" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
}
