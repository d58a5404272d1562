package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// column is one column of a scenario's table; it is shown when any row has
// a value for it, so every scenario (including ones added later) gets the
// columns its rows fill.
type column struct {
	head string
	has  func(Row) bool
	cell func(Row) string
}

var columns = []column{
	{"transport", func(r Row) bool { return r.Transport != "" }, func(r Row) string { return r.Transport }},
	{"payload", func(r Row) bool { return r.PayloadBytes > 0 }, func(r Row) string { return Size(r.PayloadBytes) }},
	{"system", func(Row) bool { return true }, func(r Row) string { return r.System }},
	{"callers", func(r Row) bool { return r.Concurrency > 0 }, func(r Row) string { return strconv.Itoa(r.Concurrency) }},
	{"conns", func(r Row) bool { return r.Conns > 0 }, func(r Row) string { return strconv.Itoa(r.Conns) }},
	{"calls/s [min-max]", func(r Row) bool { return r.RPS > 0 }, func(r Row) string {
		return fmt.Sprintf("%s [%s-%s]", Sig3(r.RPS), Sig3(r.RPSMin), Sig3(r.RPSMax))
	}},
	{"GB/s [min-max]", func(r Row) bool { return r.GBps > 0 }, func(r Row) string {
		return fmt.Sprintf("%.2f [%.2f-%.2f]", r.GBps, r.GBpsMin, r.GBpsMax)
	}},
	{"mean µs", func(r Row) bool { return r.MeanUS > 0 }, func(r Row) string { return micros(r.MeanUS) }},
	{"p50 µs", func(r Row) bool { return r.P50US > 0 }, func(r Row) string { return micros(r.P50US) }},
	{"p99 µs", func(r Row) bool { return r.P99US > 0 }, func(r Row) string { return micros(r.P99US) }},
	{"min µs", func(r Row) bool { return r.MinUS > 0 }, func(r Row) string { return micros(r.MinUS) }},
	{"max µs", func(r Row) bool { return r.MaxUS > 0 }, func(r Row) string { return micros(r.MaxUS) }},
	{"allocs/call", func(r Row) bool { return r.AllocsPerCall != nil }, func(r Row) string { return allocs(r.AllocsPerCall) }},
	{"B/call", func(r Row) bool { return r.BytesPerCall != nil }, func(r Row) string {
		if r.BytesPerCall == nil {
			return ""
		}
		return Sig3(*r.BytesPerCall)
	}},
	{"server mode", func(r Row) bool { return r.Mode == "goroutine" || r.Mode == "eventloop" }, func(r Row) string { return r.Mode }},
	{"server B/conn", func(r Row) bool { return r.ServerBytesPerConn != 0 }, func(r Row) string { return Sig3(r.ServerBytesPerConn) }},
	{"kernel B/conn", func(r Row) bool { return r.KernelBytesPerConn != 0 }, func(r Row) string { return Sig3(r.KernelBytesPerConn) }},
	{"note", func(r Row) bool { return r.Note != "" }, func(r Row) string { return r.Note }},
}

// Table writes rows (normally one scenario's) as a markdown table, in the
// order given, with a last column comparing warren to each other system in
// the same configuration: "warren/grpc 2.10x" means warren made 2.1 times
// the calls per second (or GB/s) of gRPC. Where there is no warren row (the
// raw-socket scenarios), TCP rows are compared with unix-socket rows.
func Table(w io.Writer, rows []Row) error {
	var cols []column
	for _, c := range columns {
		for _, r := range rows {
			if c.has(r) {
				cols = append(cols, c)
				break
			}
		}
	}
	ratio := make([]string, len(rows))
	anyRatio := false
	for i, r := range rows {
		if ratio[i] = Ratio(rows, r); ratio[i] != "" {
			anyRatio = true
		}
	}
	var b strings.Builder
	head := []string{}
	for _, c := range cols {
		head = append(head, c.head)
	}
	if anyRatio {
		head = append(head, "ratio")
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for i, r := range rows {
		cells := []string{}
		for _, c := range cols {
			cells = append(cells, c.cell(r))
		}
		if anyRatio {
			cells = append(cells, ratio[i])
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Ratio compares r with warren's row of the same configuration in rows
// (or, for a raw TCP row with no warren, with the raw unix row), by calls
// per second or GB/s. It returns "" when there is nothing to compare.
func Ratio(rows []Row, r Row) string {
	same := func(o Row) bool {
		return o.Scenario == r.Scenario && o.PayloadBytes == r.PayloadBytes && o.Concurrency == r.Concurrency && o.Mode == r.Mode
	}
	for _, o := range rows {
		if r.System != "warren" && o.System == "warren" && same(o) && o.Transport == r.Transport {
			return ratioOf("warren/"+r.System, o, r)
		}
	}
	if r.Transport == "tcp" {
		for _, o := range rows {
			if o.System == r.System && o.Transport == "unix" && same(o) {
				return ratioOf("unix/tcp", o, r)
			}
		}
	}
	return ""
}

func ratioOf(label string, num, den Row) string {
	switch {
	case num.RPS > 0 && den.RPS > 0:
		return fmt.Sprintf("%s %.2fx", label, num.RPS/den.RPS)
	case num.GBps > 0 && den.GBps > 0:
		return fmt.Sprintf("%s %.2fx", label, num.GBps/den.GBps)
	}
	return ""
}

// Size formats a byte count as the payloads are named: 1 KiB, 100 KiB,
// 1000 KiB (1,024,000 bytes), 16 MiB, 128 B.
func Size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return Commas(int64(n)) + " B"
}

// Sig3 rounds v to three significant digits and writes it with thousands
// separators: 103,456 -> "103,000", 6,574 -> "6,570", 1.234 -> "1.23".
func Sig3(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	digits := int(math.Floor(math.Log10(math.Abs(v)))) + 1
	if digits >= 3 {
		p := math.Pow(10, float64(digits-3))
		return Commas(int64(math.Round(v/p) * p))
	}
	return strconv.FormatFloat(v, 'f', 3-digits, 64)
}

// Commas writes n with thousands separators.
func Commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func micros(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return Commas(int64(math.Round(v)))
}

func allocs(v *float64) string {
	switch {
	case v == nil:
		return ""
	case *v < 10:
		return strconv.FormatFloat(*v, 'f', 2, 64)
	}
	return Sig3(*v)
}
