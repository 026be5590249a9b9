package eap

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The example of RFC 2759 section 9.2 ("Hash Example"), every
// intermediate value.
func TestMSCHAPv2RFC2759Section9_2(t *testing.T) {
	const user, password = "User", "clientPass"
	authChallenge := unhex(t, "5B 5D 7C 7D 7B 3F 2F 3E 3C 2C 60 21 32 26 26 28")
	peerChallenge := unhex(t, "21 40 23 24 25 5E 26 2A 28 29 5F 2B 3A 33 7C 7E")

	ch := challengeHash(peerChallenge, authChallenge, user)
	if want := unhex(t, "D0 2E 43 86 BC E9 12 26"); !bytes.Equal(ch[:], want) {
		t.Errorf("ChallengeHash = %X, want %X", ch, want)
	}
	ph := ntPasswordHash([]byte(password))
	if want := unhex(t, "44 EB BA 8D 53 12 B8 D6 11 47 44 11 F5 69 89 AE"); !bytes.Equal(ph[:], want) {
		t.Errorf("NtPasswordHash = %X, want %X", ph, want)
	}
	nt := generateNTResponse(authChallenge, peerChallenge, user, []byte(password))
	if want := unhex(t, "82 30 9E CD 8D 70 8B 5E A0 8F AA 39 81 CD 83 54 42 33 11 4A 3D 85 D6 DF"); !bytes.Equal(nt[:], want) {
		t.Errorf("NT-Response = %X, want %X", nt, want)
	}
	hh := hashNtPasswordHash(ph)
	if want := unhex(t, "41 C0 0C 58 4B D2 D9 1C 40 17 A2 A1 2F A5 9F 3F"); !bytes.Equal(hh[:], want) {
		t.Errorf("PasswordHashHash = %X, want %X", hh, want)
	}
	auth := authenticatorResponse(hh, nt, peerChallenge, authChallenge, user)
	if want := "S=407A5589115FD0D6209F510FE9C04566932CDA56"; auth != want {
		t.Errorf("AuthenticatorResponse = %s, want %s", auth, want)
	}
}

// RFC 3079 section 3.5.3 ("Sample Key Derivations", 128-bit) continues
// the RFC 2759 example: the master key and the server's send key (Magic3).
func TestMSCHAPv2RFC3079Section3_5_3(t *testing.T) {
	hh := [16]byte(unhex(t, "41C00C584BD2D91C4017A2A12FA59F3F"))
	nt := [24]byte(unhex(t, "82309ECD8D708B5EA08FAA3981CD83544233114A3D85D6DF"))
	mk := masterKey(hh, nt)
	if want := unhex(t, "FDECE3717A8C838CB388E527AE3CDD31"); !bytes.Equal(mk[:], want) {
		t.Errorf("MasterKey = %X, want %X", mk, want)
	}
	send := asymmetricStartKey(mk, mppeMagic3)
	if want := unhex(t, "8B7CDC149B993A1BA118CB153F56DCCB"); !bytes.Equal(send[:], want) {
		t.Errorf("SendStartKey128 = %X, want %X", send, want)
	}
	msk := mschapv2MSK(hh, nt)
	if len(msk) != 64 || !bytes.Equal(msk[16:32], send[:]) || !bytes.Equal(msk[32:], make([]byte, 32)) {
		t.Errorf("MSK = %X: want receive key, send key %X, 32 zero octets", msk, send)
	}
}

// msPeer is an EAP-MSCHAPv2 peer for tests, as strongSwan's client
// behaves: it answers Identity, the Challenge and the Success request.
type msPeer struct {
	t        testing.TB
	identity string
	name     string
	password string
	peerCh   []byte
	auth     string
	msk      []byte
}

