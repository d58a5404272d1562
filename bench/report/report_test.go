package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sampleRows() []Row {
	var rows []Row
	for _, sys := range []string{"warren", "grpc", "drpc"} {
		for i, size := range []int{1024, 10240, 102400} {
			rps := float64(100000 / (i + 1))
			if sys != "warren" {
				rps /= 2
			}
			r := Row{System: sys, Scenario: "unary", Transport: "unix", Mode: "separate", PayloadBytes: size,
				Concurrency: 16, Conns: 1, Calls: 1000, RPS: rps, RPSMin: rps * 0.9, RPSMax: rps * 1.1,
				MeanUS: 10, P50US: 9, P99US: 30, MinUS: 5, MaxUS: 100,
				AllocsPerCall: Float(1), BytesPerCall: Float(100), Reps: 3}
			if sys == "drpc" {
				r.Conns = 16
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// TestJSONShape checks the field names of -json and that fields that do
// not apply are omitted, while a measured zero allocation count is kept.
func TestJSONShape(t *testing.T) {
	f := &File{
		Machine: Machine{Cores: 2, GoVersion: "go1.26", Modules: map[string]string{"google.golang.org/grpc": "v1"}},
		Rows: []Row{
			sampleRows()[0],
			{System: "raw", Scenario: "rawtput", Transport: "tcp", Mode: "separate", PayloadBytes: 65536, GBps: 2.5, GBpsMin: 2, GBpsMax: 3, Reps: 3},
			{System: "raw", Scenario: "rawlat", Transport: "unix", PayloadBytes: 128, Calls: 10, RPS: 1, P50US: 1, AllocsPerCall: Float(0), BytesPerCall: Float(0)},
		},
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, f); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Machine map[string]any   `json:"machine"`
		Rows    []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"cores", "go_version", "modules", "date"} {
		if _, ok := got.Machine[k]; !ok {
			t.Errorf("machine has no %q: %v", k, got.Machine)
		}
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	want := []string{"allocs_per_call", "bytes_per_call", "calls", "concurrency", "conns", "max_us", "mean_us", "min_us",
		"mode", "p50_us", "p99_us", "payload_bytes", "reps", "rps", "rps_max", "rps_min", "scenario", "system", "transport"}
	if k := keys(got.Rows[0]); !slices.Equal(k, want) {
		t.Errorf("unary row keys:\n got %v\nwant %v", k, want)
	}
	want = []string{"gbps", "gbps_max", "gbps_min", "mode", "payload_bytes", "reps", "scenario", "system", "transport"}
	if k := keys(got.Rows[1]); !slices.Equal(k, want) {
		t.Errorf("rawtput row keys:\n got %v\nwant %v", k, want)
	}
	if v, ok := got.Rows[2]["allocs_per_call"]; !ok || v != 0.0 {
		t.Errorf("a measured zero allocs_per_call is %v, %v; want 0 written", v, ok)
	}
	if got.Rows[0]["payload_bytes"] != 1024.0 || got.Rows[0]["system"] != "warren" {
		t.Errorf("row 0 = %v", got.Rows[0])
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := Table(&buf, sampleRows()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+9 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"| transport | payload | system | callers | conns | calls/s [min-max] |", "ratio |",
		"| unix | 1 KiB | warren | 16 | 1 | 100,000 [90,000-110,000] |", "warren/grpc 2.00x", "| 16 |", "| 100 KiB | drpc |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "GB/s") {
		t.Errorf("table has a GB/s column but no row has GB/s:\n%s", out)
	}
	// Raw rows with no warren compare TCP with unix.
	buf.Reset()
	Table(&buf, []Row{
		{System: "raw", Scenario: "rawtput", Transport: "unix", PayloadBytes: 65536, GBps: 4},
		{System: "raw", Scenario: "rawtput", Transport: "tcp", PayloadBytes: 65536, GBps: 2},
	})
	if !strings.Contains(buf.String(), "unix/tcp 2.00x") {
		t.Errorf("raw table:\n%s", buf.String())
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{103456, "103,000"}, {6574, "6,570"}, {610.4, "610"}, {1.234, "1.23"}, {12.34, "12.3"}, {1234567, "1,230,000"}} {
		if got := Sig3(c.v); got != c.want {
			t.Errorf("Sig3(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int
		want string
	}{{128, "128 B"}, {1024, "1 KiB"}, {102400, "100 KiB"}, {1024000, "1000 KiB"}, {16 << 20, "16 MiB"}, {1000, "1,000 B"}} {
		if got := Size(c.n); got != c.want {
			t.Errorf("Size(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// TestSVG checks that the chart is well-formed XML with one series per
// system, in order, and axes, labels and a legend.
func TestSVG(t *testing.T) {
	var buf bytes.Buffer
	c := Chart{Title: "Unary <echo> & more", Subtitle: "test", Rows: sampleRows(), Order: []string{"warren", "grpc", "ttrpc", "drpc"}}
	if err := c.SVG(&buf); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&buf)
	var series []string
	var texts []string
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			inText = el.Name.Local == "text"
			if el.Name.Local == "g" {
				for _, a := range el.Attr {
					if a.Name.Local == "data-system" {
						series = append(series, a.Value)
					}
				}
			}
		case xml.CharData:
			if inText {
				texts = append(texts, string(el))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if want := []string{"warren", "grpc", "drpc"}; !slices.Equal(series, want) {
		t.Errorf("series %v, want %v", series, want)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"Unary <echo> & more", "1 KiB", "100 KiB", "payload size", "calls per second", "drpc (16 conns)", "100k", "10k"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG texts lack %q: %s", want, all)
		}
	}
	// An empty chart is still a document.
	buf.Reset()
	if err := (Chart{Title: "empty"}).SVG(&buf); err != nil || xml.Unmarshal(buf.Bytes(), new(struct{})) != nil {
		t.Errorf("empty chart: %v\n%s", err, buf.String())
	}
}
