package ike_test

// The IKEv2 clients built into iOS, macOS, Android and Windows against the
// road-warrior responder of examples/ike-gateway.toml, in memory: an
// initiator offers exactly what each client sends (transform by IANA
// number, including what sluice does not implement, in the client's
// order), the responder has the proposals the example's connection gets
// from the config package. The suites are those strongSwan's interop
// pages list (docs.strongswan.org interop/ios and interop/windowsClients)
// and Android's VpnIkev2Utils builds; docs/road-warriors.md has the table.

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/internal/exampletest"
)

// IANA IKEv2 transform IDs the clients send (Transform Types 1 to 4).
const (
	encr3DES, encrAESCBC, encrAESCTR                = 3, 12, 13
	encrGCM8, encrGCM12, encrGCM16, encrChaCha      = 18, 19, 20, 28
	prfSHA1, prfXCBC, prfSHA256, prfSHA384, prfCMAC = 2, 4, 5, 6, 8
	prfSHA512                                       = 7
	intSHA1, intXCBC, intCMAC                       = 2, 5, 8
	intSHA256, intSHA384, intSHA512                 = 12, 13, 14
	dhMODP1024, dhMODP1536, dhMODP2048              = 2, 5, 14
	dhMODP3072, dhMODP4096, dhECP256, dhX25519      = 15, 16, 19, 31
)

// encr, prf, integ and dh are one transform each.
func encr(id, bits uint16) ike.Transform {
	return ike.Transform{Type: ike.TransformEncr, ID: id, KeyLen: bits}
}
func prf(id uint16) ike.Transform   { return ike.Transform{Type: ike.TransformPRF, ID: id} }
func integ(id uint16) ike.Transform { return ike.Transform{Type: ike.TransformInteg, ID: id} }
func dh(id uint16) ike.Transform    { return ike.Transform{Type: ike.TransformDH, ID: id} }

var noESN = ike.Transform{Type: ike.TransformESN, ID: ike.ESNNo}

// proposals numbers ps from 1 as protocol proto.
func proposals(proto uint8, ps ...[]ike.Transform) []ike.Proposal {
	out := make([]ike.Proposal, len(ps))
	for i, ts := range ps {
		out[i] = ike.Proposal{Num: uint8(i + 1), Protocol: proto, Transforms: ts}
	}
	return out
}

// cbc is one IKE proposal AES-CBC (or 3DES) / HMAC / PRF / group, as Apple
// and Windows send them one combination each.
func cbc(e ike.Transform, in, p, g uint16) []ike.Transform {
	return []ike.Transform{e, integ(in), prf(p), dh(g)}
}

// nativeClient is what one client sends: its IKE_SA_INIT proposals and
// its ESP proposals.
type nativeClient struct {
	name          string
	ike, esp      []ike.Proposal
	gwIKE         string // the gateway's IKE proposals if not the example's
	wantIKE       string // the suite chosen; "" for NO_PROPOSAL_CHOSEN
	wantESP       string // "" when no Child SA is made
	offeredLogged string // for a refusal: the offer as the WARN line must name it
}

var (
	aes256, aes128, aes192 = encr(encrAESCBC, 256), encr(encrAESCBC, 128), encr(encrAESCBC, 192)
	tdes                   = encr(encr3DES, 0)
)

