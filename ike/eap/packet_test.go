package eap

import (
	"bytes"
	"errors"
	"testing"
)

func TestPacketRoundTrip(t *testing.T) {
	for _, p := range []Packet{
		{Code: CodeRequest, Identifier: 7, Type: TypeIdentity},
		{Code: CodeResponse, Identifier: 7, Type: TypeIdentity, Data: []byte("carol")},
		{Code: CodeRequest, Identifier: 255, Type: TypeTLS, Data: []byte{tlsFlagStart}},
		{Code: CodeSuccess, Identifier: 9},
		{Code: CodeFailure, Identifier: 0},
	} {
		b := p.Marshal()
		if len(b) != p.Len() {
			t.Fatalf("%+v: Marshal gave %d octets, Len %d", p, len(b), p.Len())
		}
		q, err := Parse(append(b, 0xee, 0xee)) // padding past Length is ignored
		if err != nil {
			t.Fatalf("%+v: Parse: %v", p, err)
		}
		if q.Code != p.Code || q.Identifier != p.Identifier || q.Type != p.Type || !bytes.Equal(q.Data, p.Data) {
			t.Fatalf("round trip: got %+v, want %+v", q, p)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"three octets", []byte{1, 1, 0}, ErrShort},
		{"length below header", []byte{1, 1, 0, 3}, ErrLength},
		{"length past end", []byte{2, 1, 0, 9, 1, 'a'}, ErrLength},
		{"request without type", []byte{1, 1, 0, 4}, ErrLength},
		{"unknown code", []byte{9, 1, 0, 4}, nil},
	} {
		_, err := Parse(c.b)
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Parse(% x) = %v, want %v", c.name, c.b, err, c.want)
		}
	}
}

// The Data of a parsed packet may not grow into the padding after it.
func TestParseDataCapped(t *testing.T) {
	p, err := Parse([]byte{2, 1, 0, 6, 1, 'a', 'b', 'c'})
	if err != nil {
		t.Fatal(err)
	}
	if cap(p.Data) != 1 {
		t.Fatalf("cap(Data) = %d, want 1", cap(p.Data))
	}
}
