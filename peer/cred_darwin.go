package peer

import "golang.org/x/sys/unix"

func readCred(fd int) (cred, error) {
	x, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return cred{}, err
	}
	c := cred{UID: int(x.Uid), GID: -1}
	if x.Ngroups > 0 {
		c.GID = int(x.Groups[0])
	}
	// LOCAL_PEERPID exists since macOS 10.8; a failure leaves PID at 0.
	if pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
		c.PID = pid
	}
	return c, nil
}
