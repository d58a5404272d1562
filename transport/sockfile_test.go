//go:build unix

package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// These tests look inside the Listener to check which technique created the
// socket file. Their connections never reach Accept: the backlog holds them
// until Close.

// sockPath returns a path for a socket file that Listen creates with the
// given technique: a short one for techLink, and for techUmask one whose
// private path would not fit in sun_path.
func sockPath(t *testing.T, technique string) string {
	t.Helper()
	dir := t.TempDir()
	if technique == techUmask {
		// The private path adds 21 bytes to dir; the socket's path 2.
		n := sunPathLimit - 20 - len(dir) - 1
		if n < 1 {
			t.Skipf("temporary directory %s is too long for this test", dir)
		}
		dir = filepath.Join(dir, strings.Repeat("d", n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "s")
}

var techniques = []string{techLink, techUmask}

func listenT(t *testing.T, path, technique string, cfg *ListenConfig) *Listener {
	t.Helper()
	l, err := Listen("unix://"+path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if technique != "" && l.file.technique != technique {
		t.Fatalf("socket file created by %q, want %q", l.file.technique, technique)
	}
	return l
}

// connect checks that a client can connect to the socket at path.
func connect(t *testing.T, path string) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	c.Close()
}

func lstat(t *testing.T, path string) (fs.FileInfo, *syscall.Stat_t) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi, fi.Sys().(*syscall.Stat_t)
}

// staleSocket leaves a socket file at path that nobody accepts on.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another user (CI runs as root)")
	}
}

func TestSocketFileMode(t *testing.T) {
	for _, tech := range techniques {
		for _, mode := range []fs.FileMode{0, 0o600, 0o660, 0o666, 0o640, 0o700} {
			t.Run(tech+"/"+fileMode(mode), func(t *testing.T) {
				path := sockPath(t, tech)
				listenT(t, path, tech, &ListenConfig{Mode: mode})
				want := mode
				if want == 0 {
					want = 0o600
				}
				fi, st := lstat(t, path)
				if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != want {
					t.Errorf("socket file mode %v, want socket %v", fi.Mode(), want)
				}
				if int(st.Uid) != os.Geteuid() {
					t.Errorf("socket file owned by uid %d, want %d", st.Uid, os.Geteuid())
				}
				connect(t, path)
				entries, _ := os.ReadDir(filepath.Dir(path))
				if len(entries) != 1 {
					t.Errorf("directory holds %d entries, want only the socket: %v", len(entries), entries)
				}
			})
		}
	}
}

func TestSocketFileOwner(t *testing.T) {
	requireRoot(t)
	for _, tech := range techniques {
		for _, tc := range []struct {
			owner    Owner
			uid, gid uint32
		}{
			{Owner{65534, 65534}, 65534, 65534},
			{Owner{-1, 65534}, 0, 65534},
			{Owner{65534, -1}, 65534, 0},
			{Owner{-1, -1}, 0, 0},
		} {
			t.Run(tech+"/"+strconv.Itoa(tc.owner.UID)+":"+strconv.Itoa(tc.owner.GID), func(t *testing.T) {
				path := sockPath(t, tech)
				listenT(t, path, tech, &ListenConfig{Mode: 0o660, Owner: &tc.owner})
				fi, st := lstat(t, path)
				if st.Uid != tc.uid || st.Gid != tc.gid || fi.Mode().Perm() != 0o660 {
					t.Errorf("socket file %d:%d %v, want %d:%d 0660", st.Uid, st.Gid, fi.Mode().Perm(), tc.uid, tc.gid)
				}
			})
		}
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	for _, tech := range techniques {
		t.Run(tech, func(t *testing.T) {
			path := sockPath(t, tech)
			staleSocket(t, path)
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				t.Fatal("the stale socket accepted a connection")
			} else if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("the stale socket: %v, want ECONNREFUSED", err)
			}
			l := listenT(t, path, tech, nil)
			// Inode numbers prove nothing here: the stale one is freed before
			// the new socket is bound and may be reused. A connection does.
			connect(t, path)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after Close: %v, want the file removed", err)
			}
		})
	}
}

func TestLiveSocketInUse(t *testing.T) {
	for _, tech := range techniques {
		t.Run(tech, func(t *testing.T) {
			path := sockPath(t, tech)
			listenT(t, path, tech, nil)
			_, before := lstat(t, path)
			_, err := Listen("unix://"+path, nil)
			if !errors.Is(err, ErrAddrInUse) {
				t.Fatalf("second Listen: %v, want ErrAddrInUse", err)
			}
			if want := "warren: listen unix://" + path + ": address in use by a running server"; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			if _, after := lstat(t, path); after.Ino != before.Ino {
				t.Error("the running server's socket file was replaced")
			}
			connect(t, path)
		})
	}
	t.Run("not a warren server", func(t *testing.T) {
		path := sockPath(t, techLink)
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if _, err := Listen("unix://"+path, nil); !errors.Is(err, ErrAddrInUse) {
			t.Fatalf("Listen: %v, want ErrAddrInUse", err)
		}
	})
}

