package peer

import "golang.org/x/sys/unix"

func readCred(fd int) (Cred, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Cred{}, err
	}
	return Cred{UID: int(u.Uid), GID: int(u.Gid), PID: int(u.Pid)}, nil
}
