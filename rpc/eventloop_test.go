package rpc

import (
	"runtime"
	"testing"
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
	{"UnknownStream", TestUnknownStream},
	{"ReplyOverClientLimit", TestReplyOverClientLimit},
	{"RequestOverServerLimit", TestRequestOverServerLimit},
	{"StalledPeers", TestStalledPeers},
	{"ShutdownStalledReader", TestShutdownStalledReader},
	{"NotWarrenPeers", TestNotWarrenPeers},
	{"MaxConns", TestMaxConns},
	{"MaxConnsPerUID", TestMaxConnsPerUID},
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
	testEventLoop = true
	t.Cleanup(func() { testEventLoop = false })
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
			before := loopsStarted.Load()
			tc.fn(t)
			if runtime.GOOS == "linux" && loopsStarted.Load() == before {
				t.Error("no event loop served the test")
			}
		})
	}
}

// testWebSocket makes testServer serve on a ws:// listener and its client
// dial it, so that the tests that use it run over WebSocket.
var testWebSocket bool

// TestEventLoopWSSuite runs the event-loop suite once more over WebSocket
// (the loop then serves the WebSocket connections itself), less Reconnect
// (it restarts a server on the same unix socket path) and Soak (the same
// calls as UnaryRaw and ConcurrentCalls, many more times).
func TestEventLoopWSSuite(t *testing.T) {
	testEventLoop, testWebSocket = true, true
	t.Cleanup(func() { testEventLoop, testWebSocket = false, false })
	runLoopSuite(t, map[string]bool{"Reconnect": true, "Soak": true})
}