func TestNotSocketUntouched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string)
		found string
	}{
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "found a regular file"},
		{"empty regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "found a regular file"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "f"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "found a directory"},
		{"symlink to a stale socket", func(t *testing.T, path string) {
			target := path + ".target"
			staleSocket(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "found a symbolic link"},
		{"dangling symlink", func(t *testing.T, path string) {
			if err := os.Symlink(path+".missing", path); err != nil {
				t.Fatal(err)
			}
		}, "found a symbolic link"},
		{"named pipe", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "found a named pipe"},
	} {
		for _, tech := range techniques {
			t.Run(tc.name+"/"+tech, func(t *testing.T) {
				path := sockPath(t, tech)
				tc.make(t, path)
				before := snapshot(t, filepath.Dir(path))
				l, err := Listen("unix://"+path, nil)
				if err == nil {
					l.Close()
					t.Fatal("Listen succeeded")
				}
				if !errors.Is(err, ErrNotSocket) {
					t.Fatalf("Listen: %v, want ErrNotSocket", err)
				}
				if !strings.Contains(err.Error(), tc.found) {
					t.Errorf("error %q does not say %q", err, tc.found)
				}
				if after := snapshot(t, filepath.Dir(path)); after != before {
					t.Errorf("directory changed:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}

// snapshot describes every file under dir, with inode numbers and contents.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, st := lstat(t, path)
		b.WriteString(path + " " + fi.Mode().String() + " " + strconv.FormatUint(st.Ino, 10))
		switch fi.Mode().Type() {
		case 0:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b.WriteString(" " + strconv.Quote(string(data)))
		case fs.ModeSymlink:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			b.WriteString(" -> " + target)
		}
		b.WriteString("; ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCloseRemovesOnlyItsOwnFile(t *testing.T) {
	for _, tech := range techniques {
		t.Run(tech, func(t *testing.T) {
			path := sockPath(t, tech)
			a := listenT(t, path, tech, nil)
			// Someone removes a's file and a new server starts at the path.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			b := listenT(t, path, tech, nil)
			_, bID := lstat(t, path)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if _, st := lstat(t, path); st.Ino != bID.Ino {
				t.Fatal("closing the old listener replaced the new one's file")
			}
			connect(t, path)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after the new listener's Close: %v, want the file removed", err)
			}
		})
	}
}

func TestCloseTwice(t *testing.T) {
	path := sockPath(t, techLink)
	l := listenT(t, path, techLink, nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close: %v, want the file removed", err)
	}
}

func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "app.sock")
	_, err := Listen("unix://"+path, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "open directory") {
		t.Fatalf("Listen without MkdirAll: %v, want a missing-directory error", err)
	}
	listenT(t, path, techLink, &ListenConfig{MkdirAll: true})
	for _, dir := range []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b")} {
		fi, _ := lstat(t, dir)
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want a directory with mode 0700", dir, fi.Mode())
		}
	}
	connect(t, path)
}

func TestPathTooLong(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 195)
	for _, addr := range []string{"unix://" + long, "unix:" + long[1:], "unix:@" + long[6:]} {
		if addr[5] == '@' && !abstractNamespace {
			continue
		}
		check := func(op string, err error) {
			t.Helper()
			var pe *PathTooLongError
			if !errors.As(err, &pe) {
				t.Fatalf("%s(%.20q...): %v, want *PathTooLongError", op, addr, err)
			}
			a, _ := ParseAddr(addr)
			if pe.Path != a.Address || pe.Len != len(a.Address) || pe.Limit != sunPathLimit {
				t.Errorf("%s: %+v", op, pe)
			}
			for _, want := range []string{strconv.Itoa(sunPathLimit), "NUL", "shorter", "relative"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: message %q does not contain %q", op, err, want)
				}
			}
		}
		_, err := Listen(addr, nil)
		check("Listen", err)
		_, err = Dial(context.Background(), addr, nil)
		check("Dial", err)
	}
	if _, err := os.Lstat(long); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file was created at the long path: %v", err)
	}
}

