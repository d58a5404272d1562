//go:build !unix

package rpc

import (
	"os"

	"github.com/warrenipc/warren/internal/mux"
)

func dupFile(f *os.File) (int, error) { return -1, mux.ErrNoFiles }
func closeFDs(fds []int)              {}
