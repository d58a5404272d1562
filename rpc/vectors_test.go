package rpc

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// TestCallHeaderVectors sends every callheader vector of
// testdata/vectors.json as a call and checks the code the server answers
// with: the vector's status (3 for a method name not of the form
// Service.Method), 3 for a payload that does not decode (a malformed call
// header), and 12 for a well-formed name it does not serve.
func TestCallHeaderVectors(t *testing.T) {
	b, err := os.ReadFile("../testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Name, Kind, Hex, Error string
		Status                 status.Code
	}
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	rs := startBad(t, newBadServer(nil)).handshake(t)
	id, malformed := uint32(1), 0
	for _, v := range vs {
		if v.Kind != "callheader" {
			continue
		}
		p, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		want := status.Unimplemented
		switch {
		case v.Status != 0:
			want = v.Status
			malformed++
		case v.Error != "":
			want = status.InvalidArgument
		}
		rs.write(frame(id, wire.TypeHeaders, wire.FlagEnd, p))
		if r := rs.await(id); status.Code(r.trailer.Code) != want {
			t.Errorf("%s: status %d %q, want %d", v.Name, r.trailer.Code, r.trailer.Message, want)
		}
		id += 2
	}
	if malformed == 0 {
		t.Fatal("no callheader vector with a status")
	}
	rs.call(id, []byte("still up"))
}
