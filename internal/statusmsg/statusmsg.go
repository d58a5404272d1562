// Package statusmsg bounds the message of a status where it crosses the
// wire: native TRAILERS, grpc-message, Connect's JSON error. A handler's
// message may repeat request data of any size (a name, a path); a peer
// keeps a bounded copy and a stock gRPC client does not refuse the header
// as too large.
package statusmsg

import "unicode/utf8"

// Max is the longest message sent, in bytes.
const Max = 1024

// marker ends a message that was cut.
const marker = "... (truncated)"

// Bound returns msg, cut to at most Max bytes (at a UTF-8 boundary, ending
// with "... (truncated)") if it is longer.
func Bound(msg string) string {
	if len(msg) <= Max {
		return msg
	}
	n := Max - len(marker)
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + marker
}
