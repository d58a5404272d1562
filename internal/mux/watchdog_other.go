//go:build !linux

package mux

func newTickSource() tickSource { return sleepTicks{} }
