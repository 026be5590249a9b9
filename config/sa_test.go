package config

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/cryptodev"
)

// seqKey returns n bytes counting up from start, as the testdata files use.
func seqKey(n int, start byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func TestParseValidFile(t *testing.T) {
	const file = "testdata/valid.toml"
	sas, err := LoadSAFile(file)
	if err != nil {
		t.Fatalf("LoadSAFile: %v", err)
	}
	pos := func(line int) Pos { return Pos{File: file, Line: line, Col: 1} }
	want := []SA{
		{
			Name: "gcm128-out", SPI: 0x1001,
			Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
			Mode: ModeTunnel, Encap: EncapNone,
			Alg: cryptodev.AES128GCM16, EncKey: seqKey(20, 0x00), AuthKey: nil,
			ReplayWindow: 64, Seq: 0, Pos: pos(3),
		},
		{
			Name: "gcm192-in", SPI: 4097,
			Src: netip.MustParseAddr("192.0.2.2"), Dst: netip.MustParseAddr("192.0.2.1"),
			Mode: ModeTransport, Encap: EncapUDP, SPort: 4501, DPort: 500,
			Alg: cryptodev.AES192GCM16, EncKey: seqKey(28, 0x10),
			ESN: true, ReplayWindow: 0, Seq: 1 << 32, Pos: pos(17),
		},
		{
			Name: "gcm256", SPI: 0x2002,
			Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"),
			Mode: ModeTunnel, Encap: EncapUDP, SPort: 4500, DPort: 4500,
			Alg: cryptodev.AES256GCM16, EncKey: seqKey(36, 0x20),
			ReplayWindow: 65536, Seq: 0xffffffff, Pos: pos(32),
		},
		{
			Name: "chacha", SPI: 0x2003, Dst: netip.MustParseAddr("2001:db8::2"),
			Mode: ModeTunnel, Encap: EncapNone,
			Alg: cryptodev.ChaCha20Poly1305, EncKey: seqKey(36, 0x40),
			ReplayWindow: 64, Pos: pos(43),
		},
	}
	// The CBC and NULL suites, in tunnel mode without encapsulation, with
	// no addresses and the default replay window.
	for _, k := range []struct {
		name      string
		spi       uint32
		alg       cryptodev.Alg
		enc, auth []byte
		line      int
	}{
		{"cbc128", 0x3001, cryptodev.AES128CBCSHA256, seqKey(16, 0x60), seqKey(32, 0x70), 50},
		{"cbc256", 0x3002, cryptodev.AES256CBCSHA256, seqKey(32, 0x90), seqKey(32, 0xb0), 57},
		{"cbc256-384", 0x3003, cryptodev.AES256CBCSHA384, seqKey(32, 0xd0), seqKey(48, 0x10), 64},
		{"cbc256-512", 0x3004, cryptodev.AES256CBCSHA512, seqKey(32, 0x50), seqKey(64, 0x80), 71},
		{"null", 0xffffffff, cryptodev.NullSHA256, nil, seqKey(32, 0xa0), 78},
		{"cbc128-384", 0x3005, cryptodev.AES128CBCSHA384, seqKey(16, 0x11), seqKey(48, 0x22), 84},
		{"cbc128-512", 0x3006, cryptodev.AES128CBCSHA512, seqKey(16, 0x33), seqKey(64, 0x44), 91},
	} {
		want = append(want, SA{
			Name: k.name, SPI: k.spi, Mode: ModeTunnel, Encap: EncapNone,
			Alg: k.alg, EncKey: k.enc, AuthKey: k.auth,
			ReplayWindow: 64, Pos: pos(k.line),
		})
	}
	if len(sas) != len(want) {
		t.Fatalf("got %d SAs, want %d", len(sas), len(want))
	}
	covered := make(map[cryptodev.Alg]bool)
	for i := range want {
		if !reflect.DeepEqual(sas[i], want[i]) {
			t.Errorf("sa[%d]:\n got %#v\nwant %#v", i+1, sas[i], want[i])
		}
		covered[sas[i].Alg] = true
	}
	for _, a := range cryptodev.Algs() {
		if !covered[a] {
			t.Errorf("testdata/valid.toml does not cover %s", a)
		}
	}
}

func TestDefaults(t *testing.T) {
	sas, err := LoadSAFile("testdata/defaults.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(sas) != 2 {
		t.Fatalf("got %d SAs, want 2", len(sas))
	}
	sa := sas[0]
	if sa.Name != "" || sa.Src.IsValid() || sa.Dst.IsValid() || sa.Mode != ModeTunnel ||
		sa.Encap != EncapNone || sa.SPort != 0 || sa.DPort != 0 || sa.ESN ||
		sa.ReplayWindow != DefaultReplayWindow || sa.Seq != 0 || sa.AuthKey != nil {
		t.Errorf("defaults: got %#v", sa)
	}
	udp := sas[1]
	if udp.Encap != EncapUDP || udp.SPort != 4500 || udp.DPort != 4500 {
		t.Errorf("udp defaults: got encap %q ports %d->%d", udp.Encap, udp.SPort, udp.DPort)
	}
	if udp.Alg != cryptodev.AES128GCM16 {
		t.Errorf("aes128gcm128 alias: got %s", udp.Alg)
	}
}

func TestEmptyFile(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "sa = []\n"} {
		sas, err := ParseSAs("empty.toml", []byte(doc))
		if err != nil || len(sas) != 0 {
			t.Errorf("%q: got %v, %v; want no SAs and no error", doc, sas, err)
		}
	}
}

