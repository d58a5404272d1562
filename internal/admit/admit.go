// Package admit decides the fate of a server's connections, for every
// engine that serves them (a goroutine per connection, the event loop, the
// HTTP bridge): the policy, the limits on open connections (in all, per
// uid, per process), idle shedding at those limits, the caps on
// connections in their handshake and on refused ones still open, the
// per-peer call rate limiters, drain, and the refusal log.
//
// A Core counts every admitted connection once, whichever engine serves
// it; an engine keeps no counts of its own. Each admitted connection is a
// Conn, which the engine holds (by value, in the record it keeps for the
// connection) from Admit to Release.
package admit

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/refusallog"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Bounds on what peers that are not (yet) served can hold. They are per
// peer key (PeerKey): a uid for unix peers, an IP address for TCP peers.
const (
	// MaxHandshakesPerPeer bounds the connections of one peer that have
	// not completed their handshake: a client that connects and says
	// nothing holds a descriptor until the handshake timeout, and no more
	// than this many at once.
	MaxHandshakesPerPeer = 256
	// maxRefusingPerPeer and maxRefusing bound the refused connections
	// still open while their refusal is delivered (RefuseLinger); beyond
	// them a refused connection gets the same write and is closed at once.
	maxRefusingPerPeer = 64
	maxRefusing        = 256
	// RefuseLinger is how long a refused connection stays open, its write
	// side shut, so that the client can send its preface and read the
	// reason; nothing is read from it.
	RefuseLinger = 500 * time.Millisecond
	// ShedIdleAfter is how long a connection must have been without calls
	// before it is shed to make room for a new one.
	ShedIdleAfter = time.Second
)

// Refusal messages that clients and tests match.
const (
	// ShuttingDown refuses a connection that arrives during a drain.
	ShuttingDown = "server is shutting down"
	// ShedMessage is the GOAWAY message of a shed connection.
	ShedMessage = "idle connection closed to make room for another of the same user"
	// TooManyHandshakes refuses a connection past MaxHandshakesPerPeer.
	TooManyHandshakes = "too many connections in their handshake"
)

// Busy is the activity stamp (Conn.SetActive) of a connection that must
// not be shed: one with calls in progress, or the event loop's awake ones.
const Busy = math.MaxUint32

// epoch is the origin of Now's stamps.
var epoch = time.Now()

// Now returns the current activity stamp: milliseconds since the process
// started, modulo 2^32 (it wraps every 49.7 days; idle times are computed
// modulo that, so a connection idle for longer may look idle for less).
func Now() uint32 {
	t := uint32(time.Since(epoch) / time.Millisecond)
	if t == Busy {
		t--
	}
	return t
}

// Limits are a Core's bounds, resolved (no zero defaults): a bound of
// math.MaxInt is none, a CallRate of rate.Inf no rate limit.
type Limits struct {
	MaxConns       int
	MaxConnsPerUID int
	MaxConnsPerPID int
	CallRate       float64
	CallBurst      int
	// Metrics, if not nil, counts refusals, sheds and connections
	// (metrics.go).
	Metrics *metrics.Registry
}

// Engine is what the core asks of an engine that serves connections: to
// shed one of them, which the core has just uncounted. Shed must not block
// or take a lock held around Admit: it is called right after Admit's
// decision, on the admitting goroutine.
type Engine struct {
	shed func(c *Conn, id int32)
	idx  uint16 // in Core.engines
	// Loop marks the event loop's engines, for the metrics; set it before
	// the first Admit.
	Loop  bool
	conns [numTransports]int // admitted, by transport; Core.mu
}

// Conn is one connection's admission. An engine keeps it by value where it
// keeps the connection's record (its address must not change from Admit
// to Release), and records its activity (Touch, SetActive) before Admit.
// It is 32 bytes: the event loop keeps one per idle connection.
type Conn struct {
	lim *Limiter
	// UID and PID are the peer's, from the kernel (-1 and 0 without
	// credentials); Admit sets them.
	UID, PID int32
	// ID is the engine's name for the connection (the event loop's file
	// descriptor), for its Engine's shed.
	ID     int32
	idx    int32         // state: 0 not admitted, 1 admitted without uid, 2+i at byUID[uid][i], -1 shed
	active atomic.Uint32 // Busy, or the stamp (Now) of the last call started
	eng    uint16        // the Engine's index in Core.engines
	tr     uint8         // transport class (metrics.go)
}

// Limiter returns the call rate limiter of c's peer (nil before Admit).
func (c *Conn) Limiter() *Limiter { return c.lim }

