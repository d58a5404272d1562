package balance_test

import (
	"strings"
	"testing"

	"github.com/warrenipc/warren/internal/balance"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, addrs, host, err string
	}{
		{in: "tcp://a:1", addrs: "tcp://a:1"},
		{in: "tcp://a:1,unix:///tmp/b.sock, ws://c:3/x", addrs: "tcp://a:1 unix:///tmp/b.sock ws://c:3/x"},
		{in: "tcp://a:1,tcp://a:1", addrs: "tcp://a:1"},
		{in: "unix:///tmp/a,b.sock", addrs: "unix:///tmp/a,b.sock"},
		{in: "dns:///svc.example:7000", host: "svc.example"},
		{in: "dns:///[::1]:7000", host: "::1"},
		{in: "", err: "empty address"},
		{in: " ", err: "empty address"},
		{in: "tcp://a:1,,tcp://b:2", err: "entry 2 is empty"},
		{in: "tcp://a:1,bogus://b:2", err: "entry 2"},
		{in: "tcp://a:1,dns:///b:2", err: "stands alone"},
		{in: "dns:///host", err: "dns:///HOST:PORT"},
		{in: "dns:///:80", err: "dns:///HOST:PORT"},
		{in: "dns:///host:http", err: "not a number"},
		{in: "dns:///host:0", err: "not a number"},
		{in: "bogus://x", err: "bogus"},
	} {
		got, err := balance.Parse(tc.in, nil)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if s := strings.Join(got.Addrs, " "); s != tc.addrs || got.Host != tc.host {
			t.Errorf("Parse(%q) = %q host %q; want %q host %q", tc.in, s, got.Host, tc.addrs, tc.host)
		}
	}
	many := strings.Repeat("tcp://a:1,", balance.MaxAddrs) + "tcp://a:1"
	if _, err := balance.Parse(many, nil); err == nil {
		t.Errorf("Parse of %d addresses succeeded", balance.MaxAddrs+1)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"tcp://a:1,unix:///b", "dns:///h:1", "unix:///a,b", ",", "dns:///"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := balance.Parse(s, nil)
		if err != nil {
			return
		}
		if (tg.Host == "") == (len(tg.Addrs) == 0) {
			t.Fatalf("Parse(%q) = %+v: want addresses or a host", s, tg)
		}
		if len(tg.Addrs) > balance.MaxAddrs {
			t.Fatalf("Parse(%q): %d addresses", s, len(tg.Addrs))
		}
	})
}