func TestInlineArray(t *testing.T) {
	const file = "testdata/inline.toml"
	sas, err := LoadSAFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(sas) != 2 {
		t.Fatalf("got %d SAs", len(sas))
	}
	if got, want := sas[0].Pos, (Pos{File: file, Line: 2, Col: 3}); got != want {
		t.Errorf("sa[1].Pos = %v, want %v", got, want)
	}
	if got, want := sas[1].Pos, (Pos{File: file, Line: 3, Col: 3}); got != want {
		t.Errorf("sa[2].Pos = %v, want %v", got, want)
	}
	if sas[1].Alg != cryptodev.NullSHA256 || sas[1].SPort != 4500 || sas[1].DPort != 4501 {
		t.Errorf("sa[2] = %v", &sas[1])
	}
}

func TestLoadSAFileMissing(t *testing.T) { checkLoadMissing(t, LoadSAFile) }

// checkLoadMissing checks that load, given a file that does not exist,
// returns the os error.
func checkLoadMissing[T any](t *testing.T, load func(path string) (T, error)) {
	t.Helper()
	_, err := load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
}

// parseErrors parses doc and returns its errors, failing if there are none.
func parseErrors(t *testing.T, doc string) Errors {
	t.Helper()
	sas, err := ParseSAs("t.toml", []byte(doc))
	return failed(t, err, sas != nil, "SAs", fmt.Sprintf("%d SAs", len(sas)))
}

// failed checks that a parser that returned err and, if got, a result
// (what, described by desc) failed as it should: with Errors and no result.
// It returns the Errors.
func failed(t *testing.T, err error, got bool, what, desc string) Errors {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; got %s", desc)
	}
	if got {
		t.Errorf("got %s along with errors", what)
	}
	return asErrors(t, err)
}

// asErrors returns err as Errors, failing if it is not one.
func asErrors(t *testing.T, err error) Errors {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %T is not Errors: %v", err, err)
	}
	return errs
}

type wantErr struct {
	line  int
	field string
	msg   string // a substring of the message
}

func checkErrors(t *testing.T, errs Errors, want []wantErr) {
	t.Helper()
	ok := len(errs) == len(want)
	for i := 0; ok && i < len(want); i++ {
		e, w := errs[i], want[i]
		ok = e.Pos.Line == w.line && e.Field == w.field && strings.Contains(e.Msg, w.msg)
	}
	if !ok {
		var b strings.Builder
		for _, w := range want {
			b.WriteString("\n  ")
			b.WriteString((&Error{Pos: Pos{Line: w.line}, Field: w.field, Msg: "…" + w.msg + "…"}).Error())
		}
		t.Errorf("got errors:\n%v\nwant:%s", errs, b.String())
	}
}

// gcm is a valid aes128gcm16 SA body to build error cases on.
const gcm = "esp = \"aes128gcm16\"\nenc_key = \"000102030405060708090a0b0c0d0e0f10111213\"\n"

