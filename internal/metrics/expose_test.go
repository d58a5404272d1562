package metrics_test

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/status"
)

// sample is one parsed line of the text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseText parses the text format 0.0.4 strictly enough to catch what
// Prometheus would refuse: every sample's family declared by TYPE before
// it, names and label names valid, label values escaped, values numbers.
func parseText(text string) ([]sample, error) {
	var out []sample
	types := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line[7:])
			if len(f) != 2 || !validName(f[0]) {
				return nil, fmt.Errorf("bad TYPE line %q", line)
			}
			if _, dup := types[f[0]]; dup {
				return nil, fmt.Errorf("family %s declared twice", f[0])
			}
			types[f[0]] = f[1]
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		base := s.name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(s.name, suf); ok && types[b] == "histogram" {
				base = b
			}
		}
		if types[base] == "" {
			return nil, fmt.Errorf("sample %s before its TYPE", s.name)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value in %q", line)
	}
	s.name = line[:i]
	if !validName(s.name) {
		return s, fmt.Errorf("bad name %q", s.name)
	}
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=\"")
			if eq < 0 || !validName(rest[:eq]) {
				return s, fmt.Errorf("bad label in %q", line)
			}
			name := rest[:eq]
			v, n, err := unescape(rest[eq+2:])
			if err != nil {
				return s, err
			}
			if _, dup := s.labels[name]; dup {
				return s, fmt.Errorf("label %s twice", name)
			}
			s.labels[name] = v
			rest = rest[eq+2+n:]
			rest, _ = strings.CutPrefix(rest, ",")
		}
	}
	v, ok := strings.CutPrefix(rest, " ")
	if !ok {
		return s, fmt.Errorf("no space before value in %q", line)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return s, err
	}
	s.value = f
	return s, nil
}

// unescape reads an escaped label value up to its closing quote,
// returning it and the bytes consumed (the quote included).
func unescape(s string) (string, int, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\n':
			return "", 0, errors.New("raw line feed in a label value")
		case '\\':
			if i++; i == len(s) {
				return "", 0, errors.New("escape at the end")
			}
			switch s[i] {
			case '\\':
				b.WriteByte('\\')
			case '"':
				b.WriteByte('"')
			case 'n':
				b.WriteByte('\n')
			default:
				return "", 0, fmt.Errorf("bad escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("unterminated label value")
}

func validName(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func find(ss []sample, name string, labels ...string) (float64, bool) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

func TestExposition(t *testing.T) {
	r := metrics.New()
	odd := `Svc.Odd"\` + "\n" + `x` // a name a peer never picks, but a server may register
	m := r.Method(odd)
	for range 7 {
		m.End(m.Start(), nil, 10, 20)
	}
	m.End(m.Start(), status.New(status.Unavailable, ""), 0, 0)
	r.Method("Svc.Idle")
	r.ConnRefused(metrics.ConnPolicy)
	r.SetCollect(func(s *metrics.Snapshot) {
		s.Conns = []metrics.ConnCount{{Transport: "unix", Engine: "eventloop", N: 3}}
		s.Loop.Loops = 1
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != metrics.ContentType {
		t.Fatalf("content type %q", ct)
	}
	var body strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	ss, err := parseText(body.String())
	if err != nil {
		t.Fatalf("%v in\n%s", err, body.String())
	}
	checks := []struct {
		want   float64
		name   string
		labels []string
	}{
		{7, "warren_server_calls_total", []string{"method", odd, "code", "ok"}},
		{1, "warren_server_calls_total", []string{"method", odd, "code", "unavailable"}},
		{0, "warren_server_calls_total", []string{"method", "Svc.Idle", "code", "ok"}},
		{8, "warren_server_call_duration_seconds_count", []string{"method", odd}},
		{8, "warren_server_call_duration_seconds_bucket", []string{"method", odd, "le", "+Inf"}},
		{70, "warren_server_received_message_bytes_total", []string{"method", odd}},
		{140, "warren_server_sent_message_bytes_total", []string{"method", odd}},
		{1, "warren_server_connections_refused_total", []string{"reason", "policy"}},
		{0, "warren_server_calls_refused_total", []string{"reason", "call_rate"}},
		{3, "warren_server_connections", []string{"transport", "unix", "engine", "eventloop"}},
		{1, "warren_eventloop_loops", nil},
	}
	for _, c := range checks {
		if v, ok := find(ss, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%q = %v (found %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	// Buckets are cumulative and end at the count.
	var last float64
	for _, s := range ss {
		if s.name == "warren_server_call_duration_seconds_bucket" && s.labels["method"] == odd {
			if s.value < last {
				t.Fatalf("bucket le=%s falls to %v", s.labels["le"], s.value)
			}
			last = s.value
		}
	}
	if _, ok := find(ss, "warren_server_calls_total", "code", "unknown"); ok {
		t.Error("a code without calls has a series")
	}
	if resp, err := http.Post(srv.URL, "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestBounds: calls of unknown methods and refusals make no series.
func TestBounds(t *testing.T) {
	r := metrics.New()
	r.Method("Svc.M")
	before := len(metrics.AppendText(nil, ptr(r.Snapshot())))
	for i := range 1000 {
		r.CallRefused(metrics.CallReason(i % 256)) // out of range ignored
		r.ConnRefused(metrics.ConnReasonOf(fmt.Sprint("peer says ", i)))
		r.Shed(metrics.ShedReason(i % 256))
	}
	s := r.Snapshot()
	after := len(metrics.AppendText(nil, &s))
	if after-before > 64 { // the same lines, with longer numbers
		t.Fatalf("exposition grew from %d to %d bytes", before, after)
	}
	if s.ConnsRefused[metrics.ConnPolicy].N != 1000 {
		t.Fatalf("unknown refusal messages not counted as the policy's: %+v", s.ConnsRefused)
	}
	uids := make([]metrics.UIDCount, 500)
	for i := range uids {
		uids[i] = metrics.UIDCount{UID: uint32(i), N: i % 7}
	}
	r.SetCollect(func(s *metrics.Snapshot) { s.ConnsByUID = uids })
	if n := len(r.Snapshot().ConnsByUID); n != metrics.MaxUIDs {
		t.Fatalf("%d uids", n)
	}
}

func ptr[T any](v T) *T { return &v }

func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "Svc.M", `a"b\c`, "line\nfeed", "\xff\xfe", `\n`, `"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		line := string(metrics.AppendText(nil, &metrics.Snapshot{Methods: []metrics.MethodStats{{Method: v}}}))
		ss, err := parseText(line)
		if err != nil {
			t.Fatalf("%v in %q", err, line)
		}
		want := strings.ToValidUTF8(v, "\uFFFD")
		got, ok := find(ss, "warren_server_calls_in_flight", "method", want)
		if !ok || got != 0 {
			t.Fatalf("method %q not read back from %q", want, line)
		}
		if strings.Count(line, "\n") != strings.Count(string(metrics.AppendText(nil, &metrics.Snapshot{Methods: []metrics.MethodStats{{Method: "x"}}})), "\n") {
			t.Fatalf("a label value changed the line count")
		}
	})
}
