package metrics

import "strings"

// ConnReason is why a connection was refused: a fixed set, so that a
// peer cannot make series.
type ConnReason uint8

// The reasons a connection is refused.
const (
	ConnPolicy          ConnReason = iota // the server's policy
	ConnMaxConns                          // MaxConns
	ConnMaxConnsPerUID                    // MaxConnsPerUID
	ConnMaxConnsPerPID                    // MaxConnsPerPID
	ConnHandshakes                        // too many connections in their handshake
	ConnShuttingDown                      // a drain
	ConnHandshakeFailed                   // TLS or WebSocket handshake failed
	numConnReasons
)

var connReasonNames = [numConnReasons]string{
	"policy", "max_conns", "max_conns_per_uid", "max_conns_per_pid",
	"handshakes", "shutting_down", "handshake_failed",
}

func (r ConnReason) String() string { return connReasonNames[r] }

// ConnReasonOf classifies one of admit's refusal messages; a message it
// does not know is the policy's (its text is the policy's error).
func ConnReasonOf(msg string) ConnReason {
	switch {
	case strings.HasPrefix(msg, "too many connections from uid"):
		return ConnMaxConnsPerUID
	case strings.HasPrefix(msg, "too many connections from pid"):
		return ConnMaxConnsPerPID
	case strings.HasPrefix(msg, "too many connections (limit"):
		return ConnMaxConns
	case strings.HasPrefix(msg, "too many connections in their handshake"):
		return ConnHandshakes
	case msg == "server is shutting down":
		return ConnShuttingDown
	}
	return ConnPolicy
}

// CallReason is why a call was refused before it ran.
type CallReason uint8

// The reasons a call is refused.
const (
	CallUnknownMethod   CallReason = iota // no such method
	CallMethodPolicy                      // the method's policy (WithPolicy)
	CallBadCodec                          // a codec the server does not have
	CallMaxCallsPerConn                   // MaxCallsPerConn
	CallMaxCalls                          // MaxCalls
	CallRate                              // CallRate
	CallNoToken                           // TokenAuth: no or a wrong token
	numCallReasons
)

var callReasonNames = [numCallReasons]string{
	"unknown_method", "method_policy", "bad_codec", "max_calls_per_conn",
	"max_calls", "call_rate", "token",
}

func (r CallReason) String() string { return callReasonNames[r] }

// ShedReason is why a connection that was admitted, or waiting to be,
// was closed to make room.
type ShedReason uint8

// The reasons a connection is shed.
const (
	ShedIdle        ShedReason = iota // idle, for another of the same user or process
	ShedDescriptors                   // pending at accept, out of descriptors
	numShedReasons
)

var shedReasonNames = [numShedReasons]string{"idle", "descriptors"}

func (r ShedReason) String() string { return shedReasonNames[r] }