// Touch records that a call started on c now: c may be shed once it has
// been idle for ShedIdleAfter.
func (c *Conn) Touch() { c.active.Store(Now()) }

// SetActive records c's activity: Busy while it has calls in progress (or
// must not be shed for another reason), else the stamp (Now) of the last
// call started on it.
func (c *Conn) SetActive(t uint32) { c.active.Store(t) }

// Active returns what Touch or SetActive recorded last.
func (c *Conn) Active() uint32 { return c.active.Load() }

// Limiter is the call rate limiter of one peer (a uid, or an IP address),
// shared by its connections.
type Limiter struct {
	lim  *rate.Limiter
	key  string
	refs int
}

// Allow reports whether a call may start now under the peer's rate.
func (l *Limiter) Allow() bool { return l.lim.Allow() }

// Core decides and counts the admission of a server's connections. Its
// methods are safe for concurrent use.
type Core struct {
	lim      Limits
	policy   peer.Policy
	refusals *refusallog.Log // connections refused
	sheds    *refusallog.Log // idle connections shed
	limits   *refusallog.Log // calls refused by a limit or a method's policy
	logger   func() *slog.Logger

	mu          sync.Mutex // protects following
	conns       int
	byUID       map[int32][]*Conn
	perPID      map[int32]int
	limiters    map[string]*Limiter
	draining    bool
	handshaking map[string]*hsPeer
	refusing    map[string]int
	lingering   map[net.Conn]struct{}
	closed      bool
	engines     []*Engine // by Engine.idx; nil: a free slot

	rejected atomic.Uint64
	shed     atomic.Uint64
}

// New returns a Core with the limits lim and the server's policy (nil
// admits every peer), logging refusals to the logger logger returns.
func New(lim Limits, policy peer.Policy, logger func() *slog.Logger) *Core {
	return &Core{
		lim: lim, policy: policy,
		refusals: refusallog.New(logger, "warren: connection refused", 0),
		sheds:    refusallog.New(logger, "warren: idle connection shed", 0),
		limits:   refusallog.New(logger, "warren: call refused", 0),
		logger:   logger,
		byUID:    map[int32][]*Conn{},
		perPID:   map[int32]int{},
		limiters: map[string]*Limiter{},
	}
}

// NewEngine registers an engine whose connections are shed by shed, given
// the Conn and its ID: send the connection a GOAWAY (status.Unavailable,
// ShedMessage) and close it shortly after. The Conn is uncounted already;
// the engine may reuse its memory at once, so shed reads none of its
// fields. An engine that stops serving calls RemoveEngine once it has
// released all its connections.
func (k *Core) NewEngine(shed func(c *Conn, id int32)) *Engine {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := &Engine{shed: shed}
	for i, x := range k.engines {
		if x == nil {
			e.idx = uint16(i)
			k.engines[i] = e
			return e
		}
	}
	if len(k.engines) > math.MaxUint16 {
		panic("admit: too many engines")
	}
	e.idx = uint16(len(k.engines))
	k.engines = append(k.engines, e)
	return e
}

// RemoveEngine frees e's slot, which a later NewEngine may take.
func (k *Core) RemoveEngine(e *Engine) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if int(e.idx) < len(k.engines) && k.engines[e.idx] == e {
		k.engines[e.idx] = nil
	}
}

// PeerKey names the peer whose connections count together under the
// handshake and refusal caps and in the refusal log.
func PeerKey(p *peer.Peer) string {
	switch {
	case p.HasCred:
		return "uid " + strconv.Itoa(p.UID)
	case p.RemoteAddr != nil:
		if ta, ok := p.RemoteAddr.(*net.TCPAddr); ok {
			return "ip " + ta.IP.String()
		}
		return "addr " + p.RemoteAddr.String()
	}
	return "unknown"
}

// limiterKey names the peer whose calls share a rate limiter.
func limiterKey(p *peer.Peer) string {
	if p.HasCred {
		return "uid:" + strconv.Itoa(p.UID)
	}
	if ta, ok := p.RemoteAddr.(*net.TCPAddr); ok {
		return "ip:" + ta.IP.String()
	}
	return "addr:" + fmt.Sprint(p.RemoteAddr)
}

// Authorize applies the server's policy to p.
func (k *Core) Authorize(p *peer.Peer) error { return peer.Authorize(k.policy, p) }