// respond answers one server packet; it returns nil at Success/Failure.
func (p *msPeer) respond(b []byte) []byte {
	p.t.Helper()
	q, err := Parse(b)
	if err != nil {
		p.t.Fatalf("peer: %v", err)
	}
	if q.Code != CodeRequest {
		return nil
	}
	r := Packet{Code: CodeResponse, Identifier: q.Identifier, Type: q.Type}
	switch q.Type {
	case TypeIdentity:
		r.Data = []byte(p.identity)
	case TypeMSCHAPv2:
		switch q.Data[0] {
		case msOpChallenge:
			ch := q.Data[5 : 5+16]
			p.peerCh = bytes.Repeat([]byte{0x5a}, 16)
			nt := generateNTResponse(ch, p.peerCh, userName(p.name), []byte(p.password))
			hh := hashNtPasswordHash(ntPasswordHash([]byte(p.password)))
			p.auth = authenticatorResponse(hh, nt, p.peerCh, ch, userName(p.name))
			p.msk = mschapv2MSK(hh, nt)
			v := append(append(append([]byte{49}, p.peerCh...), make([]byte, 8)...), nt[:]...)
			v = append(v, 0)
			d := []byte{msOpResponse, q.Data[1], 0, 0}
			d = append(append(d, v...), p.name...)
			r.Data = d
		case msOpSuccess:
			if !strings.HasPrefix(string(q.Data[4:]), p.auth+" ") {
				p.t.Fatalf("peer: Success message %q, want authenticator %s", q.Data[4:], p.auth)
			}
			r.Data = []byte{msOpSuccess}
		default:
			p.t.Fatalf("peer: opcode %d", q.Data[0])
		}
	default:
		r.Type = TypeNak
		r.Data = []byte{byte(TypeMSCHAPv2)}
	}
	return r.Marshal()
}

func passwords(m map[string]string) func(string) ([]byte, bool) {
	return func(id string) ([]byte, bool) {
		pw, ok := m[id]
		return []byte(pw), ok
	}
}

// run drives a session with a peer's answer function to its end and
// returns the last packet and error.
func run(t testing.TB, s *Server, respond func([]byte) []byte) ([]byte, error) {
	t.Helper()
	out, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		r := respond(out)
		if r == nil {
			return out, s.Err()
		}
		out, err = s.Process(r)
		if err != nil {
			return out, err
		}
	}
	t.Fatal("no end after 100 rounds")
	return nil, nil
}

func TestMSCHAPv2Session(t *testing.T) {
	cfg := &Config{Methods: []Type{TypeMSCHAPv2}, Password: passwords(map[string]string{"carol": "Ca r0l ∑"})}
	for _, c := range []struct {
		name, identity, user, password string
		want                           State
	}{
		{"ok", "carol", "carol", "Ca r0l ∑", Succeeded},
		{"domain", "carol", `CORP\carol`, "Ca r0l ∑", Failed}, // no password for CORP\carol
		{"wrong password", "carol", "carol", "carol", Failed},
		{"unknown user", "dave", "dave", "x", Failed},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p := &msPeer{t: t, identity: c.identity, name: c.user, password: c.password}
			last, err := run(t, s, p.respond)
			if s.State() != c.want {
				t.Fatalf("state %s (%v), want %s", s.State(), err, c.want)
			}
			q, _ := Parse(last)
			if c.want == Succeeded {
				if q.Code != CodeSuccess || err != nil {
					t.Fatalf("last packet %s, err %v", q.Code, err)
				}
				if !bytes.Equal(s.MSK(), p.msk) || len(s.MSK()) != 64 {
					t.Fatalf("MSK %X, peer's %X", s.MSK(), p.msk)
				}
				if s.Identity() != c.user || s.Method() != TypeMSCHAPv2 {
					t.Fatalf("identity %q method %s", s.Identity(), s.Method())
				}
				return
			}
			if q.Code != CodeFailure || !errors.Is(err, ErrAuth) || s.MSK() != nil {
				t.Fatalf("last packet %s, err %v, MSK %x: want Failure, ErrAuth, none", q.Code, err, s.MSK())
			}
		})
	}
}

// A configured identity skips EAP-Identity: the first Request is the
// method's.
func TestConfiguredIdentity(t *testing.T) {
	s, err := NewServer(&Config{Methods: []Type{TypeMSCHAPv2}, Identity: "carol", Password: passwords(map[string]string{"carol": "pw"})})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := Parse(first); q.Type != TypeMSCHAPv2 || q.Data[0] != msOpChallenge {
		t.Fatalf("first request %s opcode %d, want an EAP-MSCHAPv2 Challenge", q.Type, q.Data[0])
	}

	// The peer must authenticate as that identity, even with another
	// user's right password.
	cfg := &Config{Methods: []Type{TypeMSCHAPv2}, Identity: "carol", Password: passwords(map[string]string{"carol": "pw", "dave": "dpw"})}
	for user, want := range map[string]State{"carol": Succeeded, "dave": Failed} {
		s, _ := NewServer(cfg)
		pw := map[string]string{"carol": "pw", "dave": "dpw"}[user]
		p := &msPeer{t: t, identity: user, name: user, password: pw}
		if _, err := run(t, s, p.respond); s.State() != want {
			t.Errorf("configured carol, user %s: %s (%v), want %s", user, s.State(), err, want)
		}
	}
}

