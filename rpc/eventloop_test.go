package rpc

import (
	"runtime"
	"strings"
	"testing"

	"github.com/warrenipc/warren/internal/eventloop"
)

// eventLoopSuite are the package's behaviour tests that run a second time
// with every Serve in event-loop mode (where the platform has it): the
// table over {goroutine, eventloop} is the normal run plus this one.
var eventLoopSuite = []struct {
	name string
	fn   func(t *testing.T)
}{
	{"BadFrames", TestBadFrames},
	{"ProtocolErrorSendsGoAway", TestProtocolErrorSendsGoAway},
	{"MalformedCallHeader", TestMalformedCallHeader},
	{"CallHeaderVectors", TestCallHeaderVectors},
	{"UnknownStream", TestUnknownStream},
	{"ReplyOverClientLimit", TestReplyOverClientLimit},
	{"RequestOverServerLimit", TestRequestOverServerLimit},
	{"StalledPeers", TestStalledPeers},
	{"ShutdownStalledReader", TestShutdownStalledReader},
	{"NotWarrenPeers", TestNotWarrenPeers},
	{"MaxCalls", TestMaxCalls},
	{"CallWithoutRequest", TestCallWithoutRequest},
	{"AbandonedCallReleasesSlot", TestAbandonedCallReleasesSlot},
	{"CancelDuringLargeReplies", TestCancelDuringLargeReplies},
	{"CanceledDialDoesNotFailOtherCalls", TestCanceledDialDoesNotFailOtherCalls},
	{"Matrix", TestMatrix},
	{"UnaryJSON", TestUnaryJSON},
	{"UnaryRaw", TestUnaryRaw},
	{"Errors", TestErrors},
	{"DeadlinePropagates", TestDeadlinePropagates},
	{"CancelReachesServer", TestCancelReachesServer},
	{"Metadata", TestMetadata},
	{"ConnDropFailsPendingCalls", TestConnDropFailsPendingCalls},
	{"Limits", TestLimits},
	{"LimitsNeverRefuseWithinLimit", TestLimitsNeverRefuseWithinLimit},
	{"RateLimit", TestRateLimit},
	{"ShutdownDrains", TestShutdownDrains},
	{"Introspection", TestIntrospection},
	{"Interceptors", TestInterceptors},
	{"Reconnect", TestReconnect},
	{"ConcurrentCalls", TestConcurrentCalls},
	{"Soak", TestSoak},
	{"StreamKinds", TestStreamKinds},
	{"StreamServerStreamWithoutRequest", TestStreamServerStreamWithoutRequest},
	{"StreamHalfClose", TestStreamHalfClose},
	{"StreamStatusAtEnd", TestStreamStatusAtEnd},
	{"StreamSendAfterServerEnded", TestStreamSendAfterServerEnded},
	{"StreamSendAfterEnd", TestStreamSendAfterEnd},
	{"StreamMetadata", TestStreamMetadata},
	{"StreamDeadline", TestStreamDeadline},
	{"StreamCancelWithoutReading", TestStreamCancelWithoutReading},
	{"StreamCloseCancelsServer", TestStreamCloseCancelsServer},
	{"StreamCancelOrder", TestStreamCancelOrder},
	{"StreamHandlerPanic", TestStreamHandlerPanic},
	{"StreamInterceptors", TestStreamInterceptors},
	{"StreamInterceptorContext", TestStreamInterceptorContext},
	{"StreamIntrospection", TestStreamIntrospection},
	{"StreamsAndUnaryConcurrently", TestStreamsAndUnaryConcurrently},
	{"StreamFlowControlServerToClient", TestStreamFlowControlServerToClient},
	{"StreamCancelUnblocksServerSend", TestStreamCancelUnblocksServerSend},
	{"StreamFlowControlClientToServer", TestStreamFlowControlClientToServer},
	{"StreamMessageTooLarge", TestStreamMessageTooLarge},
	{"StreamShutdownDrains", TestStreamShutdownDrains},
	{"StreamRecvMsgReuse", TestStreamRecvMsgReuse},
}

func TestEventLoopSuite(t *testing.T) {
	runLoopSuite(t, nil)
}

// runLoopSuite runs the event-loop suite, less the tests in skip, checking
// that an event loop served each.
func runLoopSuite(t *testing.T, skip map[string]bool) {
	for _, tc := range eventLoopSuite {
		if skip[tc.name] {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			before := eventloop.Started.Load()
			tc.fn(t)
			if runtime.GOOS == "linux" && eventloop.Started.Load() == before {
				t.Error("no event loop served the test")
			}
		})
	}
}

// suiteMode tells testServer how to serve a test: in the event-loop suites
// (the tests of eventLoopSuite run again as subtests of TestEventLoopSuite
// and TestEventLoopWSSuite), with ServerOptions.EventLoop, and over
// WebSocket in the second. It depends on the test alone, not on package
// state, so tests may run in parallel.
func suiteMode(t testing.TB) (loop, ws bool) {
	switch name := t.Name(); {
	case strings.HasPrefix(name, "TestEventLoopWSSuite/"):
		return true, true
	case strings.HasPrefix(name, "TestEventLoopSuite/"):
		return true, false
	}
	return false, false
}

// TestEventLoopWSSuite runs the event-loop suite once more over WebSocket
// (the loop then serves the WebSocket connections itself), less Reconnect
// (it restarts a server on the same unix socket path) and Soak (the same
// calls as UnaryRaw and ConcurrentCalls, many more times).
func TestEventLoopWSSuite(t *testing.T) {
	runLoopSuite(t, map[string]bool{"Reconnect": true, "Soak": true})
}

// useMode sets srv's mode as suiteMode says for t, before srv.Serve.
func useMode(t testing.TB, srv *Server) {
	if loop, _ := suiteMode(t); loop {
		srv.opts.EventLoop = true
	}
}