// Admit applies the policy, the drain and the connection limits to a new
// connection of p, served by eng, and counts it in c, shedding an idle
// connection of the same user (or process) if that makes room. A refusal
// is counted and logged, and returned with the status code to refuse with
// (PermissionDenied for the policy, Unavailable during a drain,
// ResourceExhausted for a limit); an empty reason admits. An admitted
// connection counts until Release.
func (k *Core) Admit(c *Conn, p *peer.Peer, eng *Engine) (string, status.Code) {
	if err := k.Authorize(p); err != nil {
		k.Refused(p, PeerKey(p), err.Error())
		return err.Error(), status.PermissionDenied
	}
	c.UID, c.PID, c.eng, c.tr = -1, 0, eng.idx, transportOf(p)
	if p.HasCred {
		c.UID, c.PID = int32(p.UID), int32(p.PID)
	}
	victim, eng, id, why := k.add(c, p)
	if victim != nil && eng != nil {
		eng.shed(victim, id)
		k.sheds.Refused(PeerKey(p), func() []any {
			return append(refusallog.PeerAttrs(p), slog.String("reason", "an idle connection of the same user or process closed to admit this one"))
		})
	}
	if why == "" {
		return "", status.OK
	}
	k.Refused(p, PeerKey(p), why)
	if why == ShuttingDown {
		return why, status.Unavailable // a drain, not a limit: the client may retry elsewhere
	}
	return why, status.ResourceExhausted
}

// add counts c, or says why not; victim is a connection shed to make
// room, with its engine and ID.
func (k *Core) add(c *Conn, p *peer.Peer) (victim *Conn, eng *Engine, id int32, why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.draining:
		return nil, nil, 0, ShuttingDown
	case k.conns >= k.lim.MaxConns:
		return nil, nil, 0, fmt.Sprintf("too many connections (limit %d)", k.lim.MaxConns)
	}
	if c.UID >= 0 {
		uidFull := len(k.byUID[c.UID]) >= k.lim.MaxConnsPerUID
		pidFull := c.PID > 0 && k.perPID[c.PID] >= k.lim.MaxConnsPerPID
		if uidFull || pidFull {
			if victim = k.shedIdleLocked(c.UID, c.PID, pidFull); victim == nil {
				if uidFull {
					return nil, nil, 0, fmt.Sprintf("too many connections from uid %d (limit %d)", c.UID, k.lim.MaxConnsPerUID)
				}
				return nil, nil, 0, fmt.Sprintf("too many connections from pid %d of uid %d (limit %d per process)", c.PID, c.UID, k.lim.MaxConnsPerPID)
			}
			eng, id = k.engines[victim.eng], victim.ID
		}
	}
	k.conns++
	k.engines[c.eng].conns[c.tr]++
	if c.UID >= 0 {
		list := k.byUID[c.UID]
		c.idx = int32(2 + len(list))
		k.byUID[c.UID] = append(list, c)
		if c.PID > 0 {
			k.perPID[c.PID]++
		}
	} else {
		c.idx = 1
	}
	key := limiterKey(p)
	l := k.limiters[key]
	if l == nil {
		l = &Limiter{lim: rate.NewLimiter(rate.Limit(k.lim.CallRate), k.lim.CallBurst), key: key}
		k.limiters[key] = l
	}
	l.refs++
	c.lim = l
	return victim, eng, id, ""
}

// Release uncounts c. It does nothing if c is not counted (never admitted,
// released, or shed).
func (k *Core) Release(c *Conn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c.idx > 0 {
		k.removeLocked(c)
		c.idx = 0
	}
}

// removeLocked uncounts c, which is counted. k.mu is held.
func (k *Core) removeLocked(c *Conn) {
	k.conns--
	if e := k.engines[c.eng]; e != nil {
		e.conns[c.tr]--
	}
	if c.idx >= 2 {
		list := k.byUID[c.UID]
		i, last := int(c.idx-2), len(list)-1
		list[i] = list[last]
		list[i].idx = int32(2 + i)
		list[last] = nil
		if last == 0 {
			delete(k.byUID, c.UID)
		} else {
			k.byUID[c.UID] = list[:last]
		}
		if c.PID > 0 {
			if k.perPID[c.PID]--; k.perPID[c.PID] <= 0 {
				delete(k.perPID, c.PID)
			}
		}
	}
	if l := c.lim; l != nil {
		if l.refs--; l.refs == 0 {
			delete(k.limiters, l.key)
		}
	}
}

