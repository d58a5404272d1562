//go:build !linux

package shm

import (
	"errors"
	"net"
)

// Seals is 0 where memfd does not exist.
const Seals = 0

var (
	ErrRefused     = errors.New("warren: shared message refused")
	ErrDescriptors = errors.New("warren: descriptors")
	errNoMemfd     = errors.New("warren: no memfd on this system")
)

// Conn and Queue are never made where descriptors are not passed (Wrap
// returns nil).
type Conn struct {
	net.Conn
	Queue *Queue
}

type Queue struct{}

func NewQueue(perRead, max int) *Queue           { return nil }
func OOBSize(perRead int) int                    { return 0 }
func (q *Queue) Add(oob []byte, flags int) error { return ErrDescriptors }
func (q *Queue) Err() error                      { return ErrDescriptors }
func (q *Queue) Close()                          {}

func Wrap(c net.Conn, perRead, max int) *Conn                   { return nil }
func (q *Queue) Take(n int) ([]int, error)                      { return nil, ErrDescriptors }
func (q *Queue) Queued() int                                    { return 0 }
func (c *Conn) WriteFiles(b []byte, fds []int) (int, error)     { return 0, ErrDescriptors }
func NewSealed(msg []byte) (int, error)                         { return -1, errNoMemfd }
func Map(fd int, length uint64, populate bool) ([]byte, error)  { return nil, errNoMemfd }
func Dup(fd int) (int, error)                                   { return -1, errNoMemfd }
func Unmap(b []byte)                                            {}
func NewBuffer(n int) ([]byte, error)                           { return nil, errNoMemfd }
func Open(fd int, length uint64, populate bool) ([]byte, error) { return nil, errNoMemfd }
func Release(b []byte) bool                                     { return false }
func Sendable(msg []byte) (int, bool)                           { return -1, false }
func CloseAll(fds []int)                                        {}
