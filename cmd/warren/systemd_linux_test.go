package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdSocketActivation serves under systemd-socket-activate (package
// systemd): the first connection starts `warren serve --addr systemd:api`,
// which reports READY=1 on the notification socket; the call succeeds, the
// same-user policy still refuses another uid on the passed socket, SIGTERM
// reports STOPPING=1 and leaves the socket file, which is the unit's.
func TestSystemdSocketActivation(t *testing.T) {
	tool, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatal("systemd-socket-activate is required (WARREN_REQUIRE_TOOLS is set): apt-get install systemd")
		}
		t.Skip("needs systemd-socket-activate (apt-get install systemd)")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	notifyPath := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	states := make(chan string, 16)
	go func() {
		defer close(states)
		b := make([]byte, 4096)
		for {
			n, err := notify.Read(b)
			if err != nil {
				return
			}
			states <- string(b[:n])
		}
	}()
	waitState := func(want string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case s := <-states:
				if strings.Contains("\n"+s+"\n", "\n"+want+"\n") {
					return
				}
			case <-timeout:
				t.Fatalf("no %s on the notification socket", want)
			}
		}
	}

	cmd := exec.Command(tool, "-l", sock, "--fdname=api", "-E", "NOTIFY_SOCKET="+notifyPath,
		warrenBin, "serve", "--addr", "systemd:api")
	cmd.Env = cmdEnv(t)
	stderr := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s made no socket:\n%s", tool, stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The unit's mode: everyone may connect; the policy decides who calls.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}

	addr := "unix://" + sock
	r := runCmd(t, nil, "", "call", addr, "Counter.Set", `{"name":"a","value":7}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"value":"7"`) {
		t.Fatalf("first call through the passed socket: %s\nserver:\n%s", r, stderr)
	}
	waitState("READY=1")

	const nobody = 65534
	if os.Geteuid() == 0 {
		r = runAs(t, &syscall.Credential{Uid: nobody, Gid: nobody}, cmdEnv(t), "", "call", addr, "Counter.Get", `{"name":"a"}`)
		wantFail(t, "nobody on the passed socket", r, 1,
			fmt.Sprintf("error: permission_denied: permission denied by the server's policy for uid %d", nobody))
	} else {
		t.Log("not root: the refusal of another uid is not checked")
	}
	r = runCmd(t, nil, "", "call", addr, "Counter.Get", `{"name":"a"}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"value":"7"`) {
		t.Fatalf("second call: %s", r)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	waitState("STOPPING=1")
	select {
	case <-done:
		if waitErr != nil {
			t.Fatalf("serve: %v\n%s", waitErr, stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not stop:\n%s", stderr)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("the unit's socket after serve stopped: %v %v", fi, err)
	}
	out := stderr.String()
	for _, want := range []string{"socket passed by systemd (systemd:api)", "warren serve: stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's output lacks %q:\n%s", want, out)
		}
	}
}
