//go:build !linux

package watchdog

func newTickSource() tickSource { return sleepTicks{} }
