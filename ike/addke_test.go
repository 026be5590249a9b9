package ike

import (
	"reflect"
	"testing"
)

// TestParseProposalAddKE: strongSwan 6's keywords for additional key
// exchanges (ke1_ to ke7_, RFC 9370 transform types 6 to 12) and the
// ML-KEM method IDs of draft-ietf-ipsecme-ikev2-mlkem section 5 (IANA:
// ML-KEM-768 = 36, ML-KEM-1024 = 37).
func TestParseProposalAddKE(t *testing.T) {
	tr := func(typ TransformType, id, kl uint16) Transform { return Transform{Type: typ, ID: id, KeyLen: kl} }
	base := []Transform{tr(TransformEncr, EncrAESGCM16, 256), tr(TransformPRF, PRFHMACSHA384, 0), tr(TransformDH, DHCurve25519, 0)}
	with := func(ts ...Transform) []Transform { return append(append([]Transform(nil), base...), ts...) }
	cases := []struct {
		in   string
		want []Transform
	}{
		{"aes256gcm16-prfsha384-x25519-ke1_mlkem768", with(tr(6, 36, 0))},
		{"aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none", with(tr(6, 36, 0), tr(6, 0, 0))},
		{"aes256gcm16-prfsha384-x25519-ke2_mlkem1024-ke1_mlkem768", with(tr(6, 36, 0), tr(7, 37, 0))},
		{"aes256gcm16-prfsha384-x25519-ke7_ecp384", with(tr(12, DHECP384, 0))},
		{"AES256GCM16-PRFSHA384-X25519-KE1_MLKEM768", with(tr(6, 36, 0))},
	}
	for _, c := range cases {
		p, err := ParseProposal(ProtoIKE, c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if !reflect.DeepEqual(p.Transforms, c.want) {
			t.Errorf("%s: %+v", c.in, p.Transforms)
		}
	}
	for _, bad := range []struct {
		proto uint8
		in    string
	}{
		{ProtoIKE, "aes256gcm16-prfsha384-mlkem768"},            // ML-KEM in IKE_SA_INIT
		{ProtoIKE, "aes256gcm16-prfsha384-x25519-ke8_mlkem768"}, // no ADDKE8
		{ProtoIKE, "aes256gcm16-prfsha384-x25519-ke0_mlkem768"},
		{ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_aes128"},
		{ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem512"}, // not in crypto/mlkem
		{ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_"},
		{ProtoIKE, "aes256gcm16-prfsha384-ke1_mlkem768"}, // no base KE
		{ProtoESP, "aes256gcm16-ke1_mlkem768"},           // IKE_FOLLOWUP_KE
		{ProtoESP, "aes256gcm16-mlkem768"},
	} {
		if _, err := ParseProposal(bad.proto, bad.in); err == nil {
			t.Errorf("%q accepted", bad.in)
		}
	}
}

// TestSelectAddKE: proposal selection with additional key exchanges (RFC
// 9370 section 2.2.1): one method per ADDKE type both sides list, "none"
// accepting a side that leaves the type out, no method chosen twice. The
// cases follow strongSwan's src/libstrongswan/tests/suites/test_proposal.c
// (select_data), with groups sluice has.
func TestSelectAddKE(t *testing.T) {
	cases := []struct {
		ours, theirs string
		want         string // the suite's name; "" for no match
	}{
		{"aes128-sha256-ecp256-ke1_mlkem768", "aes128-sha256-ecp256-ke1_mlkem768", "aes128-sha256-prfsha256-ecp256-ke1_mlkem768"},
		// The same method as KE and ke1 on both sides: strongSwan picks
		// none of them (test_proposal.c: modp3072 and ke1_modp3072).
		{"aes128-sha256-ecp256-ke1_ecp256", "aes128-sha256-ecp256-ke1_ecp256", ""},
		{"aes128-sha256-ecp256-ecp384-ke1_ecp256-ke1_ecp384-ke2_ecp256-ke2_ecp384-ke2_mlkem768",
			"aes128-sha256-ecp256-ecp384-ke1_ecp256-ke1_ecp384-ke2_ecp256-ke2_ecp384-ke2_mlkem768",
			"aes128-sha256-prfsha256-ecp256-ke1_ecp384-ke2_mlkem768"},
		{"aes128-sha256-ecp256-ke1_ecp256-ke1_none", "aes128-sha256-ecp256-ke1_ecp256-ke1_none", "aes128-sha256-prfsha256-ecp256"},
		{"aes128-sha256-ecp256-ke1_mlkem768-ke1_none", "aes128-sha256-ecp256-ke1_mlkem768-ke1_none", "aes128-sha256-prfsha256-ecp256-ke1_mlkem768"},
		{"aes128-sha256-ecp256-ke1_mlkem1024-ke1_mlkem768", "aes128-sha256-ecp256-ke1_mlkem768-ke1_mlkem1024", "aes128-sha256-prfsha256-ecp256-ke1_mlkem1024"},
		{"aes128-sha256-ecp256-ke1_mlkem768", "aes128-sha256-ecp256-ke1_mlkem1024-ke1_mlkem768", "aes128-sha256-prfsha256-ecp256-ke1_mlkem768"},
		{"aes128-sha256-ecp256-ke1_modp2048", "aes128-sha256-modp2048-ecp256-ke1_ecp256-ke2_ecp384", ""},
		// A peer without additional key exchanges (strongSwan 5.9.8).
		{"aes128-sha256-ecp256-ke1_mlkem768", "aes128-sha256-ecp256", ""},
		{"aes128-sha256-ecp256-ke1_mlkem768-ke1_none", "aes128-sha256-ecp256", "aes128-sha256-prfsha256-ecp256"},
		// A peer asking for one we do not do (strongSwan 6 to old sluice).
		{"aes128-sha256-ecp256", "aes128-sha256-ecp256-ke1_mlkem768", ""},
		{"aes128-sha256-ecp256", "aes128-sha256-ecp256-ke1_mlkem768-ke1_none", "aes128-sha256-prfsha256-ecp256"},
		{"aes128-sha256-ecp256-ke2_mlkem768", "aes128-sha256-ecp256-ke1_mlkem768", ""},
	}
	for _, c := range cases {
		ours, err := ParseProposals(ProtoIKE, c.ours)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := ParseProposals(ProtoIKE, c.theirs)
		if err != nil {
			t.Fatal(err)
		}
		s, _, ok := selectProposal(ours, theirs, false)
		got := ""
		if ok {
			got = s.Name()
		}
		if got != c.want {
			t.Errorf("ours %s, theirs %s: chose %q, want %q", c.ours, c.theirs, got, c.want)
			continue
		}
		if !ok {
			continue
		}
		// The responder's answer carries one transform per type (none
		// for "none"), which the initiator accepts as the same suite.
		back, err := checkChosen(theirs, Proposal{Num: 1, Protocol: ProtoIKE, Transforms: s.transforms()}, false)
		if err != nil || back != s {
			t.Errorf("ours %s, theirs %s: checkChosen: %+v %v", c.ours, c.theirs, back, err)
		}
	}
}

// TestCheckChosenAddKE: the initiator's check of the responder's choice.
func TestCheckChosenAddKE(t *testing.T) {
	tr := func(typ TransformType, id uint16) Transform { return Transform{Type: typ, ID: id} }
	chosen := func(ts ...Transform) Proposal {
		return Proposal{Num: 1, Protocol: ProtoIKE, Transforms: append([]Transform{{Type: TransformEncr, ID: EncrAESGCM16, KeyLen: 256},
			tr(TransformPRF, PRFHMACSHA384), tr(TransformDH, DHCurve25519)}, ts...)}
	}
	must, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768")
	opt, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none")
	if s, err := checkChosen(must, chosen(tr(6, MLKEM768)), false); err != nil || s.AddKE[0] != MLKEM768 {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := checkChosen(must, chosen(), false); err == nil {
		t.Fatal("a choice without the ADDKE1 we require accepted")
	}
	if s, err := checkChosen(opt, chosen(), false); err != nil || s.AddKE != [7]uint16{} {
		t.Fatalf("choice leaving out an optional ADDKE1: %+v %v", s, err)
	}
	if s, err := checkChosen(opt, chosen(tr(6, DHNone)), false); err != nil || s.AddKE != [7]uint16{} {
		t.Fatalf("choice of ADDKE1 none: %+v %v", s, err)
	}
	if _, err := checkChosen(must, chosen(tr(6, MLKEM1024)), false); err == nil {
		t.Fatal("a method we did not offer accepted")
	}
	if _, err := checkChosen(must, chosen(tr(6, MLKEM768), tr(6, DHNone)), false); err == nil {
		t.Fatal("two ADDKE1 transforms accepted")
	}
	if _, err := checkChosen(must, chosen(tr(6, MLKEM768), tr(7, MLKEM768)), false); err == nil {
		t.Fatal("an ADDKE2 we did not offer accepted")
	}
}

// TestSelectUnknownTransformType: RFC 7296 section 3.3.6, a proposal with
// a transform type the responder does not know is unacceptable (before
// RFC 9370's types were known, one with ADDKE1 was taken as if it had
// none, and the initiator would have waited for an IKE_INTERMEDIATE).
func TestSelectUnknownTransformType(t *testing.T) {
	ours, _ := ParseProposals(ProtoIKE, "aes128-sha256-ecp256")
	theirs, _ := ParseProposals(ProtoIKE, "aes128-sha256-ecp256,aes128-sha256-ecp256")
	theirs[0].Transforms = append(theirs[0].Transforms, Transform{Type: 13, ID: 1})
	_, p, ok := selectProposal(ours, theirs, false)
	if !ok || p.Num != 2 {
		t.Fatalf("chose %+v %v, want proposal 2", p, ok)
	}
}

// TestSelectAddKEChild: IKE_AUTH ignores key exchanges in a Child SA's
// proposals (RFC 7296 section 1.2; RFC 9370 section 2.2.3 for ADDKE).
func TestSelectAddKEChild(t *testing.T) {
	ours, _ := ParseProposals(ProtoESP, "aes128gcm16")
	theirs, _ := ParseProposals(ProtoESP, "aes128gcm16-x25519")
	theirs[0].Transforms = append(theirs[0].Transforms, Transform{Type: TransformADDKE1, ID: MLKEM768})
	if s, _, ok := selectProposal(ours, theirs, true); !ok || s.ESPName() != "aes128gcm16" {
		t.Fatalf("%+v %v", s, ok)
	}
	if _, _, ok := selectProposal(ours, theirs, false); ok {
		t.Fatal("CREATE_CHILD_SA took a proposal with an ADDKE1 it cannot run")
	}
}

// TestStrongSwan598Proposals: the fallback the issue asks for, without
// the network: sluice offering "x25519-ke1_mlkem768" then "x25519" to a
// peer without RFC 9370 (strongSwan 5.9.8's proposals) gets the second,
// and a sluice responder configured that way chooses for such a peer as
// before. (TestStrongSwanAddKEFallback does it against charon.)
func TestStrongSwan598Proposals(t *testing.T) {
	sluice, err := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768,aes256gcm16-prfsha384-x25519")
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := ParseProposals(ProtoIKE, "aes128gcm16-aes256gcm16-prfsha256-prfsha384-ecp256-x25519,aes256-sha256-modp2048")
	// sluice as responder.
	s, p, ok := selectProposal(sluice, ss, false)
	if !ok || p.Num != 1 || s.Name() != "aes256gcm16-prfsha384-x25519" || s.AddKE != [7]uint16{} {
		t.Fatalf("responder: %q %+v %v", s.Name(), p, ok)
	}
	// sluice as initiator: strongSwan's choice from sluice's offer.
	s, p, ok = selectProposal(ss, sluice, false)
	if !ok || p.Num != 2 || s.Name() != "aes256gcm16-prfsha384-x25519" {
		t.Fatalf("initiator: %q %+v %v", s.Name(), p, ok)
	}
	if back, err := checkChosen(sluice, Proposal{Num: 2, Protocol: ProtoIKE, Transforms: s.transforms()}, false); err != nil || back != s {
		t.Fatalf("checkChosen: %+v %v", back, err)
	}
}

// TestWithoutAddKE: the proposals of an IKE SA rekey drop the additional
// key exchanges and leave the configuration's alone.
func TestWithoutAddKE(t *testing.T) {
	ps, _ := ParseProposals(ProtoIKE, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024")
	out := withoutAddKE(ps)
	if len(out[0].Transforms) != 3 || len(ps[0].Transforms) != 5 {
		t.Fatalf("%+v / %+v", out[0].Transforms, ps[0].Transforms)
	}
	s, _, ok := selectProposal(out, out, false)
	if !ok || s.Name() != "aes256gcm16-prfsha384-x25519" {
		t.Fatalf("%q", s.Name())
	}
}

// TestAddKEName: a suite with additional key exchanges is named in
// strongSwan 6's keywords and parses back.
func TestAddKEName(t *testing.T) {
	for _, kw := range []string{"aes256gcm16-prfsha384-x25519-ke1_mlkem768", "aes256gcm16-prfsha384-ecp384-ke1_mlkem768-ke3_mlkem1024"} {
		p, err := ParseProposals(ProtoIKE, kw)
		if err != nil {
			t.Fatal(err)
		}
		s, _, ok := selectProposal(p, p, false)
		if !ok || s.Name() != kw {
			t.Errorf("%s: %q", kw, s.Name())
		}
		if got := proposalsAttr(p).LogValue().String(); got != kw {
			t.Errorf("log: %q", got)
		}
	}
}
