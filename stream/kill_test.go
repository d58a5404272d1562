package stream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// childEnv, when set, makes TestKilledMidMessage play the child: it dials
// the socket named by the variable.
const childEnv = "WARREN_STREAM_TEST_CHILD"

// killMessage is the message the child is killed in the middle of.
var killMessage = bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB

// TestKilledMidMessage runs a child process that sends three messages and
// half of a large one, and kills it with SIGKILL: the reader gets the three
// messages, then a *ConnError wrapping io.ErrUnexpectedEOF, never the half
// message.
func TestKilledMidMessage(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		killChild(path)
		return
	}
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "kill.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidMessage$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+l.Addr().String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()

	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		var w word
		if err := s.Read(&w); err != nil || w.N != i {
			t.Fatalf("message %d: %+v, %v", i, w, err)
		}
	}
	// Read the large message meanwhile: the child's writes need a reader.
	type result struct {
		msg []byte
		err error
	}
	read := make(chan result, 1)
	go func() {
		msg, err := s.ReadBytes(make([]byte, 0, len(killMessage)))
		read <- result{msg, err}
	}()
	// The child says "ready" once half of the large message is written.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	werr := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("child ended with %v, want killed by a signal", werr)
	}

	var got []byte
	select {
	case r := <-read:
		got, err = r.msg, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return after the child was killed")
	}
	if len(got) != 0 {
		t.Fatalf("read %d bytes of a message the child never finished", len(got))
	}
	ce := mustErrAs[*ConnError](t, err)
	if !ce.Partial || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v: %+v", err, ce)
	}
	t.Logf("after SIGKILL: %v", err)
}

// killChild is the child's side: three messages, then the first half of the
// frames of killMessage, and then it waits to be killed.
func killChild(path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		os.Exit(2)
	}
	s, err := New(c, nil)
	if err != nil {
		os.Exit(3)
	}
	for i := range 3 {
		if s.Write(word{Word: "before", N: i}) != nil {
			os.Exit(4)
		}
	}
	f := frames(killMessage, uint32(s.peer.MaxFrameSize), 0)
	if _, err := c.Write(f[:len(f)/2]); err != nil {
		os.Exit(5)
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute) // the parent kills us long before
	os.Exit(6)
}
