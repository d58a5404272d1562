package nginx_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/fleet"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Who is what the Who.Am method reports: the peer the server sees and the
// forwarded client address nginx passed as metadata.
type Who struct {
	Network   string `json:"network"`
	HasCred   bool   `json:"has_cred"`
	UID       int    `json:"uid"`
	PID       int    `json:"pid"`
	Forwarded string `json:"forwarded"`
}

// workerUser returns the user nginx's workers run as: nobody when the test
// runs as root (nginx drops privileges), and otherwise this user (the user
// directive does not apply).
func workerUser(t *testing.T) (uid int, directive string) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), ""
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	return uid, fmt.Sprintf("user %s %s;", u.Username, g.Name)
}

// nginxConf returns warren.conf with the paths and port of this test,
// checking that each line it changes is still there.
func nginxConf(t *testing.T, sock, certs string, port int) string {
	b, err := os.ReadFile("warren.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	for _, r := range [][2]string{
		{"server unix:/run/warren/warren.sock;", "server unix:" + sock + ";"},
		{"listen 443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port)},
		{"/etc/warren/server.pem;", filepath.Join(certs, "server.pem") + ";"},
		{"/etc/warren/server-key.pem;", filepath.Join(certs, "server-key.pem") + ";"},
	} {
		if strings.Count(conf, r[0]) != 1 {
			t.Fatalf("warren.conf no longer has %q once", r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	return conf
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestNginx runs warren.conf with nginx in front of a warren server on a
// unix socket and calls through it over wss:// (the Go client) and Connect
// HTTP (curl).
func TestNginx(t *testing.T) {
	nginx := fleet.RequireTool(t, "nginx")
	curl := fleet.RequireTool(t, "curl")
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to find nginx's workers")
	}
	workerUID, userLine := workerUser(t)

	// Everything in one directory: nginx's prefix, its pid, logs and temp
	// files, the certificates and warren's socket. nginx's workers must
	// reach the socket and write their temp files.
	dir, err := os.MkdirTemp("", "warren-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Chown(tmp, workerUID, -1)
	}
	certs := filepath.Join(dir, "certs")
	warren := filepath.Join(dir, "warren")
	if out, err := exec.Command("go", "build", "-o", warren, "../../cmd/warren").CombinedOutput(); err != nil {
		t.Fatalf("go build ../../cmd/warren: %v\n%s", err, out)
	}
	if out, err := exec.Command(warren, "certs", certs).CombinedOutput(); err != nil {
		t.Fatalf("warren certs: %v\n%s", err, out)
	}

	// The warren server: the counter service and Who.Am, on a socket
	// nginx's workers may open (mode 0666), for their uid only.
	sock := filepath.Join(dir, "warren.sock")
	ln, err := transport.Listen("unix://"+sock, &transport.ListenConfig{Mode: 0o666, Policy: peer.AllowAll()})
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(&rpc.ServerOptions{Policy: peer.AllowUIDs(workerUID)})
	store := counter.New()
	store.Register(srv)
	rpc.Handle(srv, "Who.Am", func(ctx context.Context, _ *struct{}) (*Who, error) {
		p, _ := peer.FromContext(ctx)
		return &Who{Network: p.Network, HasCred: p.HasCred, UID: p.UID, PID: p.PID,
			Forwarded: rpc.IncomingMetadata(ctx).Get("x-forwarded-for")}, nil
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		store.Shutdown()
		srv.Close()
		<-served
	})

	// nginx, in the foreground, with everything under dir.
	port := freePort(t)
	if err := os.WriteFile(filepath.Join(dir, "warren.conf"), []byte(nginxConf(t, sock, certs, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	main := fleet.NginxMain(userLine, dir, tmp, filepath.Join(dir, "warren.conf"), "")
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	if out, err := exec.Command(nginx, append(args, "-t")...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(nginx, args...)
	var nginxOut strings.Builder
	cmd.Stdout, cmd.Stderr = &nginxOut, &nginxOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT) // graceful stop
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	errorLog := func() string { b, _ := os.ReadFile(filepath.Join(dir, "error.log")); return string(b) }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("nginx exited: %s\n%s", nginxOut.String(), errorLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s: %s", addr, errorLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var workers []int
	for deadline := time.Now().Add(5 * time.Second); len(workers) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		workers = fleet.ChildPIDs(cmd.Process.Pid)
	}
	isWorker := func(w *Who) error {
		if w.Network != "unix" || !w.HasCred || w.UID != workerUID || !slices.Contains(workers, w.PID) {
			return fmt.Errorf("the server sees %+v; want unix, uid %d, pid one of nginx's workers %v", *w, workerUID, workers)
		}
		return nil
	}

	pem, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)

	t.Run("wss", func(t *testing.T) {
		c, err := rpc.Dial("wss://"+addr+"/warren", &rpc.ClientOptions{Dial: &transport.DialConfig{TLS: &tls.Config{RootCAs: roots}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, c, "Counter.Set", &counter.SetRequest{Name: "a", Value: 1}); err != nil {
			t.Fatalf("Counter.Set over wss through nginx: %v\n%s", err, errorLog())
		}
		w, err := rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, c, "Counter.Watch")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.Send(&counter.WatchRequest{Name: "a"}); err != nil {
			t.Fatal(err)
		}
		w.CloseSend()
		for want := int64(1); want <= 3; want++ {
			got, err := w.Recv()
			if err != nil || got.Value != want {
				t.Fatalf("watch: %v, %v; want value %d", got, err, want)
			}
			if want < 3 {
				if _, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "a"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		who, err := rpc.Call[struct{}, Who](ctx, c, "Who.Am", &struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		if err := isWorker(who); err != nil {
			t.Fatal(err)
		}
		if who.Forwarded != "" {
			t.Fatalf("a call over WebSocket carries x-forwarded-for %q: only what the client sends becomes metadata", who.Forwarded)
		}
	})

	t.Run("connect http", func(t *testing.T) {
		post := func(method, body string, header ...string) string {
			t.Helper()
			args := []string{"-sS", "--max-time", "20", "--cacert", filepath.Join(certs, "ca.pem"),
				"-H", "Content-Type: application/json", "-d", body}
			for _, h := range header {
				args = append(args, "-H", h)
			}
			out, err := exec.Command(curl, append(args, "https://"+addr+"/"+method)...).CombinedOutput()
			if err != nil {
				t.Fatalf("curl %s: %v\n%s\n%s", method, err, out, errorLog())
			}
			return strings.TrimSpace(string(out))
		}
		if got := post("Counter.Inc", `{"name":"a"}`); got != `{"name":"a","value":"4"}` {
			t.Fatalf("Counter.Inc through nginx: %s", got)
		}
		if got := post("Counter.Get", `{"name":"nope"}`); !strings.Contains(got, `"code":"not_found"`) {
			t.Fatalf("Counter.Get of a missing counter: %s", got)
		}
		// The client claims another address; nginx replaces the header
		// with the address it saw, and the handler gets it as metadata.
		var who Who
		if err := json.Unmarshal([]byte(post("Who.Am", `{}`, "X-Forwarded-For: 203.0.113.9")), &who); err != nil {
			t.Fatal(err)
		}
		if err := isWorker(&who); err != nil {
			t.Fatal(err)
		}
		if who.Forwarded != "127.0.0.1" {
			t.Fatalf("x-forwarded-for %q, want 127.0.0.1 (set by nginx, not the client's)", who.Forwarded)
		}
	})
}

func runOut(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}
