// Package refusallog logs refused peers as rate-limited summaries, so that
// a peer refused in a loop costs the server a few lines per interval, not
// one per attempt.
//
// The first refusal of each peer key (such as "uid 65534" or an IP address)
// in an interval is logged in full; later ones are counted, and at the end
// of the interval each key with more refusals gets one summary line with
// the count. At most MaxKeys keys are tracked per interval; the refusals
// of further keys are counted under "other".
package refusallog

import (
	"log/slog"
	"sync"
	"time"

	"github.com/warrenipc/warren/peer"
)

// DefaultInterval is the summary interval when New is given 0.
const DefaultInterval = 10 * time.Second

// MaxKeys bounds the keys tracked in one interval.
const MaxKeys = 256

// Log counts refusals and writes them to a logger. Its methods are safe for
// concurrent use. It starts no goroutine: a timer writes the summary.
type Log struct {
	interval time.Duration
	msg      string
	logger   func() *slog.Logger

	mu     sync.Mutex // protects following
	counts map[string]int
	other  int
	timer  *time.Timer
	closed bool
}

// New returns a Log that writes msg lines to the logger logger returns
// (called at each write, so that it may follow slog.Default()), with
// summaries every interval (0 means DefaultInterval).
func New(logger func() *slog.Logger, msg string, interval time.Duration) *Log {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Log{interval: interval, msg: msg, logger: logger}
}

// Refused records one refusal of the peer key. The first of its interval
// is logged at once, with the attribute peer (the key) and those attrs
// returns (called only then).
func (l *Log) Refused(key string, attrs func() []any) {
	l.mu.Lock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	n, known := l.counts[key]
	first := false
	switch {
	case known:
		l.counts[key] = n + 1
	case len(l.counts) >= MaxKeys:
		l.other++
	default:
		l.counts[key] = 0
		first = true
	}
	if l.timer == nil && !l.closed {
		l.timer = time.AfterFunc(l.interval, l.flush)
	}
	l.mu.Unlock()
	if first {
		l.logger().Warn(l.msg, append([]any{slog.String("peer", key)}, attrs()...)...)
	}
}

// flush writes the interval's summaries and starts a new interval.
func (l *Log) flush() {
	l.mu.Lock()
	counts, other := l.counts, l.other
	l.counts, l.other, l.timer = nil, 0, nil
	l.mu.Unlock()
	for key, n := range counts {
		if n > 0 {
			l.logger().Warn(l.msg+" (summary)", "peer", key, "more", n, "interval", l.interval)
		}
	}
	if other > 0 {
		l.logger().Warn(l.msg+" (summary)", "peer", "other", "more", other, "interval", l.interval)
	}
}

// Close writes the pending summaries and stops the timer.
func (l *Log) Close() {
	l.mu.Lock()
	l.closed = true
	t := l.timer
	l.mu.Unlock()
	if t != nil && t.Stop() {
		l.flush()
	}
}

// PeerAttrs returns the attributes of p for a record: network; uid, gid and
// pid when the kernel reported them; address, the peer's address when it
// has one (a unix client's is usually unnamed); cn, a TLS client
// certificate's common name.
func PeerAttrs(p *peer.Peer) []any {
	if p == nil {
		return nil
	}
	attrs := []any{slog.String("network", p.Network)}
	if p.HasCred {
		attrs = append(attrs, slog.Int("uid", p.UID), slog.Int("gid", p.GID), slog.Int("pid", p.PID))
	}
	if a := p.RemoteAddr; a != nil {
		if s := a.String(); s != "" && s != "@" {
			attrs = append(attrs, slog.String("address", s))
		}
	}
	if p.TLS != nil && len(p.TLS.PeerCertificates) > 0 {
		if cn := p.TLS.PeerCertificates[0].Subject.CommonName; cn != "" {
			attrs = append(attrs, slog.String("cn", cn))
		}
	}
	return attrs
}
