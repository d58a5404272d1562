// Package nbiopeer registers the system "nbio" of package idle: the
// WebSocket server of github.com/lesismal/nbio, measured with idle
// connections next to warren. It is a package of its own because nbio
// starts goroutines when it is initialized: only the programs that import
// this package (cmd/idle) link it.
package nbiopeer
