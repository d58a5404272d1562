// Package sdnotify reports a service's state to systemd through the
// notification socket (sd_notify(3)): READY=1, STOPPING=1, WATCHDOG=1.
package sdnotify

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"time"
)

// Notify sends state (newline-separated assignments such as "READY=1") to
// the socket NOTIFY_SOCKET names: a path, or "@name" in the abstract
// namespace. It reports false, with no error, when NOTIFY_SOCKET is unset.
func Notify(state string) (bool, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return false, nil
	}
	if name[0] != '/' && name[0] != '@' {
		return false, errors.New("NOTIFY_SOCKET=" + name + ": not a unix socket path or @name")
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}

// WatchdogInterval returns how often the service must send WATCHDOG=1:
// half of WATCHDOG_USEC, when it is set for this process (WATCHDOG_PID
// unset or this process's id); 0 otherwise.
func WatchdogInterval() time.Duration {
	us, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || us <= 0 {
		return 0
	}
	if p := os.Getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(us) * time.Microsecond / 2
}

// Watchdog sends WATCHDOG=1 every WatchdogInterval until ctx is done. It
// returns at once when no watchdog is set.
func Watchdog(ctx context.Context) {
	d := WatchdogInterval()
	if d <= 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			Notify("WATCHDOG=1")
		}
	}
}