const cbcKeys = "enc_key = \"000102030405060708090a0b0c0d0e0f\"\n" +
	"auth_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\n"

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		// TOML itself.
		{"syntax", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\n", []wantErr{{3, "", "invalid TOML"}}},
		{"syntax value", "[[sa]]\nspi = \n", []wantErr{{2, "", "invalid TOML"}}},
		{"duplicate key", "[[sa]]\nspi = 0x1001\n" + gcm + "spi = 0x1002\n", []wantErr{{5, "", "already defined"}}},
		{"table redefined", "[[sa]]\nspi = 0x1001\n" + gcm + "[sa]\n", []wantErr{{5, "", "invalid TOML"}}},
		{"bad date", "[[sa]]\nspi = 0x1001\n" + gcm + "when = 2021-13-45\n", []wantErr{{5, "", "invalid TOML"}}},
		{"int overflow", "[[sa]]\nspi = 0xffffffffffffffff\n", []wantErr{{2, "", "invalid TOML"}}},

		// Structure and unknown keys.
		{"unknown top-level key", "\nfoo = 1\n[[sa]]\nspi = 0x1001\n" + gcm, []wantErr{{2, "foo", "unknown key"}}},
		{"unknown top-level table", "[[sa]]\nspi = 0x1001\n" + gcm + "[global]\nx = 1\n", []wantErr{{5, "global", "unknown key"}}},
		{"unknown key", "[[sa]]\nspi = 0x1001\n" + gcm + "spii = 3\n", []wantErr{{5, "sa[1].spii", "valid: name, spi"}}},
		{"key case", "[[sa]]\nSPI = 0x1001\n" + gcm, []wantErr{
			{1, "sa[1].spi", "missing required key"},
			{2, "sa[1].SPI", "did you mean spi?"},
		}},
		{"quoted unknown key", "[[sa]]\nspi = 0x1001\n" + gcm + "\"a b\" = 3\n", []wantErr{{5, `sa[1]."a b"`, "unknown key"}}},
		{"unknown subtable", "[[sa]]\nspi = 0x1001\n" + gcm + "[sa.extra]\nx = 1\n", []wantErr{{5, "sa[1].extra", "unknown key"}}},
		{"dotted key", "[[sa]]\nspi.x = 1\n" + gcm, []wantErr{{2, "sa[1].spi", "want an integer, got table"}}},
		{"sa is a table", "[sa]\nspi = 0x1001\n", []wantErr{{1, "sa", "write [[sa]]"}}},
		{"sa is an integer", "sa = 1\n", []wantErr{{1, "sa", "want an array of tables, got integer"}}},
		{"sa element not a table", "sa = [\n  1,\n]\n", []wantErr{{2, "sa[1]", "want a table, got integer"}}},

		// Types.
		{"spi string", "[[sa]]\nspi = \"0x1001\"\n" + gcm, []wantErr{{2, "sa[1].spi", "want an integer, got string"}}},
		{"spi float", "[[sa]]\nspi = 4097.0\n" + gcm, []wantErr{{2, "sa[1].spi", "want an integer, got float"}}},
		{"name integer", "[[sa]]\nname = 1\nspi = 0x1001\n" + gcm, []wantErr{{2, "sa[1].name", "want a string, got integer"}}},
		{"esp array", "[[sa]]\nspi = 0x1001\nesp = [\"aes128gcm16\"]\nenc_key = \"00\"\n", []wantErr{{3, "sa[1].esp", "want a string, got array"}}},
		{"enc_key integer", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = 0x1234\n", []wantErr{{4, "sa[1].enc_key", "want a string, got integer"}}},
		{"esn string", "[[sa]]\nspi = 0x1001\n" + gcm + "esn = \"yes\"\n", []wantErr{{5, "sa[1].esn", "want a boolean"}}},
		{"replay float", "[[sa]]\nspi = 0x1001\n" + gcm + "replay_window = 1.5\n", []wantErr{{5, "sa[1].replay_window", "got float"}}},
		{"seq date", "[[sa]]\nspi = 0x1001\n" + gcm + "seq = 1979-05-27\n", []wantErr{{5, "sa[1].seq", "got local date"}}},
		{"port string", "[[sa]]\nspi = 0x1001\n" + gcm + "encap = \"udp\"\nsport = \"4500\"\n", []wantErr{{6, "sa[1].sport", "want an integer, got string"}}},
		{"mode inline table", "[[sa]]\nspi = 0x1001\n" + gcm + "mode = { x = 1 }\n", []wantErr{{5, "sa[1].mode", "want a string, got table"}}},

		// Required keys, reported at the table.
		{"missing spi", "\n[[sa]]\n" + gcm, []wantErr{{2, "sa[1].spi", "missing required key"}}},
		{"missing esp", "[[sa]]\nspi = 0x1001\nenc_key = \"00\"\n", []wantErr{{1, "sa[1].esp", "missing required key"}}},
		{"missing everything", "[[sa]]\n", []wantErr{
			{1, "sa[1].spi", "missing"}, {1, "sa[1].esp", "missing"}, {1, "sa[1].enc_key", "missing"},
		}},
		{"missing enc_key", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\n", []wantErr{{1, "sa[1].enc_key", "missing required key (for aes128gcm16, want 20 bytes as hex: 16-byte key + 4-byte salt)"}}},
		{"missing auth_key", "[[sa]]\nspi = 0x1001\nesp = \"aes256-sha384\"\nenc_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\n", []wantErr{{1, "sa[1].auth_key", "missing required key (for aes256-sha384, want 48 bytes as hex: HMAC-SHA-384 key)"}}},

		// Values.
		{"spi 255", "[[sa]]\nspi = 255\n" + gcm, []wantErr{{2, "sa[1].spi", "SPI 255 out of range (want 256..0xffffffff; 1..255 are reserved by IANA"}}},
		{"spi 0", "[[sa]]\nspi = 0\n" + gcm, []wantErr{{2, "sa[1].spi", "out of range"}}},
		{"spi negative", "[[sa]]\nspi = -4097\n" + gcm, []wantErr{{2, "sa[1].spi", "out of range"}}},
		{"spi 2^32", "[[sa]]\nspi = 0x1_0000_0000\n" + gcm, []wantErr{{2, "sa[1].spi", "out of range"}}},
		{"unknown esp", "[[sa]]\nspi = 0x1001\nesp = \"aes128-ccm\"\nenc_key = \"00\"\n", []wantErr{{3, "sa[1].esp", `unknown ESP algorithm "aes128-ccm" (valid: aes128gcm16,`}}},
		{"mode", "[[sa]]\nspi = 0x1001\n" + gcm + "mode = \"Tunnel\"\n", []wantErr{{5, "sa[1].mode", "valid: tunnel, transport"}}},
		{"encap", "[[sa]]\nspi = 0x1001\n" + gcm + "encap = \"esp\"\n", []wantErr{{5, "sa[1].encap", "unknown encapsulation"}}},
		{"bad ip", "[[sa]]\nspi = 0x1001\n" + gcm + "src = \"192.0.2.256\"\n", []wantErr{{5, "sa[1].src", "invalid IP address"}}},
		{"hostname", "[[sa]]\nspi = 0x1001\n" + gcm + "dst = \"gw.example\"\n", []wantErr{{5, "sa[1].dst", "invalid IP address"}}},
		{"prefix", "[[sa]]\nspi = 0x1001\n" + gcm + "dst = \"192.0.2.0/24\"\n", []wantErr{{5, "sa[1].dst", "not a prefix"}}},
		{"zone", "[[sa]]\nspi = 0x1001\n" + gcm + "dst = \"fe80::1%eth0\"\n", []wantErr{{5, "sa[1].dst", "zones"}}},
		{"4in6", "[[sa]]\nspi = 0x1001\n" + gcm + "dst = \"::ffff:192.0.2.1\"\n", []wantErr{{5, "sa[1].dst", "write the IPv4 address 192.0.2.1"}}},
		{"family", "[[sa]]\nspi = 0x1001\n" + gcm + "src = \"192.0.2.1\"\ndst = \"2001:db8::1\"\n", []wantErr{{6, "sa[1].dst", "differs from src"}}},
		{"family dst first", "[[sa]]\nspi = 0x1001\n" + gcm + "dst = \"2001:db8::1\"\nsrc = \"192.0.2.1\"\n", []wantErr{{5, "sa[1].dst", "differs from src"}}},
		{"port without udp", "[[sa]]\nspi = 0x1001\n" + gcm + "sport = 4500\n", []wantErr{{5, "sa[1].sport", `only valid with encap = "udp"`}}},
		{"port with encap none", "[[sa]]\nspi = 0x1001\n" + gcm + "encap = \"none\"\ndport = 4500\n", []wantErr{{6, "sa[1].dport", `only valid with encap = "udp"`}}},
		{"port 0", "[[sa]]\nspi = 0x1001\n" + gcm + "encap = \"udp\"\nsport = 0\n", []wantErr{{6, "sa[1].sport", "want 1..65535"}}},
		{"port 65536", "[[sa]]\nspi = 0x1001\n" + gcm + "dport = 65536\nencap = \"udp\"\n", []wantErr{{5, "sa[1].dport", "want 1..65535"}}},
		{"replay too big", "[[sa]]\nspi = 0x1001\n" + gcm + "replay_window = 65537\n", []wantErr{{5, "sa[1].replay_window", "want 0..65536"}}},
		{"replay negative", "[[sa]]\nspi = 0x1001\n" + gcm + "replay_window = -1\n", []wantErr{{5, "sa[1].replay_window", "out of range"}}},
		{"seq needs esn", "[[sa]]\nspi = 0x1001\n" + gcm + "seq = 4294967296\n", []wantErr{{5, "sa[1].seq", "needs esn = true"}}},
		{"seq needs esn false", "[[sa]]\nspi = 0x1001\n" + gcm + "esn = false\nseq = 0x1_0000_0000\n", []wantErr{{6, "sa[1].seq", "needs esn = true"}}},
		{"seq negative", "[[sa]]\nspi = 0x1001\n" + gcm + "seq = -1\n", []wantErr{{5, "sa[1].seq", "negative"}}},
		{"empty name", "[[sa]]\nname = \"\"\nspi = 0x1001\n" + gcm, []wantErr{{2, "sa[1].name", "empty name"}}},
		{"control name", "[[sa]]\nname = \"a\\u0007b\"\nspi = 0x1001\n" + gcm, []wantErr{{2, "sa[1].name", "control"}}},

		// Keys.
		{"enc_key length", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = \"0x001122334455667788990011\"\n",
			[]wantErr{{4, "sa[1].enc_key", "wrong length 12 bytes for aes128gcm16 (want 20: 16-byte key + 4-byte salt)"}}},
		{"enc_key cbc length", "[[sa]]\nspi = 0x1001\nesp = \"aes256-sha256\"\n" + cbcKeys,
			[]wantErr{{4, "sa[1].enc_key", "wrong length 16 bytes for aes256-sha256 (want 32: AES-256 key)"}}},
		{"auth_key length", "[[sa]]\nspi = 0x1001\nesp = \"aes256-sha512\"\nenc_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\nauth_key = \"0011\"\n",
			[]wantErr{{5, "sa[1].auth_key", "wrong length 2 bytes for aes256-sha512 (want 64: HMAC-SHA-512 key)"}}},
		{"auth_key with aead", "[[sa]]\nspi = 0x1001\n" + gcm + "auth_key = \"00112233\"\n", []wantErr{{5, "sa[1].auth_key", "must be empty for aes128gcm16"}}},
		{"enc_key with null", "[[sa]]\nspi = 0x1001\nesp = \"null-sha256\"\nenc_key = \"0011\"\n" +
			"auth_key = \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\"\n",
			[]wantErr{{4, "sa[1].enc_key", "must be empty for null-sha256"}}},
		{"bad hex", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = \"0x00zz\"\n", []wantErr{{4, "sa[1].enc_key", "not hex: invalid character at position 5"}}},
		{"odd hex", "[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = \"001\"\n", []wantErr{{4, "sa[1].enc_key", "odd number of hex digits (3)"}}},
		{"bad hex auth", "[[sa]]\nspi = 0x1001\nesp = \"aes128-sha256\"\nenc_key = \"000102030405060708090a0b0c0d0e0f\"\nauth_key = \"00:11\"\n", []wantErr{{5, "sa[1].auth_key", "not hex"}}},
		{"bad hex unknown alg", "[[sa]]\nspi = 0x1001\nesp = \"des\"\nenc_key = \"0g\"\n", []wantErr{
			{3, "sa[1].esp", "unknown ESP algorithm"}, {4, "sa[1].enc_key", "not hex"},
		}},

		// Across SAs.
		{"duplicate name", "[[sa]]\nname = \"x\"\nspi = 0x1001\n" + gcm + "\n[[sa]]\nname = \"x\"\nspi = 0x1002\n" + gcm,
			[]wantErr{{8, "sa[2].name", `duplicate name "x": sa[1] (line 2) and sa[2] (line 8)`}}},
		{"duplicate spi same dst", "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.1\"\n" + gcm + "[[sa]]\nspi = 4097\ndst = \"192.0.2.1\"\n" + gcm,
			[]wantErr{{7, "sa[2].spi", "duplicate SPI 0x00001001: sa[1] (line 2) and sa[2] (line 7) both use it with the same dst 192.0.2.1"}}},
		{"duplicate spi no dst", "[[sa]]\nspi = 0x1001\n" + gcm + "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.1\"\n" + gcm,
			[]wantErr{{6, "sa[2].spi", "sa[1] (line 2) and sa[2] (line 6) both use it and sa[1] has no dst"}}},
		{"duplicate spi second no dst", "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.1\"\n" + gcm + "[[sa]]\nspi = 0x1001\n" + gcm,
			[]wantErr{{7, "sa[2].spi", "and sa[2] has no dst"}}},
		{"duplicate spi after distinct dsts", "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.1\"\n" + gcm + "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.2\"\n" + gcm +
			"[[sa]]\nspi = 0x1001\n" + gcm + "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.2\"\n" + gcm,
			[]wantErr{
				{12, "sa[3].spi", "sa[1] (line 2) and sa[3] (line 12) both use it and sa[3] has no dst"},
				{16, "sa[4].spi", "sa[2] (line 7) and sa[4] (line 16) both use it with the same dst 192.0.2.2"},
			}},
		{"top level and sa errors", "x = 1\n[[sa]]\nspi = 1\n" + gcm + "[y]\n", []wantErr{
			{1, "x", "unknown key"}, {3, "sa[1].spi", "out of range"}, {6, "y", "unknown key"},
		}},
		{"duplicate spi inline", "sa = [\n {spi = 0x1001, " + strings.ReplaceAll(strings.TrimSpace(gcm), "\n", ", ") + "},\n" +
			" {spi = 0x1001, " + strings.ReplaceAll(strings.TrimSpace(gcm), "\n", ", ") + "},\n]\n",
			[]wantErr{{3, "sa[2].spi", "sa[1] (line 2) and sa[2] (line 3)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, parseErrors(t, tt.doc), tt.want)
		})
	}
}

func TestSameSPIDistinctDst(t *testing.T) {
	doc := "[[sa]]\nspi = 0x1001\ndst = \"192.0.2.1\"\n" + gcm +
		"[[sa]]\nspi = 0x1001\ndst = \"192.0.2.2\"\n" + gcm +
		"[[sa]]\nspi = 0x1001\ndst = \"2001:db8::1\"\n" + gcm
	sas, err := ParseSAs("t.toml", []byte(doc))
	if err != nil || len(sas) != 3 {
		t.Fatalf("got %d SAs, %v", len(sas), err)
	}
}

func TestManySAs(t *testing.T) {
	var b strings.Builder
	const n = 3000
	for i := range n {
		fmt.Fprintf(&b, "[[sa]]\nname = \"sa%d\"\nspi = 0x1001\ndst = \"10.%d.%d.1\"\n%s", i, i/256, i%256, gcm)
	}
	sas, err := ParseSAs("many.toml", []byte(b.String()))
	if err != nil || len(sas) != n {
		t.Fatalf("got %d SAs, %v", len(sas), err)
	}
}

func TestErrorsFromSeveralSAs(t *testing.T) {
	_, err := LoadSAFile("testdata/errors.toml")
	errs := asErrors(t, err)
	checkErrors(t, errs, []wantErr{
		{7, "sa[1].enc_key", "wrong length 8 bytes for aes128gcm16"},
		{9, "sa[2].auth_key", "missing required key"},
		{10, "sa[2].name", `duplicate name "a": sa[1] (line 3) and sa[2] (line 10)`},
		{11, "sa[2].spi", "want an integer, got string"},
		{14, "sa[2].replay_window", "out of range"},
		{17, "sa[3].spi", "duplicate SPI 0x00001001: sa[1] (line 4) and sa[3] (line 17)"},
		{19, "sa[3].src", "invalid IP address"},
		{22, "sa[3].colour", "unknown key"},
		{24, "sa[4].esp", "missing required key"},
		{24, "sa[4].enc_key", "missing required key"},
	})
	// Every error names the file, and Errors joins them one per line.
	for _, e := range errs {
		if e.Pos.File != "testdata/errors.toml" || e.Pos.Col < 1 {
			t.Errorf("bad position %v in %v", e.Pos, e)
		}
	}
	if n := strings.Count(err.Error(), "\n"); n != len(errs)-1 {
		t.Errorf("Error() has %d newlines for %d errors", n, len(errs))
	}
}

func TestSyntaxErrorFile(t *testing.T) {
	_, err := LoadSAFile("testdata/syntax.toml")
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("got %v, want one error", err)
	}
	e := errs[0]
	if e.Pos.Line != 3 || e.Pos.Col < 7 || e.Field != "" || !strings.Contains(e.Msg, "invalid TOML") {
		t.Errorf("got %v", e)
	}
}

func TestErrorFormat(t *testing.T) {
	doc := "[[sa]]\nspi = 0x1001\n\n[[sa]]\nspi = 0x1002\nesp = \"aes128gcm16\"\nenc_key = \"0x001122334455667788990011\"\n"
	_, err := ParseSAs("sa.toml", []byte(doc))
	want := "sa.toml:1:1: sa[1].esp: missing required key (an ESP algorithm: " + algList() + ")\n" +
		"sa.toml:1:1: sa[1].enc_key: missing required key (hex key material; its length depends on esp)\n" +
		"sa.toml:7:11: sa[2].enc_key: wrong length 12 bytes for aes128gcm16 (want 20: 16-byte key + 4-byte salt)"
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
	if got := (&Error{Pos: Pos{Line: 3, Col: 4}, Msg: "m"}).Error(); got != "3:4: m" {
		t.Errorf("no file: got %q", got)
	}
	var nilErrs Errors
	if nilErrs.Err() != nil {
		t.Error("empty Errors.Err() is not nil")
	}
}

func TestColumns(t *testing.T) {
	doc := "[[sa]]\n  spi   =   \"x\"\n" + gcm + "\t[sa.sub]\n"
	errs := parseErrors(t, doc)
	if len(errs) != 2 {
		t.Fatalf("got %v", errs)
	}
	if got := errs[0].Pos; got.Line != 2 || got.Col != 13 {
		t.Errorf("spi value at %v, want 2:13", got)
	}
	if got := errs[1].Pos; got.Line != 5 || got.Col != 6 {
		t.Errorf("sub key at %v, want 5:6", got)
	}
}

func TestCRLF(t *testing.T) {
	doc := strings.ReplaceAll("[[sa]]\nspi = 0x1001\n"+gcm+"\n[[sa]]\nspi = 1\n"+gcm, "\n", "\r\n")
	errs := parseErrors(t, doc)
	checkErrors(t, errs, []wantErr{{7, "sa[2].spi", "out of range"}})
	if errs[0].Pos.Col != 7 {
		t.Errorf("col %d, want 7", errs[0].Pos.Col)
	}
}

func TestNoKeyMaterialInErrors(t *testing.T) {
	const key = "c0ffee11c0ffee22c0ffee33c0ffee44" // 16 bytes
	docs := []string{
		// wrong lengths for every suite
		"[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = \"" + key + "\"\nauth_key = \"" + key + "\"\n",
		"[[sa]]\nspi = 0x1001\nesp = \"aes256-sha512\"\nenc_key = \"" + key + "\"\nauth_key = \"" + key + "\"\n",
		"[[sa]]\nspi = 0x1001\nesp = \"null-sha256\"\nenc_key = \"" + key + "\"\nauth_key = \"" + key + "\"\n",
		// bad hex and odd lengths
		"[[sa]]\nspi = 0x1001\nesp = \"aes128gcm16\"\nenc_key = \"" + key + "zz\"\nauth_key = \"" + key + "0\"\n",
		// key material pasted into other fields
		"[[sa]]\nname = \"" + key + "\"\nspi = 0x1001\nesp = \"" + key + "\"\nmode = \"" + key + "\"\nencap = \"" + key + "\"\nsrc = \"" + key + "\"\nenc_key = \"" + key + "\"\n",
	}
	for _, doc := range docs {
		_, err := ParseSAs("t.toml", []byte(doc))
		if err == nil {
			t.Fatalf("no error for %q", doc)
		}
		if strings.Contains(strings.ToLower(err.Error()), key[:16]) {
			t.Errorf("key material in error:\n%v", err)
		}
	}
}

func TestSAString(t *testing.T) {
	sas, err := LoadSAFile("testdata/valid.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gcm128-out spi=0x00001001 192.0.2.1->192.0.2.2 tunnel aes128gcm16 replay=64",
		"gcm192-in spi=0x00001001 192.0.2.2->192.0.2.1 transport udp 4501->500 aes192gcm16 esn replay=0",
		"gcm256 spi=0x00002002 2001:db8::1->2001:db8::2 tunnel udp 4500->4500 aes256gcm16 replay=65536",
		"chacha spi=0x00002003 any->2001:db8::2 tunnel chacha20poly1305 replay=64",
	}
	for i, w := range want {
		if got := sas[i].String(); got != w {
			t.Errorf("sa[%d].String() = %q, want %q", i+1, got, w)
		}
	}
	for i := range sas {
		s := sas[i].String()
		for _, k := range [][]byte{sas[i].EncKey, sas[i].AuthKey} {
			if len(k) >= 4 && strings.Contains(strings.ToLower(s), hex.EncodeToString(k[:4])) {
				t.Errorf("key material in %q", s)
			}
		}
	}
	odd := SA{Name: "a b", SPI: 256}
	if got, want := odd.String(), `"a b" spi=0x00000100 any->any  alg(0) replay=0`; got != want {
		t.Errorf("zero SA: got %q, want %q", got, want)
	}
}

// TestDecodeSAsInLargerDocument shows the SA decoding reused by a document
// that has keys of its own, as the gateway configuration will.
func TestDecodeSAsInLargerDocument(t *testing.T) {
	doc := "[gateway]\nlisten = \"0.0.0.0\"\n\n[[sa]]\nspi = 0x1001\n" + gcm + "\n[[sa]]\nspi = 1\n" + gcm
	d, err := ParseDocument("gw.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	gw := d.Root.Lookup("gateway")
	if gw == nil || gw.KeyPos.Line != 1 {
		t.Fatalf("gateway entry: %+v", gw)
	}
	tbl, ok := gw.Value.Table()
	if !ok {
		t.Fatal("gateway is not a table")
	}
	if l := tbl.Lookup("listen"); l == nil || l.Value.Pos != (Pos{File: "gw.toml", Line: 2, Col: 10}) {
		t.Fatalf("listen entry: %+v", l)
	}
	sas, errs := DecodeSAs("sa", d.Root.Lookup("sa").Value)
	if len(sas) != 2 || sas[0].SPI != 0x1001 {
		t.Errorf("got %v", sas)
	}
	checkErrors(t, errs, []wantErr{{10, "sa[2].spi", "out of range"}})
}

func TestDocumentTree(t *testing.T) {
	doc := `a.b.c = 1
x = [1, [2, 3], {k = "v"}]
[t]
s = 'lit'
f = 1.5
d = 1979-05-27T07:32:00Z
[t.sub]
n = true
[[arr]]
v = 1
[arr.in]
w = 2
[[arr]]
v = 0b11
`
	d, err := ParseDocument("d.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	get := func(tb *Table, path ...string) *Value {
		t.Helper()
		var v *Value
		for i, k := range path {
			e := tb.Lookup(k)
			if e == nil {
				t.Fatalf("no %v", path[:i+1])
			}
			v = e.Value
			if i < len(path)-1 {
				tb, _ = v.Table()
			}
		}
		return v
	}
	if i, ok := get(d.Root, "a", "b", "c").Int(); !ok || i != 1 {
		t.Errorf("a.b.c = %d", i)
	}
	xs, ok := get(d.Root, "x").Array()
	if !ok || len(xs) != 3 || xs[1].Kind != KindArray || xs[2].Kind != KindTable {
		t.Fatalf("x = %+v", xs)
	}
	if p := get(d.Root, "x").Pos; p.Line != 2 || p.Col != 5 {
		t.Errorf("x at %v, want 2:5", p)
	}
	if s, _ := get(d.Root, "t", "s").Str(); s != "lit" {
		t.Errorf("t.s = %q", s)
	}
	if v := get(d.Root, "t", "f"); v.Kind != KindFloat || v.Source() != "1.5" {
		t.Errorf("t.f = %+v", v)
	}
	if v := get(d.Root, "t", "d"); v.Kind != KindDateTime {
		t.Errorf("t.d kind %v", v.Kind)
	}
	if b, ok := get(d.Root, "t", "sub", "n").Bool(); !ok || !b {
		t.Errorf("t.sub.n")
	}
	arr, _ := get(d.Root, "arr").Array()
	if len(arr) != 2 || arr[0].Pos.Line != 9 || arr[1].Pos.Line != 13 {
		t.Fatalf("arr = %+v", arr)
	}
	t0, _ := arr[0].Table()
	if w, _ := get(t0, "in", "w").Int(); w != 2 {
		t.Errorf("arr[0].in.w = %d", w)
	}
	t1, _ := arr[1].Table()
	if v, _ := get(t1, "v").Int(); v != 3 {
		t.Errorf("arr[1].v = %d", v)
	}
	var keys []string
	for _, e := range d.Root.Entries() {
		keys = append(keys, e.Key)
	}
	if strings.Join(keys, ",") != "a,x,t,arr" {
		t.Errorf("root keys %v", keys)
	}
}

// addSeeds adds the contents of files, and docs, to f's seed corpus.
func addSeeds(f *testing.F, files, docs []string) {
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range docs {
		f.Add([]byte(s))
	}
}

// checkFuzzErrors checks the error of a parser given data (parsed as file
// name): a non-empty Errors in file order, each naming the file, a line of
// data and a column within that line (at most one past its end), with a
// one-line message that starts "FILE:LINE:COL: ".
func checkFuzzErrors(t *testing.T, name string, data []byte, err error) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error is not a non-empty Errors: %v", err)
	}
	lines := bytes.Split(data, []byte("\n"))
	for i, e := range errs {
		msg := e.Error()
		if e.Pos.File != name || e.Pos.Line < 1 || e.Pos.Line > len(lines) || e.Msg == "" {
			t.Fatalf("bad error %q (document %s has %d lines)", msg, name, len(lines))
		}
		if e.Pos.Col < 1 || e.Pos.Col > len(lines[e.Pos.Line-1])+1 {
			t.Fatalf("error %q: column %d outside line %d (%q)", msg, e.Pos.Col, e.Pos.Line, lines[e.Pos.Line-1])
		}
		if !strings.HasPrefix(msg, fmt.Sprintf("%s:%d:%d: ", name, e.Pos.Line, e.Pos.Col)) || strings.Contains(msg, "\n") {
			t.Fatalf("error %q does not start with its position or is not one line", msg)
		}
		if i > 0 && (e.Pos.Line < errs[i-1].Pos.Line || e.Pos.Line == errs[i-1].Pos.Line && e.Pos.Col < errs[i-1].Pos.Col) {
			t.Fatalf("errors out of file order: %q before %q", errs[i-1].Error(), msg)
		}
	}
}

