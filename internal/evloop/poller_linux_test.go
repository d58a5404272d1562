//go:build linux

package evloop

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPoller(t *testing.T) {
	p, err := NewPoller(8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])

	// Nothing ready: Wait times out.
	if err := p.Add(fds[0], In); err != nil {
		t.Fatal(err)
	}
	evs, woken, err := p.Wait(10)
	if err != nil || len(evs) != 0 || woken {
		t.Fatalf("idle Wait = %v %v %v", evs, woken, err)
	}
	// Readable, level-triggered: reported until read.
	unix.Write(fds[1], []byte("x"))
	for range 2 {
		evs, _, err = p.Wait(1000)
		if err != nil || len(evs) != 1 || int(evs[0].Fd) != fds[0] || evs[0].Events&In == 0 {
			t.Fatalf("Wait = %v %v", evs, err)
		}
	}
	var b [8]byte
	unix.Read(fds[0], b[:])
	// Writable once asked for.
	if err := p.Mod(fds[0], In|Out); err != nil {
		t.Fatal(err)
	}
	evs, _, err = p.Wait(1000)
	if err != nil || len(evs) != 1 || evs[0].Events&Out == 0 {
		t.Fatalf("Wait for Out = %v %v", evs, err)
	}
	if err := p.Del(fds[0]); err != nil {
		t.Fatal(err)
	}
	// Wake interrupts a blocked Wait, once per Wake.
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.Wake()
		p.Wake()
	}()
	start := time.Now()
	evs, woken, err = p.Wait(-1)
	if err != nil || len(evs) != 0 || !woken {
		t.Fatalf("woken Wait = %v %v %v", evs, woken, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Wake did not interrupt Wait")
	}
	time.Sleep(10 * time.Millisecond)
	evs, woken, _ = p.Wait(0)
	if woken && len(evs) == 0 {
		// The second Wake may land after the first Wait cleared the
		// flag: one more wake-up at most.
		evs, woken, _ = p.Wait(0)
	}
	if woken || len(evs) != 0 {
		t.Fatalf("Wait after the wake-up = %v %v", evs, woken)
	}
}