// A peer that Naks the first method gets the next one it names; one that
// names none configured gets Failure.
func TestNak(t *testing.T) {
	cfg := &Config{Methods: []Type{TypeTLS, TypeMSCHAPv2}, TLS: testTLSConfig(t, nil), Password: passwords(map[string]string{"carol": "pw"})}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := &msPeer{t: t, identity: "carol", name: "carol", password: "pw"}
	if _, err := run(t, s, p.respond); err != nil || s.State() != Succeeded || s.Method() != TypeMSCHAPv2 {
		t.Fatalf("state %s method %s err %v, want MSCHAPv2 Success", s.State(), s.Method(), err)
	}

	s, _ = NewServer(&Config{Methods: []Type{TypeMSCHAPv2}, Password: cfg.Password})
	out, _ := s.Start()
	out, _ = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeIdentity, Data: []byte("carol")}.Marshal())
	out, err = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeNak, Data: []byte{byte(TypeMD5)}}.Marshal())
	if err == nil || Code(out[0]) != CodeFailure {
		t.Fatalf("Nak to MD5: %v, packet % x; want Failure", err, out)
	}
}

// Bad Responses end the session with Failure and an error, never more.
func TestBadResponses(t *testing.T) {
	cfg := &Config{Methods: []Type{TypeMSCHAPv2}, Password: passwords(map[string]string{"carol": "pw"}), MaxRounds: 3}
	for _, c := range []struct {
		name string
		resp func(id uint8) []byte
	}{
		{"truncated", func(id uint8) []byte { return []byte{2, id, 0} }},
		{"wrong identifier", func(id uint8) []byte {
			return Packet{Code: CodeResponse, Identifier: id + 1, Type: TypeIdentity, Data: []byte("carol")}.Marshal()
		}},
		{"a request", func(id uint8) []byte { return Packet{Code: CodeRequest, Identifier: id, Type: TypeIdentity}.Marshal() }},
		{"wrong type", func(id uint8) []byte { return Packet{Code: CodeResponse, Identifier: id, Type: TypeMD5}.Marshal() }},
		{"long identity", func(id uint8) []byte {
			return Packet{Code: CodeResponse, Identifier: id, Type: TypeIdentity, Data: make([]byte, 300)}.Marshal()
		}},
	} {
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := s.Start()
		out, err = s.Process(c.resp(out[1]))
		if err == nil || s.State() != Failed || Code(out[0]) != CodeFailure {
			t.Errorf("%s: err %v state %s packet % x, want Failure", c.name, err, s.State(), out)
		}
		if _, err := s.Process(out); err == nil {
			t.Errorf("%s: Process after Failure accepted", c.name)
		}
	}

	// A peer answering the Challenge with short or inconsistent data.
	for _, d := range [][]byte{{}, {msOpResponse}, {msOpResponse, 0, 0, 0, 49}, {msOpSuccess}, {9}} {
		s, _ := NewServer(cfg)
		out, _ := s.Start()
		out, _ = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeIdentity, Data: []byte("carol")}.Marshal())
		out, err := s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeMSCHAPv2, Data: d}.Marshal())
		if err == nil || Code(out[0]) != CodeFailure {
			t.Errorf("MSCHAPv2 data % x: err %v, want Failure", d, err)
		}
	}

	// Too many rounds: identity answers are refused after MaxRounds.
	s, _ := NewServer(&Config{Methods: []Type{TypeTLS}, TLS: testTLSConfig(t, nil), MaxRounds: 2})
	defer s.Close()
	out, _ := s.Start()
	out, _ = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeIdentity, Data: []byte("carol")}.Marshal())
	for i := 0; i < 3 && s.State() == Running; i++ {
		var err error
		out, err = s.Process(Packet{Code: CodeResponse, Identifier: out[1], Type: TypeTLS, Data: []byte{tlsFlagMore, 1}}.Marshal())
		if i == 0 && err != nil {
			t.Fatalf("first fragment: %v", err)
		}
	}
	if s.State() != Failed || !strings.Contains(s.Err().Error(), "rounds") {
		t.Fatalf("after 3 rounds: state %s err %v, want failed on rounds", s.State(), s.Err())
	}
}
