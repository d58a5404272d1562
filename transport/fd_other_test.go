//go:build !linux

package transport_test

func openFiles() map[string]string { return nil }

func leakedFiles(map[string]string) []string { return nil }