func FuzzParseSAs(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.toml")
	addSeeds(f, files, []string{
		"",
		"[[sa]]\n",
		"sa = [{spi = 0x1001, esp = \"null-sha256\", auth_key = \"00\"}]\n",
		"[[sa]]\nspi = 0x1001\n" + gcm + "[sa.x.y]\n[[sa.z]]\n",
		"[[sa]]\n\"spi\" = 4097\n'esp' = 'aes128gcm16'\nenc_key = \"\"\"\n0011\"\"\"\n",
		"a.b = 1\n[a.c]\n",
		"sa = [[1], {}, []]\n",
		"[[sa]]\nspi = 0x1001\nesn = true\nseq = 9223372036854775807\n" + gcm,
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		sas, err := ParseSAs("fuzz.toml", data)
		if err != nil {
			if sas != nil {
				t.Fatal("SAs returned with an error")
			}
			checkFuzzErrors(t, "fuzz.toml", data, err)
			return
		}
		for i := range sas {
			sa := &sas[i]
			if sa.SPI < MinSPI || !sa.Alg.Valid() ||
				len(sa.EncKey) != sa.Alg.EncKeyLen() ||
				(sa.Alg.Info().AEAD && len(sa.AuthKey) != 0) ||
				(!sa.Alg.Info().AEAD && len(sa.AuthKey) != sa.Alg.Info().AuthKeyLen) ||
				(sa.Mode != ModeTunnel && sa.Mode != ModeTransport) ||
				(sa.Encap == EncapUDP) != (sa.SPort != 0 && sa.DPort != 0) ||
				sa.ReplayWindow < 0 || sa.ReplayWindow > MaxReplayWindow ||
				(!sa.ESN && sa.Seq > 0xffffffff) ||
				(sa.Src.IsValid() && sa.Dst.IsValid() && sa.Src.Is4() != sa.Dst.Is4()) {
				t.Fatalf("invalid SA accepted: %#v", sa)
			}
			_ = sa.String()
		}
	})
}
