package watchdog

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newTickSource returns a timerfd's ticks, or time.Sleep's if no timerfd can
// be made.
func newTickSource() tickSource {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return sleepTicks{}
	}
	f := os.NewFile(uintptr(fd), "warren-watchdog-timer")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return sleepTicks{}
	}
	t := &timerfdTicks{f: f, rc: rc, fd: fd}
	t.readFn = t.readFd
	t.spec.Value = unix.NsecToTimespec(int64(Period))
	return t
}

// timerfdTicks is the tickSource of a timerfd, kept open for the life of
// the process. The goroutine that waits for it waits in the network
// poller, as for a socket. The system calls are raw, as in internal/rawio:
// ordinary ones would wake the runtime's monitor thread a thousand times a
// second.
type timerfdTicks struct {
	f      *os.File // keeps fd open and registered with the poller
	rc     syscall.RawConn
	fd     int
	readFn func(uintptr) bool // t.readFd, made once
	spec   unix.ItimerSpec    // one expiry, Period from when it is set
	buf    [8]byte            // the count of expirations, unused
}

// wait arms the timerfd for one expiry and waits for it.
func (t *timerfdTicks) wait() {
	_, _, e := syscall.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(t.fd), 0, uintptr(unsafe.Pointer(&t.spec)), 0, 0, 0)
	if e != 0 || t.rc.Read(t.readFn) != nil {
		sleepTicks{}.wait() // never expected: the descriptor stays open
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
