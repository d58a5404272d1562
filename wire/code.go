package wire

import "strconv"

// Code is a status code as TRAILERS and GOAWAY carry it, numbered as gRPC's
// codes (PROTOCOL.md, "Status codes"). Package status names the codes
// (status.Code is this type) and carries them as Go errors.
type Code uint32

var codeNames = [...]string{
	"ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded",
	"not_found", "already_exists", "permission_denied", "resource_exhausted",
	"failed_precondition", "aborted", "out_of_range", "unimplemented",
	"internal", "unavailable", "data_loss", "unauthenticated",
}

// String returns the code's name in snake case, as the Connect protocol
// spells it ("not_found"), or "code(N)" for a code without a name.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code(" + strconv.FormatUint(uint64(c), 10) + ")"
}
