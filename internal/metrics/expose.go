package metrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/warrenipc/warren/status"
)

// ContentType is the type of the text exposition format 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// ServeHTTP answers a scrape with the registry's series (AppendText).
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s := r.Snapshot()
	b := AppendText(nil, &s)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	if req.Method == http.MethodGet {
		w.Write(b)
	}
}

// AppendText appends s in the Prometheus text format 0.0.4 to b.
func AppendText(b []byte, s *Snapshot) []byte {
	e := &enc{b: b}
	e.family("warren_server_calls_total", "counter", "Calls ended, or refused before they ran, by method and status code.")
	for i := range s.Methods {
		m := &s.Methods[i]
		for c, n := range m.Codes {
			if n > 0 || c == int(status.OK) {
				e.sample("warren_server_calls_total", float64(n), "method", m.Method, "code", status.Code(c).String())
			}
		}
	}
	e.family("warren_server_call_duration_seconds", "histogram", "Time from a call's start to its handler's return, by method.")
	for i := range s.Methods {
		m := &s.Methods[i]
		var cum, total uint64
		for _, n := range m.Buckets {
			total += n
		}
		for j, n := range m.Buckets {
			cum += n
			le := "+Inf"
			if j < len(Bounds) {
				le = strconv.FormatFloat(Bounds[j].Seconds(), 'g', -1, 64)
			}
			e.sample("warren_server_call_duration_seconds_bucket", float64(cum), "method", m.Method, "le", le)
		}
		e.sample("warren_server_call_duration_seconds_sum", m.Sum.Seconds(), "method", m.Method)
		e.sample("warren_server_call_duration_seconds_count", float64(total), "method", m.Method)
	}
	e.perMethod(s, "warren_server_calls_in_flight", "gauge", "Calls running, by method.", func(m *MethodStats) float64 { return float64(m.InFlight) })
	e.perMethod(s, "warren_server_received_message_bytes_total", "counter", "Bytes of unary request messages, by method.", func(m *MethodStats) float64 { return float64(m.BytesIn) })
	e.perMethod(s, "warren_server_sent_message_bytes_total", "counter", "Bytes of unary reply messages, by method.", func(m *MethodStats) float64 { return float64(m.BytesOut) })

	e.family("warren_server_connections", "gauge", "Open connections, by transport and engine.")
	for _, c := range s.Conns {
		e.sample("warren_server_connections", float64(c.N), "transport", c.Transport, "engine", c.Engine)
	}
	e.family("warren_server_connections_by_uid", "gauge", "Open connections, by peer uid (unix sockets; the 64 uids with most).")
	for _, c := range s.ConnsByUID {
		e.sample("warren_server_connections_by_uid", float64(c.N), "uid", strconv.FormatUint(uint64(c.UID), 10))
	}
	e.reasons("warren_server_connections_refused_total", "Connections refused, by reason.", s.ConnsRefused)
	e.reasons("warren_server_calls_refused_total", "Calls refused before they ran, by reason.", s.CallsRefused)
	e.reasons("warren_server_connections_shed_total", "Connections closed to make room, by reason.", s.Shed)
	e.gauge("warren_server_files_in_flight", "gauge", "Descriptors received and not yet closed or handed on.", float64(s.Files))
	e.gauge("warren_server_shared_bytes_in_flight", "gauge", "Bytes of shared messages received and held mapped.", float64(s.SharedBytes))
	e.gauge("warren_eventloop_loops", "gauge", "Event loops running.", float64(s.Loop.Loops))
	e.gauge("warren_eventloop_hibernations_total", "counter", "Idle sessions dropped by the event loop.", float64(s.Loop.Hibernations))
	e.gauge("warren_eventloop_wakes_total", "counter", "Sessions rebuilt for a hibernating connection that sent something.", float64(s.Loop.Wakes))
	e.gauge("warren_eventloop_takeovers_total", "counter", "Loops taken over from a call that ran too long inline.", float64(s.Loop.Takeovers))
	return e.b
}

type enc struct{ b []byte }

func (e *enc) family(name, typ, help string) {
	e.b = append(e.b, "# HELP "...)
	e.b = append(e.b, name...)
	e.b = append(e.b, ' ')
	e.b = append(e.b, help...) // constant text: nothing to escape
	e.b = append(e.b, "\n# TYPE "...)
	e.b = append(e.b, name...)
	e.b = append(e.b, ' ')
	e.b = append(e.b, typ...)
	e.b = append(e.b, '\n')
}

// sample appends one line; labels are name, value pairs.
func (e *enc) sample(name string, v float64, labels ...string) {
	e.b = append(e.b, name...)
	if len(labels) > 0 {
		e.b = append(e.b, '{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = append(e.b, labels[i]...)
			e.b = append(e.b, '=', '"')
			e.b = AppendLabelValue(e.b, labels[i+1])
			e.b = append(e.b, '"')
		}
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ' ')
	e.b = strconv.AppendFloat(e.b, v, 'g', -1, 64)
	e.b = append(e.b, '\n')
}

func (e *enc) perMethod(s *Snapshot, name, typ, help string, f func(*MethodStats) float64) {
	e.family(name, typ, help)
	for i := range s.Methods {
		e.sample(name, f(&s.Methods[i]), "method", s.Methods[i].Method)
	}
}

func (e *enc) reasons(name, help string, rs []ReasonCount) {
	e.family(name, "counter", help)
	for _, r := range rs {
		e.sample(name, float64(r.N), "reason", r.Reason)
	}
}

func (e *enc) gauge(name, typ, help string, v float64) {
	e.family(name, typ, help)
	e.sample(name, v)
}

// AppendLabelValue appends v escaped for a label value: backslash, double
// quote and line feed as \\, \" and \n. Invalid UTF-8 is replaced (the
// format is UTF-8).
func AppendLabelValue(b []byte, v string) []byte {
	v = strings.ToValidUTF8(v, "\uFFFD")
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return b
}
