package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCodeNames(t *testing.T) {
	for c := OK; c <= Unauthenticated; c++ {
		got, ok := ParseCode(c.String())
		if !ok || got != c {
			t.Errorf("ParseCode(%q) = %v, %v; want %v", c.String(), got, ok, c)
		}
	}
	if s := Code(99).String(); s != "code(99)" {
		t.Errorf("Code(99).String() = %q", s)
	}
	if _, ok := ParseCode("nope"); ok {
		t.Error("ParseCode accepted an unknown name")
	}
}

func TestFromError(t *testing.T) {
	tests := []struct {
		err  error
		want Code
	}{
		{nil, OK},
		{New(NotFound, "x"), NotFound},
		{fmt.Errorf("wrapped: %w", New(Internal, "x")), Internal},
		{context.Canceled, Canceled},
		{context.DeadlineExceeded, DeadlineExceeded},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), DeadlineExceeded},
		{errors.New("plain"), Unknown},
	}
	for _, tt := range tests {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if FromError(nil) != nil {
		t.Error("FromError(nil) != nil")
	}
}

func TestIs(t *testing.T) {
	err := Errorf(PermissionDenied, "uid %d", 7)
	if !errors.Is(err, New(PermissionDenied, "")) {
		t.Error("Is with empty message should match on code")
	}
	if errors.Is(err, New(PermissionDenied, "other")) {
		t.Error("Is with a different message matched")
	}
	if errors.Is(err, New(NotFound, "")) {
		t.Error("Is matched a different code")
	}
	if got := err.Error(); got != "warren: permission_denied: uid 7" {
		t.Errorf("Error() = %q", got)
	}
}
