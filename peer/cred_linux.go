package peer

import "golang.org/x/sys/unix"

func readCred(fd int) (cred, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return cred{}, err
	}
	return cred{UID: int(u.Uid), GID: int(u.Gid), PID: int(u.Pid)}, nil
}