func nativeClients() []nativeClient {
	ios := nativeClient{
		name: "iOS 16",
		ike: proposals(ike.ProtoIKE,
			cbc(aes256, intSHA256, prfSHA256, dhMODP2048), cbc(aes256, intSHA256, prfSHA256, dhECP256),
			cbc(aes256, intSHA256, prfSHA256, dhMODP1536), cbc(aes128, intSHA1, prfSHA1, dhMODP1024),
			cbc(tdes, intSHA1, prfSHA1, dhMODP1024)),
		// iOS rekeys with a proposal with its IKE group first and then
		// the same without (IKE_AUTH leaves the group out of the choice).
		esp: proposals(ike.ProtoESP,
			[]ike.Transform{aes256, integ(intSHA256), dh(dhMODP2048), noESN}, []ike.Transform{aes256, integ(intSHA256), noESN},
			[]ike.Transform{aes128, integ(intSHA1), noESN}, []ike.Transform{tdes, integ(intSHA1), noESN}),
		wantIKE: "aes256-sha256-prfsha256-modp2048", wantESP: "aes256-sha256",
	}
	macos := nativeClient{
		name: "macOS 13",
		ike: proposals(ike.ProtoIKE,
			cbc(aes256, intSHA256, prfSHA256, dhMODP2048), cbc(aes256, intSHA256, prfSHA256, dhMODP1536),
			cbc(aes128, intSHA1, prfSHA1, dhMODP1024), cbc(tdes, intSHA1, prfSHA1, dhMODP1024)),
		esp: proposals(ike.ProtoESP,
			[]ike.Transform{aes256, integ(intSHA256), noESN}, []ike.Transform{aes128, integ(intSHA1), noESN},
			[]ike.Transform{tdes, integ(intSHA1), noESN}),
		wantIKE: "aes256-sha256-prfsha256-modp2048", wantESP: "aes256-sha256",
	}
	// Android 11 and later (VpnIkev2Utils): one non-AEAD and one AEAD
	// proposal, each with every algorithm it has.
	androidGroups := []ike.Transform{dh(dhMODP4096), dh(dhX25519), dh(dhMODP3072), dh(dhMODP2048)}
	androidPRFs := []ike.Transform{prf(prfSHA512), prf(prfSHA384), prf(prfSHA256), prf(prfXCBC), prf(prfCMAC), prf(prfSHA1)}
	var androidCBC, androidAEAD, androidESPCBC, androidESPAEAD []ike.Transform
	for _, bits := range []uint16{256, 192, 128} {
		androidCBC = append(androidCBC, encr(encrAESCTR, bits), encr(encrAESCBC, bits))
		androidESPCBC = append(androidESPCBC, encr(encrAESCBC, bits))
	}
	androidCBC = append(androidCBC, integ(intSHA512), integ(intSHA384), integ(intSHA256), integ(intXCBC), integ(intCMAC))
	androidCBC = append(append(androidCBC, androidGroups...), androidPRFs...)
	androidAEAD = append(androidAEAD, encr(encrChaCha, 0))
	for _, bits := range []uint16{256, 192, 128} {
		androidAEAD = append(androidAEAD, encr(encrGCM16, bits), encr(encrGCM12, bits), encr(encrGCM8, bits))
		androidESPAEAD = append(androidESPAEAD, encr(encrGCM16, bits), encr(encrGCM12, bits), encr(encrGCM8, bits))
	}
	androidAEAD = append(append(androidAEAD, androidGroups...), androidPRFs...)
	androidESPCBC = append(androidESPCBC, integ(intSHA512), integ(intSHA384), integ(intSHA256), noESN)
	androidESPAEAD = append(androidESPAEAD, noESN)
	android := nativeClient{
		name:    "Android 11+",
		ike:     proposals(ike.ProtoIKE, androidCBC, androidAEAD),
		esp:     proposals(ike.ProtoESP, androidESPCBC, androidESPAEAD),
		wantIKE: "aes256gcm16-prfsha384-x25519", wantESP: "aes256gcm16",
	}
	// Windows 10 and 11 as installed: 3DES or AES-256, SHA-1/256/384, all
	// with MODP 1024; ESP with HMAC-SHA-1 only.
	var winIKE [][]ike.Transform
	for _, h := range [][2]uint16{{intSHA1, prfSHA1}, {intSHA256, prfSHA256}, {intSHA384, prfSHA384}} {
		winIKE = append(winIKE, cbc(tdes, h[0], h[1], dhMODP1024), cbc(aes256, h[0], h[1], dhMODP1024))
	}
	winESP := proposals(ike.ProtoESP,
		[]ike.Transform{aes256, integ(intSHA1), noESN}, []ike.Transform{aes128, integ(intSHA1), noESN},
		[]ike.Transform{tdes, integ(intSHA1), noESN})
	windows := nativeClient{
		name: "Windows default",
		ike:  proposals(ike.ProtoIKE, winIKE...),
		esp:  winESP,
		offeredLogged: "ENCR_3DES-sha1-prfsha1-modp1024,aes256-sha1-prfsha1-modp1024,ENCR_3DES-sha256-prfsha256-modp1024," +
			"aes256-sha256-prfsha256-modp1024,ENCR_3DES-sha384-prfsha384-modp1024,aes256-sha384-prfsha384-modp1024",
	}
	// Set-VpnConnectionIPsecConfiguration -EncryptionMethod AES256
	// -IntegrityCheckMethod SHA256 -DHGroup Group14
	// -CipherTransformConstants GCMAES256
	// -AuthenticationTransformConstants GCMAES256 -PfsGroup None.
	windowsSet := nativeClient{
		name:    "Windows after Set-VpnConnectionIPsecConfiguration",
		ike:     proposals(ike.ProtoIKE, cbc(aes256, intSHA256, prfSHA256, dhMODP2048)),
		esp:     proposals(ike.ProtoESP, []ike.Transform{encr(encrGCM16, 256), noESN}),
		wantIKE: "aes256-sha256-prfsha256-modp2048", wantESP: "aes256gcm16",
	}
	// The registry's NegotiateDH2048_AES256 = 2 makes IKE strong but
	// leaves ESP at HMAC-SHA-1: the IKE SA comes up, the Child SA not.
	windowsReg := nativeClient{
		name: "Windows with NegotiateDH2048_AES256",
		ike: proposals(ike.ProtoIKE, cbc(aes256, intSHA1, prfSHA1, dhMODP2048), cbc(aes256, intSHA256, prfSHA256, dhMODP2048),
			cbc(aes256, intSHA384, prfSHA384, dhMODP2048)),
		esp:           winESP,
		wantIKE:       "aes256-sha256-prfsha256-modp2048",
		offeredLogged: "aes256-AUTH_HMAC_SHA1_96-noesn,aes128-AUTH_HMAC_SHA1_96-noesn,ENCR_3DES-AUTH_HMAC_SHA1_96-noesn",
	}
	// With weak proposals the operator writes: iOS 9 to 11 offered
	// aes256-sha256-modp1024 (ESP aes256-sha256); Windows' own IKE
	// suite is taken too, its ESP HMAC-SHA-1 still refused.
	legacyIOS := nativeClient{
		name:    "iOS 9 with a modp1024 proposal written",
		ike:     proposals(ike.ProtoIKE, cbc(aes256, intSHA256, prfSHA256, dhMODP1024), cbc(tdes, intSHA1, prfSHA1, dhMODP1024)),
		esp:     proposals(ike.ProtoESP, []ike.Transform{aes256, integ(intSHA256), noESN}),
		gwIKE:   config.DefaultIKEProposals + ",aes256-sha256-modp1024",
		wantIKE: "aes256-sha256-prfsha256-modp1024", wantESP: "aes256-sha256",
	}
	windowsWeak := windows
	windowsWeak.name, windowsWeak.gwIKE = "Windows default with sha1 and modp1024 written", config.DefaultIKEProposals+",aes256-sha1-modp1024"
	windowsWeak.wantIKE, windowsWeak.offeredLogged = "aes256-sha1-prfsha1-modp1024", windowsReg.offeredLogged
	return []nativeClient{ios, macos, android, windows, windowsSet, windowsReg, legacyIOS, windowsWeak}
}

