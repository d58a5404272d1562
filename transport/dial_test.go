package transport_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

func skipUnlessCred(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("peer credentials are read on linux and darwin only")
	}
}

func TestServerPolicy(t *testing.T) {
	skipUnlessCred(t)
	path := filepath.Join(t.TempDir(), "app.sock")
	addr := "unix://" + path
	l := listen(t, addr, nil)
	serveEcho(t, l, nil)

	c := dial(t, addr, &transport.DialConfig{ServerPolicy: peer.SameUser()})
	echo(t, c, "trusted")

	other := os.Geteuid() + 1
	_, err := transport.Dial(context.Background(), addr, &transport.DialConfig{ServerPolicy: peer.AllowUIDs(other)})
	if !errors.Is(err, peer.ErrDenied) {
		t.Fatalf("Dial with a policy the server fails: %v, want ErrDenied", err)
	}
	var d *peer.DeniedError
	if !errors.As(err, &d) || d.Peer == nil || d.Peer.PID != os.Getpid() {
		t.Fatalf("error %v does not carry the server's peer", err)
	}
	for _, want := range []string{"warren: dial " + addr, "uid=" + strconv.Itoa(os.Geteuid()), "pid=" + strconv.Itoa(os.Getpid()), "not in the allowed uids"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestRequireOwnerAndModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.sock")
	addr := "unix://" + path
	l := listen(t, addr, &transport.ListenConfig{Mode: 0o660})
	serveEcho(t, l, nil)
	me, myGroup := os.Geteuid(), os.Getegid()

	for _, cfg := range []*transport.DialConfig{
		{RequireOwner: &transport.Owner{UID: me, GID: myGroup}},
		{RequireOwner: &transport.Owner{UID: me, GID: -1}},
		{RequireOwner: &transport.Owner{UID: -1, GID: -1}},
		{RequireModes: []fs.FileMode{0o660}},
		{RequireModes: []fs.FileMode{0o600, 0o660}},
		{RequireOwner: &transport.Owner{UID: me, GID: -1}, RequireModes: []fs.FileMode{0o660}, ServerPolicy: peer.SameUser()},
	} {
		echo(t, dial(t, addr, cfg), "checked")
	}

	for _, tc := range []struct {
		cfg   *transport.DialConfig
		check string
		msg   string
	}{
		{&transport.DialConfig{RequireOwner: &transport.Owner{UID: 12345, GID: -1}}, "owner",
			"has owner uid " + strconv.Itoa(me) + ", gid " + strconv.Itoa(myGroup) + ", want uid 12345, any gid"},
		{&transport.DialConfig{RequireOwner: &transport.Owner{UID: -1, GID: 12345}}, "owner", "want any uid, gid 12345"},
		{&transport.DialConfig{RequireModes: []fs.FileMode{0o600}}, "mode", "has mode 0660, want 0600"},
		{&transport.DialConfig{RequireModes: []fs.FileMode{0o600, 0o666}}, "mode", "has mode 0660, want one of 0600, 0666"},
	} {
		_, err := transport.Dial(context.Background(), addr, tc.cfg)
		var fe *transport.SocketFileError
		if !errors.As(err, &fe) {
			t.Errorf("Dial(%+v): %v, want *SocketFileError", tc.cfg, err)
			continue
		}
		if fe.Check != tc.check || fe.Path != path {
			t.Errorf("SocketFileError %+v", fe)
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("error %q does not contain %q", err, tc.msg)
		}
	}

	// The checks fail closed where there is no file to check.
	for _, addr := range []string{"tcp://127.0.0.1:1", "unix:@warren-no-file"} {
		if strings.HasPrefix(addr, "unix:@") && runtime.GOOS != "linux" {
			continue
		}
		_, err := transport.Dial(context.Background(), addr, &transport.DialConfig{RequireModes: []fs.FileMode{0o600}})
		if err == nil || !strings.Contains(err.Error(), "need a socket file") {
			t.Errorf("Dial(%s) with RequireModes: %v", addr, err)
		}
	}
	// And where the file is not a socket.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := transport.Dial(context.Background(), "unix://"+file, &transport.DialConfig{RequireModes: []fs.FileMode{0o600}})
	if !errors.Is(err, transport.ErrNotSocket) {
		t.Errorf("Dial to a regular file with RequireModes: %v, want ErrNotSocket", err)
	}
}

// TestRejectedAtAccept checks that Accept closes a refused unix peer before
// reading anything, logs and counts it, and goes on to the next peer.
func TestRejectedAtAccept(t *testing.T) {
	skipUnlessCred(t)
	var log syncBuffer
	calls := 0
	pol := peer.PolicyFunc(func(p *peer.Peer) error {
		calls++ // Accept runs the policy on the accepting goroutine only
		if calls == 1 {
			return errors.New("first caller is refused")
		}
		return nil
	})
	path := filepath.Join(t.TempDir(), "app.sock")
	l := listen(t, "unix://"+path, &transport.ListenConfig{
		Policy: pol,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	report := make(chan served, 1)
	serveEcho(t, l, report)

	refused := dial(t, "unix://"+path, nil)
	refused.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := refused.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the refused client read %d bytes", n)
	}
	accepted := dial(t, "unix://"+path, nil)
	echo(t, accepted, "second caller")
	receive(t, report)

	if got := l.Stats(); got != (transport.Stats{Accepted: 1, Rejected: 1}) {
		t.Errorf("Stats = %+v, want 1 accepted and 1 rejected", got)
	}
	line := log.String()
	for _, want := range []string{"level=WARN", "peer rejected", "uid=" + strconv.Itoa(os.Geteuid()), "pid=" + strconv.Itoa(os.Getpid()), "first caller is refused"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q does not contain %q", line, want)
		}
	}
	if n := strings.Count(line, "peer rejected"); n != 1 {
		t.Errorf("%d log lines for one rejection", n)
	}
}

// TestNetworkPeerAndCredPolicy checks that a credential policy refuses a TCP
// peer, which has no kernel credentials.
func TestNetworkPeerAndCredPolicy(t *testing.T) {
	l := listen(t, "tcp://127.0.0.1:0", &transport.ListenConfig{
		Policy: peer.SameUser(),
		Logger: slog.New(slog.DiscardHandler),
	})
	serveEcho(t, l, nil)
	c := dial(t, l.Endpoint().String(), nil)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a TCP peer passed SameUser")
	}
	if got := l.Stats().Rejected; got != 1 {
		t.Errorf("Rejected = %d, want 1", got)
	}
	if _, err := transport.Dial(context.Background(), l.Endpoint().String(), &transport.DialConfig{ServerPolicy: peer.SameUser()}); !errors.Is(err, peer.ErrDenied) {
		t.Errorf("Dial tcp with ServerPolicy SameUser: %v, want ErrDenied", err)
	}
}
