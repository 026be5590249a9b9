package eap

import (
	"bytes"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte{2, 1, 0, 10, 1, 'c', 'a', 'r', 'o', 'l'})
	f.Add([]byte{3, 1, 0, 4})
	f.Add([]byte{1, 1, 0, 6, 13, 0x20})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		q, err := Parse(p.Marshal())
		if err != nil || q.Code != p.Code || q.Identifier != p.Identifier || q.Type != p.Type || !bytes.Equal(q.Data, p.Data) {
			t.Fatalf("re-parse of %+v: %+v, %v", p, q, err)
		}
	})
}

// FuzzServer feeds a session Responses cut from the input: each is one
// length octet and that many octets of type data, sent with the right
// identifier (so that the fuzzer reaches the methods) unless the octet
// before says otherwise. The first input octet picks the method. The
// session must end in Success or Failure, or keep running, and never
// panic or hang.
func FuzzServer(f *testing.F) {
	f.Add([]byte{0, 0, 5, 'c', 'a', 'r', 'o', 'l', 0, 1, 2})
	f.Add([]byte{1, 0, 5, 'c', 'a', 'r', 'o', 'l', 0, 6, 0x80 | 0x40, 0, 0, 0, 9, 22})
	f.Add([]byte{1, 0, 1, 'x', 0, 7, 0, 22, 3, 1, 0, 1, 1})
	ca := newTestCA(f, "fuzz CA")
	tlsCfg := testTLSConfig(f, ca)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 1 {
			return
		}
		m := []Type{TypeMSCHAPv2, TypeTLS}[in[0]&1]
		s, err := NewServer(&Config{Methods: []Type{m}, TLS: tlsCfg, Password: passwords(map[string]string{"carol": "pw"}), FragmentSize: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := s.Start()
		if err != nil {
			t.Fatal(err)
		}
		in = in[1:]
		for len(in) >= 2 && s.State() == Running {
			id := out[1]
			if in[0]&0x80 != 0 {
				id = in[0] // a wrong identifier, most often
			}
			typ := Type(out[4])
			if in[0]&0x40 != 0 {
				typ = Type(in[0] & 0x3f)
			}
			n := min(int(in[1]), len(in)-2)
			d := in[2 : 2+n]
			in = in[2+n:]
			out, err = s.Process(Packet{Code: CodeResponse, Identifier: id, Type: typ, Data: d}.Marshal())
			if (err != nil) != (s.State() == Failed) {
				t.Fatalf("err %v in state %s", err, s.State())
			}
			if c := Code(out[0]); s.State() == Failed && c != CodeFailure || s.State() == Running && c != CodeRequest {
				t.Fatalf("packet %s in state %s", c, s.State())
			}
		}
	})
}
