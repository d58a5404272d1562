//go:build unix

package transport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestSocketCreationSymlinkRace swaps, in a loop, the private directories
// and the socket file Listen creates for symbolic links to a victim
// directory and file while Listen runs with a permissive mode. Whatever
// Listen manages or fails to do, the victims' modes never change: every
// chmod and chown lands on the inode Listen bound, or nowhere.
func TestSocketCreationSymlinkRace(t *testing.T) {
	for _, tech := range techniques {
		t.Run(tech, func(t *testing.T) {
			path := sockPath(t, tech)
			dir := filepath.Dir(path)
			victimDir := t.TempDir()
			if err := os.Chmod(victimDir, 0o711); err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(victimDir, "s") // the name of the private socket
			if err := os.WriteFile(victim, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			var stop atomic.Bool
			var swaps atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; !stop.Load(); n++ {
					entries, _ := os.ReadDir(dir)
					for _, e := range entries {
						name := e.Name()
						var target string
						switch {
						case strings.HasPrefix(name, ".warren-") && e.IsDir():
							target = victimDir
						case name == filepath.Base(path) && e.Type()&os.ModeSymlink == 0:
							target = victim
						default:
							continue
						}
						p := filepath.Join(dir, name)
						if os.Rename(p, filepath.Join(dir, fmt.Sprintf("moved-%d", n))) == nil {
							if os.Symlink(target, p) == nil {
								swaps.Add(1)
							}
						}
					}
				}
			}()
			for i := 0; i < 300; i++ {
				l, err := Listen("unix://"+path, &ListenConfig{Mode: 0o666})
				if err == nil {
					l.Close()
				}
				// Clear the symbolic links the swapper left, so that the
				// next Listen gets as far as it can.
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					if e.Type()&os.ModeSymlink != 0 {
						os.Remove(filepath.Join(dir, e.Name()))
					}
				}
			}
			stop.Store(true)
			wg.Wait()
			if swaps.Load() == 0 {
				t.Fatal("the swapper never swapped an entry")
			}
			for p, want := range map[string]os.FileMode{victim: 0o600, victimDir: 0o711} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != want {
					t.Errorf("%s: mode changed to %v (was %v) after %d swaps", p, fi.Mode().Perm(), want, swaps.Load())
				}
			}
		})
	}
}

// TestUnsafeParentRefused checks that Listen refuses a directory that
// others can write to without the sticky bit, and accepts a sticky one.
func TestUnsafeParentRefused(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	sticky := filepath.Join(dir, "sticky")
	for p, mode := range map[string]os.FileMode{open: 0o777, sticky: 0o777 | os.ModeSticky} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Listen("unix://"+filepath.Join(open, "s"), nil)
	if !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("Listen in a 0777 directory: %v, want ErrUnsafeDir", err)
	}
	if !strings.Contains(err.Error(), open) || !strings.Contains(err.Error(), "sticky") {
		t.Errorf("error does not name the directory and the fix: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(open, "s")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Listen left a file: %v", err)
	}
	l, err := Listen("unix://"+filepath.Join(sticky, "s"), nil)
	if err != nil {
		t.Fatalf("Listen in a sticky 01777 directory: %v", err)
	}
	l.Close()
}
