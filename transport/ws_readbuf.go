package transport

import "io"

// wsReadBuf is a read buffer that, unlike bufio.Reader, can be given bytes
// already read (those that arrived with the opening handshake) and lets the
// frame reader look at a header before it is consumed.
type wsReadBuf struct {
	src  io.Reader
	buf  []byte
	r, w int // buf[r:w] holds the bytes read and not consumed
}

func (b *wsReadBuf) buffered() int { return b.w - b.r }

// fill reads until at least n bytes are buffered; n <= len(b.buf). The
// bytes already buffered stay there whatever the error.
func (b *wsReadBuf) fill(n int) error {
	if b.w-b.r >= n {
		return nil
	}
	if b.r > 0 && len(b.buf)-b.r < n {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	for b.w-b.r < n {
		m, err := b.src.Read(b.buf[b.w:])
		b.w += m
		if err != nil {
			if err == io.EOF && b.w-b.r > 0 {
				err = io.ErrUnexpectedEOF
			}
			if b.w-b.r >= n {
				return nil
			}
			return err
		}
	}
	return nil
}

// next consumes n buffered bytes and returns them; they stay valid until
// the next read.
func (b *wsReadBuf) next(n int) []byte {
	p := b.buf[b.r : b.r+n]
	b.r += n
	return p
}

// Read reads into p from the buffer or, when the buffer is empty and p is
// at least as large, straight from the source.
func (b *wsReadBuf) Read(p []byte) (int, error) {
	if b.r == b.w {
		if len(p) >= len(b.buf) {
			return b.src.Read(p)
		}
		b.r, b.w = 0, 0
		n, err := b.src.Read(b.buf)
		if n == 0 {
			return 0, err
		}
		b.w = n
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}
