package httpbody

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/rawio"
)

// rss is the process's resident memory, from /proc/self/statm.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm:", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestBodyMemoryBounded: five rounds of 100 connections each sending a
// 4 MB body at once make the process hold at most 1.5 times Budget more than before, though
// the budget refuses most of them.
func TestBodyMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2 GB over loopback")
	}
	if rawio.RaceEnabled {
		t.Skip("the race detector's shadow memory counts in RSS")
	}
	const rounds, conns, size = 5, 100, 4_000_000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf, n, se := Read(w, r, 4<<20)
		if se != nil {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(50 * time.Millisecond) // held while the others arrive
		pool.Put(buf)
		Release(n)
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("w"), size)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns}}
	defer client.CloseIdleConnections()

	runtime.GC()
	base := rss(t)
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, rss(t))
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range rounds {
		for range conns {
			wg.Go(func() {
				resp, err := client.Post(srv.URL, "application/octet-stream", bytes.NewReader(body))
				code := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	close(stop)
	<-sampled
	peak = max(peak, rss(t))
	growth := peak - base
	t.Logf("replies %v; RSS +%.1f MiB (peak)", codes, float64(growth)/(1<<20))
	if codes[http.StatusOK] == 0 {
		t.Fatalf("no body was read: %v", codes)
	}
	if limit := int64(Budget) * 3 / 2; growth > limit {
		t.Fatalf("memory grew by %.1f MiB, over 1.5 x the %d MiB budget", float64(growth)/(1<<20), Budget>>20)
	}
	if held.Load() != 0 {
		t.Fatalf("%d bytes of budget held after the load", held.Load())
	}
}
