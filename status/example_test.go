package status_test

import (
	"errors"
	"fmt"

	"github.com/warrenipc/warren/status"
)

func Example() {
	err := fmt.Errorf("loading counter: %w", status.Errorf(status.NotFound, "counter %q", "a"))
	fmt.Println(status.CodeOf(err))
	fmt.Println(errors.Is(err, status.New(status.NotFound, "")))
	fmt.Println(status.FromError(err).Message)
	// Output:
	// not_found
	// true
	// counter "a"
}
