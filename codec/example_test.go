package codec_test

import (
	"fmt"

	"github.com/warrenipc/warren/codec"
)

func Example() {
	type point struct {
		X, Y int
	}
	cd := codec.For(&point{})
	b, _ := cd.Append(nil, &point{1, 2})
	var p point
	_ = cd.Unmarshal(b, &p)
	fmt.Println(cd.Name(), string(b), p.X+p.Y)

	raw := codec.For([]byte(nil))
	var out []byte
	_ = raw.Unmarshal([]byte("bytes as they are"), &out)
	fmt.Println(raw.Name(), string(out))
	// Output:
	// json {"X":1,"Y":2} 3
	// raw bytes as they are
}
