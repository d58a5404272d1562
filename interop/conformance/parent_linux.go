package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// endWithParent asks the kernel to send SIGTERM when the parent process
// ends: under 'go run .' the runner's SIGTERM ends the go command, not
// this server.
func endWithParent() {
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0)
}
