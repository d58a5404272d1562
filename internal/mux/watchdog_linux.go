package mux

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newTickSource returns a timerfd's ticks, or a time.Ticker's if no timerfd
// can be made.
func newTickSource() tickSource {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &timerTicks{}
	}
	f := os.NewFile(uintptr(fd), "warren-takeover-timer")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return &timerTicks{}
	}
	t := &timerfdTicks{f: f, rc: rc, fd: fd}
	t.readFn = t.readFd
	return t
}

// timerfdTicks is the tickSource of a timerfd, kept open for the life of
// the process. The goroutine that waits for its ticks waits in the network
// poller, as for a socket.
type timerfdTicks struct {
	f      *os.File // keeps fd open and registered with the poller
	rc     syscall.RawConn
	fd     int
	readFn func(uintptr) bool // t.readFd, made once
	buf    [8]byte            // the count of expirations, unused
}

func (t *timerfdTicks) settime(d int64) {
	ts := unix.NsecToTimespec(d)
	unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil)
}

func (t *timerfdTicks) start() { t.settime(int64(takeoverDelay)) }
func (t *timerfdTicks) stop()  { t.settime(0) }

// wait reads the timerfd, waiting in the poller until it has expired. The
// read is a raw system call, as in internal/rawio: an ordinary one would
// wake the runtime's monitor thread a thousand times a second.
func (t *timerfdTicks) wait() {
	if t.rc.Read(t.readFn) != nil {
		// The descriptor is never closed; if waiting fails anyway, tick
		// by the clock instead of spinning.
		sleepTick()
	}
}

// readFd is the RawConn.Read callback: false asks the poller to wait.
func (t *timerfdTicks) readFd(fd uintptr) bool {
	for {
		_, _, e := syscall.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&t.buf[0])), uintptr(len(t.buf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}