// shedIdleLocked picks a connection of uid (of pid, if onlyPID) that has
// had no call for ShedIdleAfter, in the process with the most connections
// and then the longest idle, and uncounts it. k.mu is held.
func (k *Core) shedIdleLocked(uid, pid int32, onlyPID bool) *Conn {
	now, least := Now(), uint32(ShedIdleAfter/time.Millisecond)
	var victim *Conn
	var victimIdle uint32
	for _, c := range k.byUID[uid] {
		a := c.active.Load()
		idle := now - a // modulo 2^32
		if onlyPID && c.PID != pid || a == Busy || idle < least {
			continue
		}
		if victim == nil || k.perPID[c.PID] > k.perPID[victim.PID] ||
			k.perPID[c.PID] == k.perPID[victim.PID] && idle > victimIdle {
			victim, victimIdle = c, idle
		}
	}
	if victim == nil {
		return nil
	}
	k.removeLocked(victim)
	victim.idx = -1
	k.shed.Add(1)
	k.lim.Metrics.Shed(metrics.ShedIdle)
	return victim
}

// WasShed reports whether c was shed (and not admitted again since).
func (k *Core) WasShed(c *Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return c.idx == -1
}

// Drain refuses every connection from now on (ShuttingDown). The first
// call logs the drain with the connections then open.
func (k *Core) Drain() {
	k.mu.Lock()
	first, conns := !k.draining, k.conns
	k.draining = true
	k.mu.Unlock()
	if first && k.logger != nil {
		k.logger().Info("warren: draining", slog.Int("connections", conns), slog.String("reason", ShuttingDown))
	}
}

// Conns returns the connections counted.
func (k *Core) Conns() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.conns
}

// Rejected returns the connections refused so far.
func (k *Core) Rejected() uint64 { return k.rejected.Load() }

// Shed returns the connections shed so far.
func (k *Core) Shed() uint64 { return k.shed.Load() }

// Reject counts a connection refused without a log line (one whose
// handshake failed, or that an engine refused before Admit).
func (k *Core) Reject() {
	k.rejected.Add(1)
	k.lim.Metrics.ConnRefused(metrics.ConnHandshakeFailed)
}

// Refused counts a refused connection of p and logs it, as a summary once
// its peer (key) is refused repeatedly.
func (k *Core) Refused(p *peer.Peer, key, reason string) {
	k.rejected.Add(1)
	k.lim.Metrics.ConnRefused(metrics.ConnReasonOf(reason))
	k.refusals.Refused(key, func() []any {
		return append(refusallog.PeerAttrs(p), slog.String("reason", reason))
	})
}

// CallRefused logs a call of p refused by a limit (calls on the connection
// or the server, the call rate) or by its method's policy, as Refused logs
// connections: the first of each peer in an interval, then a summary.
func (k *Core) CallRefused(p *peer.Peer, reason string) {
	k.limits.Refused(PeerKey(p), func() []any {
		return append(refusallog.PeerAttrs(p), slog.String("reason", reason))
	})
}

// Handshake is one connection counted in its handshake (StartHandshake).
type Handshake struct {
	key   string
	pid   int32
	evict func(*Handshake)
	done  bool // ended, or evicted
}

// hsPeer is the connections of one peer key in their handshake, by
// process (pid; 0 without credentials), oldest first.
type hsPeer struct {
	n     int
	byPID map[int32][]*Handshake
}

// StartHandshake counts a connection of p (whose PeerKey is key) in its
// handshake and returns its count, to end with EndHandshake. If its peer
// has MaxHandshakesPerPeer already and p is a process (pid) holding fewer
// of them than another process of the peer, the oldest connection of the
// process holding the most is evicted to make room: uncounted, and evict
// (given with that connection's StartHandshake) called with its count and
// k's lock held, so evict must only close the connection or ask its
// engine to, and take no lock held around a call to k. Otherwise
// the connection is refused (counted and logged) and the result is nil.
func (k *Core) StartHandshake(key string, p *peer.Peer, evict func(*Handshake)) *Handshake {
	h := &Handshake{key: key, evict: evict}
	if p.HasCred {
		h.pid = int32(p.PID)
	}
	k.mu.Lock()
	hp := k.handshaking[key]
	if hp == nil {
		if k.handshaking == nil {
			k.handshaking = map[string]*hsPeer{}
		}
		hp = &hsPeer{byPID: map[int32][]*Handshake{}}
		k.handshaking[key] = hp
	}
	ok := hp.n < MaxHandshakesPerPeer
	if !ok && h.pid > 0 {
		var hog []*Handshake
		for pid, l := range hp.byPID {
			if pid > 0 && len(l) > len(hog) {
				hog = l
			}
		}
		if len(hog) > len(hp.byPID[h.pid])+1 {
			v := hog[0]
			k.endLocked(hp, v)
			v.evict(v)
			ok = true
		}
	}
	if ok {
		hp.n++
		hp.byPID[h.pid] = append(hp.byPID[h.pid], h)
	}
	k.mu.Unlock()
	if !ok {
		k.Refused(p, key, TooManyHandshakes)
		return nil
	}
	return h
}