func TestRelativePath(t *testing.T) {
	// A directory whose absolute path does not fit in sun_path.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100), strings.Repeat("e", 100))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	l, err := Listen("unix:sub/app.sock", &ListenConfig{MkdirAll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.Addr().String(); got != "sub/app.sock" {
		t.Errorf("Addr() = %q, want sub/app.sock", got)
	}
	c, err := Dial(context.Background(), "unix:sub/app.sock", &DialConfig{RequireModes: []fs.FileMode{0o600}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Close removes the file even after the working directory changed.
	t.Chdir(t.TempDir())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub", "app.sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close: %v, want the file removed", err)
	}
}

func TestBadListenConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	if _, err := Listen("unix://"+path, &ListenConfig{Mode: 0o600 | fs.ModeSetuid}); err == nil || !strings.Contains(err.Error(), "permission bits") {
		t.Errorf("Listen with a setuid mode: %v", err)
	}
	if _, err := Listen("tls://127.0.0.1:0", nil); err == nil || !strings.Contains(err.Error(), "needs ListenConfig.TLS") {
		t.Errorf("Listen tls without a config: %v", err)
	}
	if _, err := Listen("tls://127.0.0.1:0", &ListenConfig{TLS: &tls.Config{}}); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("Listen tls without a certificate: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file was created: %v", err)
	}
}

// TestNoPermissiveWindow watches the socket path while Listen creates the
// file again and again, and fails if it ever sees the file more open than
// requested, or, for the link technique, with another owner.
func TestNoPermissiveWindow(t *testing.T) {
	const mode = 0o640
	var owner *Owner
	if os.Geteuid() == 0 {
		owner = &Owner{UID: 65534, GID: 65534}
	}
	for _, tech := range techniques {
		t.Run(tech, func(t *testing.T) {
			path := sockPath(t, tech)
			dir := filepath.Dir(path)
			var (
				stop    atomic.Bool
				seen    atomic.Int64 // observations of the socket file
				mu      sync.Mutex   // protects bad
				bad     []string
				watched sync.WaitGroup
			)
			report := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				if len(bad) < 10 {
					bad = append(bad, s)
				}
			}
			watched.Add(1)
			go func() {
				defer watched.Done()
				for !stop.Load() {
					if fi, err := os.Lstat(path); err == nil {
						st := fi.Sys().(*syscall.Stat_t)
						if fi.Mode().Perm()&^mode != 0 {
							report("socket with mode " + fi.Mode().String())
						}
						if tech == techLink && owner != nil && (st.Uid != 65534 || st.Gid != 65534) {
							report("socket owned by " + strconv.Itoa(int(st.Uid)) + ":" + strconv.Itoa(int(st.Gid)))
						}
						seen.Add(1)
					}
					// The private directories must be private.
					entries, _ := os.ReadDir(dir)
					for _, e := range entries {
						if fi, err := e.Info(); err == nil && fi.IsDir() && fi.Mode().Perm() != 0o700 {
							report("private directory with mode " + fi.Mode().String())
						}
					}
				}
			}()
			for range 50 {
				l, err := Listen("unix://"+path, &ListenConfig{Mode: mode, Owner: owner})
				if err != nil {
					t.Fatal(err)
				}
				if l.file.technique != tech {
					t.Fatalf("technique %q, want %q", l.file.technique, tech)
				}
				// Let the watcher see the file at least once.
				before := seen.Load()
				for deadline := time.Now().Add(5 * time.Second); seen.Load() == before && time.Now().Before(deadline); {
					time.Sleep(10 * time.Microsecond)
				}
				l.Close()
			}
			stop.Store(true)
			watched.Wait()
			if seen.Load() == 0 {
				t.Fatal("the watcher never saw the socket file")
			}
			for _, s := range bad {
				t.Error(s)
			}
		})
	}
}

func TestUmaskRestored(t *testing.T) {
	umask := func() int {
		old := syscall.Umask(0o022)
		syscall.Umask(old)
		return old
	}
	before := umask()
	listenT(t, sockPath(t, techUmask), techUmask, &ListenConfig{Mode: 0o660})
	if after := umask(); after != before {
		t.Errorf("umask %#o after Listen, want %#o", after, before)
	}
}

// TestErrorsNameThePath checks that errors from a socket-file listener name
// the socket's path, not the private name it was bound under.
func TestErrorsNameThePath(t *testing.T) {
	path := sockPath(t, techLink)
	l := listenT(t, path, techLink, nil)
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.acceptConn()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), ".warren-") || !strings.Contains(err.Error(), path) {
		t.Errorf("Read on a closed Conn: %v, want an error naming %s", err, path)
	}
	l.Close()
	if _, err := l.Accept(); err == nil || strings.Contains(err.Error(), ".warren-") || !strings.Contains(err.Error(), path) {
		t.Errorf("Accept on a closed Listener: %v, want an error naming %s", err, path)
	}
}