// exampleRoadWarrior is the road-warrior connection of
// examples/ike-gateway.toml (its commented block, uncommented), as the
// config package reads it.
func exampleRoadWarrior(t *testing.T) *config.Connection {
	t.Helper()
	rw, err := exampletest.RoadWarriors("../examples/ike-gateway.toml")
	if err != nil {
		t.Fatal(err)
	}
	doc := "[tun]\naddresses = [\"10.1.0.1/24\"]\n" + rw
	g, err := config.ParseGateway("examples/ike-gateway.toml", []byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	c := g.Connection("rw")
	if c == nil || len(c.Children) == 0 {
		t.Fatal("the example has no road-warrior connection with a child")
	}
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// TestNativeClientsAgainstExample: each native client's offer against the
// example's road-warrior proposals (the defaults). Apple's and Android's
// clients and Windows set to a strong suite get an IKE SA and a Child SA
// of the suites the docs name, and the clients' own rekeys of both go
// through; Windows as installed gets NO_PROPOSAL_CHOSEN with a WARN that
// names every transform it offered (modp1024 is not in the defaults), and
// Windows with only its registry change an IKE SA without a Child SA
// (ESP HMAC-SHA-1), the WARN naming its ESP offer. A gateway whose
// operator wrote a weak proposal takes old iOS (modp1024) and Windows'
// IKE suite (sha1, prfsha1, modp1024) through IKE_AUTH.
func TestNativeClientsAgainstExample(t *testing.T) {
	rw := exampleRoadWarrior(t)
	site, pool := netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("10.3.0.0/24")
	for _, c := range nativeClients() {
		t.Run(c.name, func(t *testing.T) {
			buf := new(ike.LogBuffer)
			log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			client := &ike.Peer{Name: "gw", LocalID: ike.ParseIdentity("carol@example.net"), RemoteID: ike.ParseIdentity("vpn.example"),
				PSK: []byte("native"), IKE: c.ike, ESP: c.esp, LocalTS: []netip.Prefix{pool}, RemoteTS: []netip.Prefix{site}}
			gw := &ike.Peer{Name: rw.Name, LocalID: ike.ParseIdentity("vpn.example"), PSK: []byte("native"),
				IKE: rw.IKE, ESP: rw.Children[0].ESP, LocalTS: rw.Children[0].LocalTS, RemoteTS: []netip.Prefix{pool}}
			if c.gwIKE != "" {
				var err error
				if gw.IKE, err = ike.ParseProposals(ike.ProtoIKE, c.gwIKE); err != nil {
					t.Fatal(err)
				}
			}
			p := ike.NewMemPair(t, client, gw, log)
			ctx := ctxFor(t, 10*time.Second)
			child, err := p.A.Initiate(ctx, "gw")
			switch {
			case c.wantESP != "":
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, buf.String())
				}
				resp := p.RespChild(t)
				if child.Suite != c.wantESP || resp.Suite != c.wantESP {
					t.Errorf("ESP %s/%s, want %s", child.Suite, resp.Suite, c.wantESP)
				}
			case err == nil:
				t.Fatalf("negotiated %s, want a refusal", child.Suite)
			}
			// The responder's choice (the initiator deletes the IKE SA
			// of a refused Child SA, as the clients do).
			chosen := ""
			for _, l := range buf.Lines("side=b", `msg="ike: IKE proposal chosen"`) {
				_, chosen, _ = strings.Cut(l, "suite=")
			}
			if chosen != c.wantIKE {
				t.Errorf("IKE suite %q, want %q", chosen, c.wantIKE)
			}
			if sas := p.B.IKESAs(); c.wantESP != "" && (len(sas) != 1 || sas[0].Suite != c.wantIKE) {
				t.Errorf("IKE SAs %+v, want one of %s", sas, c.wantIKE)
			}
			if c.offeredLogged != "" {
				msg := "no IKE proposal chosen"
				if c.wantIKE != "" {
					msg = "no ESP proposal chosen"
				}
				line := strings.Join(buf.Lines("level=WARN", "side=b", msg), "\n")
				if !strings.Contains(line, `offered=`+c.offeredLogged) && !strings.Contains(line, `offered="`+c.offeredLogged+`"`) {
					t.Errorf("WARN %q lacks offered=%s\n%s", line, c.offeredLogged, buf.String())
				}
			}
			if c.wantESP == "" {
				return
			}
			// The client's own rekeys: the Child SA (iOS with a PFS
			// proposal first, which the defaults' lack of a group
			// passes over), then the IKE SA.
			rekeyed, err := p.A.Rekey(ctx, child)
			if err != nil {
				t.Fatalf("Child SA rekey: %v\n%s", err, buf.String())
			}
			if rekeyed.Suite != c.wantESP {
				t.Errorf("rekeyed ESP %s, want %s", rekeyed.Suite, c.wantESP)
			}
			if err := p.A.RekeyIKE(ctx, rekeyed); err != nil {
				t.Fatalf("IKE SA rekey: %v\n%s", err, buf.String())
			}
			if t.Failed() {
				t.Log(buf.String())
			}
		})
	}
}