// EndHandshake ends a count of StartHandshake; it does nothing for an
// evicted or ended one.
func (k *Core) EndHandshake(h *Handshake) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if hp := k.handshaking[h.key]; hp != nil && !h.done {
		k.endLocked(hp, h)
	}
}

// endLocked uncounts h, counted in hp. k.mu is held.
func (k *Core) endLocked(hp *hsPeer, h *Handshake) {
	h.done = true
	l := hp.byPID[h.pid]
	for i, x := range l {
		if x == h {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(hp.byPID, h.pid)
	} else {
		hp.byPID[h.pid] = l
	}
	if hp.n--; hp.n <= 0 {
		delete(k.handshaking, h.key)
	}
}

// Refuse delivers a refusal without reading a byte from conn: it writes
// the server's preface (settings st) and a GOAWAY with code and reason
// (PermissionDenied for the policy, Unavailable during a drain,
// ResourceExhausted for a limit) in one write that does not wait for room,
// shuts the write side and closes conn after RefuseLinger, so that a
// warren client can read the reason; any other client sees the connection
// close. Past the caps on refused connections open (per peer key and in
// all) it closes conn right after the write.
func (k *Core) Refuse(conn net.Conn, key string, st wire.Settings, reason string, code status.Code) {
	st.ShmRing = 0 // the GOAWAY goes on the socket
	msg := wire.AppendPreface(make([]byte, 0, 128+len(reason)), st.WithDefaults())
	msg = wire.AppendFrame(msg, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, uint32(code), reason))
	k.mu.Lock()
	ok := !k.closed && k.refusing[key] < maxRefusingPerPeer && len(k.lingering) < maxRefusing
	if ok {
		if k.refusing == nil {
			k.refusing = map[string]int{}
			k.lingering = map[net.Conn]struct{}{}
		}
		k.refusing[key]++
		k.lingering[conn] = struct{}{}
	}
	k.mu.Unlock()
	conn.SetWriteDeadline(time.Now().Add(RefuseLinger))
	conn.Write(msg)
	if !ok {
		conn.Close()
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	time.AfterFunc(RefuseLinger, func() {
		k.mu.Lock()
		_, open := k.lingering[conn]
		delete(k.lingering, conn)
		if k.refusing[key]--; k.refusing[key] <= 0 {
			delete(k.refusing, key)
		}
		k.mu.Unlock()
		if open {
			conn.Close()
		}
	})
}

// Close closes the refused connections still open and flushes the refusal
// log.
func (k *Core) Close() {
	k.mu.Lock()
	k.closed = true
	conns := k.lingering
	k.lingering = nil
	k.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	k.refusals.Close()
	k.sheds.Close()
	k.limits.Close()
}

// Work counts a connection's calls (the low 32 bits) and its handlers still
// running (the high 32 bits, in units of RunningOne) in one word, and the
// stamp (Now) of its last call. With Conn set, it keeps that Conn's
// activity for shedding: Busy while the word is not zero, else the stamp
// of the last call. An engine that marks its connections itself (the event
// loop: Busy while awake) leaves Conn nil.
type Work struct {
	Conn *Conn
	w    atomic.Int64
	last atomic.Uint32
}

// RunningOne is one running handler in Work's word.
const RunningOne = 1 << 32

// Add adds d (calls, or handlers times RunningOne) and returns the new word.
func (k *Work) Add(d int64) int64 {
	w := k.w.Add(d)
	k.worked(w, d)
	return w
}

// Load returns the word.
func (k *Work) Load() int64 { return k.w.Load() }

// Started records that a call started now.
func (k *Work) Started() { k.last.Store(Now()) }

// Last returns the stamp of the last call started.
func (k *Work) Last() uint32 { return k.last.Load() }

// Refused counts a refused call as activity, as one that ran.
func (k *Work) Refused() { k.worked(k.w.Load(), 0) }

// worked tells Conn, if the word w, just changed by d, went from or to
// zero.
func (k *Work) worked(w, d int64) {
	if k.Conn == nil || w != 0 && w != d {
		return
	}
	for {
		a := uint32(Busy)
		if w == 0 {
			a = k.last.Load()
		}
		k.Conn.SetActive(a)
		// Another goroutine may have changed the word from or to zero
		// and stored its view first: the last to store checks.
		w2 := k.w.Load()
		if (w2 == 0) == (w == 0) {
			return
		}
		w = w2
	}
}
