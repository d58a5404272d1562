package wire_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"github.com/warrenipc/warren/wire"
)

var _ net.Error = (*wire.ConnError)(nil)

func TestConnError(t *testing.T) {
	deadline := &net.OpError{Op: "read", Net: "unix", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		err                *wire.ConnError
		text               string
		timeout, temporary bool
	}{
		{&wire.ConnError{Err: io.EOF}, "warren: connection lost: EOF", false, true},
		{&wire.ConnError{Err: deadline}, "warren: connection lost: read unix: i/o timeout", true, true},
		{&wire.ConnError{Op: "read", Err: io.ErrUnexpectedEOF},
			"warren: stream: read: connection closed without an end-of-stream marker: unexpected EOF", false, false},
		{&wire.ConnError{Op: "write", Partial: true, Err: errors.New("warren: broken")},
			"warren: stream: write: connection lost in the middle of a message: broken", false, false},
		{&wire.ConnError{Op: "read", Err: deadline}, "warren: stream: read: read unix: i/o timeout", true, true},
	} {
		if got := tc.err.Error(); got != tc.text {
			t.Errorf("Error() = %q, want %q", got, tc.text)
		}
		if tc.err.Timeout() != tc.timeout || tc.err.Temporary() != tc.temporary {
			t.Errorf("%q: Timeout %v, Temporary %v", tc.text, tc.err.Timeout(), tc.err.Temporary())
		}
		if !errors.Is(tc.err, tc.err.Err) {
			t.Errorf("%q does not unwrap to its cause", tc.text)
		}
	}
}

func TestGoAwayError(t *testing.T) {
	if got := (&wire.GoAwayError{Code: 14}).Error(); got != "warren: peer is going away" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&wire.GoAwayError{Code: 8, Message: "too many"}).Error(); got != "warren: peer is going away: too many" {
		t.Errorf("Error() = %q", got)
	}
}

func TestCodeString(t *testing.T) {
	for c, want := range map[wire.Code]string{0: "ok", 5: "not_found", 16: "unauthenticated", 17: "code(17)"} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", uint32(c), got, want)
		}
	}
}
