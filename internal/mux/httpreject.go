package mux

import (
	"strconv"

	"github.com/warrenipc/warren/wire"
)

// httpRejectResponse is a complete HTTP/1.1 400 response (Connection: close,
// plain-text body) explaining that the socket speaks the warren protocol. A
// listener that does not serve HTTP writes it to a peer whose preface is an
// HTTP request (wire.ErrHTTPRequest), then closes the connection.
var httpRejectResponse = httpReject()

func httpReject() []byte {
	body := "This socket speaks the warren protocol (version " + strconv.Itoa(wire.Version) + "), not HTTP.\n" +
		"Connect with a warren client; see PROTOCOL.md in github.com/warrenipc/warren.\n"
	return []byte("HTTP/1.1 400 Bad Request\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n" +
		"\r\n" + body)
}
