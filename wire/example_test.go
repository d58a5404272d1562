package wire_test

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/warrenipc/warren/wire"
)

// Frames are appended to one buffer and parsed back in a loop; ok == false
// means the buffer holds only part of the next frame.
func ExampleParseFrame() {
	var buf []byte
	buf = wire.AppendFrame(buf, 1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Echo.Say", 0, time.Second, nil))
	buf = wire.AppendFrame(buf, 1, wire.TypeData, wire.FlagEnd, []byte("hello"))
	buf = wire.AppendFrame(buf, 0, wire.TypePing, 0, []byte("12345678"))
	buf = append(buf, 0, 0, 0) // the start of a frame still on its way

	for {
		rest, h, payload, ok, err := wire.ParseFrame(buf, wire.DefaultMaxFrameSize)
		if err != nil {
			fmt.Println("protocol error:", err)
			return
		}
		if !ok {
			fmt.Printf("need more bytes (%d buffered)\n", len(buf))
			return
		}
		buf = rest
		switch h.Type {
		case wire.TypeHeaders:
			ch, err := wire.ParseCallHeader(payload)
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("%v call %s, timeout %v\n", h, ch.Method, ch.Timeout)
		default:
			fmt.Printf("%v %q\n", h, payload)
		}
	}
	// Output:
	// HEADERS stream=1 len=13 flags=0x00 call Echo.Say, timeout 1s
	// DATA stream=1 len=5 flags=0x02 "hello"
	// PING stream=0 len=8 flags=0x00 "12345678"
	// need more bytes (3 buffered)
}

// A message larger than the peer's frame size is chunked by AppendMessage
// and put back together by an Assembler.
func ExampleAssembler() {
	msg := bytes.Repeat([]byte("warren "), 400) // 2800 bytes
	const peerMaxFrame = 1024
	if err := wire.CheckMessageSize(len(msg), wire.DefaultMaxMessageSize); err != nil {
		fmt.Println(err)
		return
	}
	buf := wire.AppendMessage(nil, 3, wire.TypeData, wire.FlagEnd, msg, peerMaxFrame)

	a := wire.Assembler{Limit: 4096}
	for len(buf) > 0 {
		rest, h, payload, _, err := wire.ParseFrame(buf, peerMaxFrame)
		if err != nil {
			fmt.Println(err)
			return
		}
		buf = rest
		got, done, err := a.Add(h, payload)
		fmt.Printf("%v done=%v\n", h, done)
		if err != nil {
			fmt.Println(err)
			return
		}
		if done {
			fmt.Println("message intact:", bytes.Equal(got, msg))
		}
	}

	// A message over the limit is refused before anything is allocated.
	small := wire.Assembler{Limit: 1000}
	big := wire.AppendMessage(nil, 5, wire.TypeData, 0, msg, peerMaxFrame)
	_, h, payload, _, _ := wire.ParseFrame(big, peerMaxFrame)
	_, _, err := small.Add(h, payload)
	var tooLarge *wire.MessageTooLargeError
	fmt.Println(errors.As(err, &tooLarge), err)
	// Output:
	// DATA stream=3 len=1024 flags=0x01 done=false
	// DATA stream=3 len=1024 flags=0x01 done=false
	// DATA stream=3 len=756 flags=0x02 done=true
	// message intact: true
	// true warren: message of 2800 bytes exceeds the limit of 1000 bytes
}

// Each side sends a preface at connection start; a server recognises an
// HTTP client by the error.
func ExampleParsePreface() {
	client := wire.AppendPreface(nil, wire.Settings{MaxFrameSize: 16 << 10})
	fmt.Printf("client preface: % x\n", client)

	s, n, ok, err := wire.ParsePreface(client)
	fmt.Println(s.MaxFrameSize, s.MaxMessageSize, n, ok, err)

	_, _, _, err = wire.ParsePreface([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	fmt.Println(errors.Is(err, wire.ErrNotWarren), errors.Is(err, wire.ErrHTTPRequest))
	// Output:
	// client preface: f0 57 52 4e 01 01 00 01 00 00 40 00
	// 16384 4194304 12 true <nil>
	// true true
}
