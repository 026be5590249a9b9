package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// decodeFile encodes f and parses it back as the gateway configuration
// filename.
func decodeFile(t *testing.T, filename string, f *File) *Gateway {
	t.Helper()
	b, err := f.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	g, err := ParseGateway(filename, b)
	if err != nil {
		t.Fatalf("ParseGateway of the encoded file: %v\n%s", err, b)
	}
	return g
}

// withoutPositions zeroes what depends on where things are in the text:
// the position map and every Pos field.
func withoutPositions(g *Gateway) *Gateway {
	g.fields = nil
	var zero func(v reflect.Value)
	zero = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				zero(v.Elem())
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[Pos]() {
				v.Set(reflect.Zero(v.Type()))
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					zero(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				zero(v.Index(i))
			}
		}
	}
	zero(reflect.ValueOf(g))
	return g
}

// TestEncodeExamples builds Files that say what the examples say and
// checks that the encoded text parses to the same configuration as the
// hand-written example.
func TestEncodeExamples(t *testing.T) {
	for _, tc := range []struct {
		example string
		f       *File
	}{
		{"../examples/gateway-a.toml", &File{
			Gateway: FileGateway{Engine: "soft", ControlSocket: "/run/sluice/sluice.sock", LogLevel: "info", Oversize: "fragment", StateDir: "/var/lib/sluice"},
			TUN:     &FileTUN{Name: "sluice0", Addresses: []string{"10.1.0.1/24"}},
			UDP:     &FileUDP{Listen: "0.0.0.0:4500", GSO: new(true), GRO: new(true)},
			Tunnels: []FileTunnel{{Name: "to-b", Local: "192.0.2.1", Peer: "192.0.2.2", Encap: "udp", PeerPort: 4500,
				Remote: []string{"10.2.0.0/24"}, Out: "a-to-b", In: []string{"b-to-a"}}},
			SAs: []FileSA{
				{Name: "a-to-b", SPI: 0x1001, Src: "192.0.2.1", Dst: "192.0.2.2", Mode: "tunnel", Encap: "udp", ESP: "aes128gcm16",
					EncKey: "c0675727378d0319cf26c72a13033041625abcb9", ReplayWindow: new(64)},
				{Name: "b-to-a", SPI: 0x2001, Src: "192.0.2.2", Dst: "192.0.2.1", Mode: "tunnel", Encap: "udp", ESP: "aes128gcm16",
					EncKey: "488b578da4c130087b008fbc8ede4fdac1b02fe6", ReplayWindow: new(64)},
			},
		}},
		{"../examples/ike-gateway.toml", &File{
			Gateway: FileGateway{Engine: "soft", ControlSocket: "/run/sluice/sluice.sock", StateDir: "/var/lib/sluice"},
			TUN:     &FileTUN{Name: "sluice0", Addresses: []string{"10.1.0.1/24"}},
			UDP:     &FileUDP{Listen: "0.0.0.0:4500"},
			IKE:     &FileIKE{Port: 500, RetransmitTimeout: "1s", RetransmitTries: 5, MaxChildSAs: 1024, BlockThreshold: 5, KeepAlive: "20s"},
			Connections: []FileConnection{{
				Name: "site-b", Version: 2, LocalAddrs: []string{"192.0.2.1"}, RemoteAddrs: []string{"192.0.2.2"},
				Proposals: "aes256gcm16-prfsha384-ecp384-x25519,aes256-aes128-sha256-modp2048-ecp256-x25519", DPDDelay: "30s", RekeyTime: "4h", OverTime: "24m",
				Local:  FileAuth{Auth: "psk", ID: "gw-a.example"},
				Remote: FileAuth{Auth: "psk", ID: "gw-b.example"},
				Children: []FileChild{{Name: "site-b-net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.2.0.0/24"},
					ESPProposals: "aes256gcm16,aes128gcm16,aes256-sha256,aes128-sha256", StartAction: "start", RekeyTime: "1h", LifeTime: "66m"}},
			}},
			Secrets: []FileSecret{{Type: "ike", IDs: []string{"gw-a.example", "gw-b.example"},
				Secret: "0sZXhhbXBsZSBvbmx5LCBnZW5lcmF0ZSB5b3VyIG93bg=="}},
		}},
		{"../examples/tls-gateway.toml", &File{
			Gateway: FileGateway{Engine: "soft", ControlSocket: "/run/user/1000/sluice-tls.sock", LogLevel: "info"},
			TLS: []FileTLS{
				{Name: "web", Listen: "0.0.0.0:8443", IPv6Only: new(true), Backend: "static:www", HeaderTimeout: "10s",
					Versions: []string{"1.2", "1.3"}, ALPN: []string{"http/1.1"}, ClientAuth: "none", SessionTickets: new(true),
					TicketRotation: "1h", HandshakeTimeout: "10s", IdleTimeout: "5m", MaxConns: 10000, MaxConnsPerSource: 1000,
					Certs: []FileTLSCert{{Cert: "site.pem", Key: "site.key"}}},
				{Name: "app", Listen: "0.0.0.0:8444", Backend: "tcp://127.0.0.1:8080", ProxyProtocol: true,
					Certs: []FileTLSCert{{Cert: "site.pem", Key: "site.key"}}},
			},
			TLSOrigins: []FileTLSOrigin{{Name: "api", Listen: "127.0.0.1:9080", Backend: "tls://api.example.com:443",
				Versions: []string{"1.2", "1.3"}, HandshakeTimeout: "10s", IdleTimeout: "5m", MaxConns: 1000, MaxConnsPerSource: 100}},
		}},
		{"testdata/gateway-valid.toml", &File{
			Gateway: FileGateway{Workers: 8, Engine: "sched", ControlSocket: "/tmp/sluice-test.sock", Metrics: "[::1]:9100", LogLevel: "debug", Oversize: "drop"},
			TUN:     &FileTUN{Name: "gw0", MTU: 1400, Addresses: []string{"10.1.0.1/24", "2001:db8:1::1/64"}, Queues: 4},
			UDP:     &FileUDP{Listen: "192.0.2.1:4501", GSO: new(true), Link: "socket"},
			RawESP:  &FileRawESP{Listen: "::"},
			Tunnels: []FileTunnel{
				{Name: "to-b", Local: "192.0.2.1", Peer: "192.0.2.2", Encap: "udp", PeerPort: 4600, Remote: []string{"10.2.0.0/24", "10.20.0.0/16"},
					Out: "a-to-b", In: []string{"b-to-a", "b-to-a-new"}, Engine: "soft", MTU: 1380},
				{Name: "to-c", Local: "2001:db8::1", Peer: "2001:db8::3", Encap: "none", Out: "a-to-c", In: []string{"c-to-a"}},
			},
			Policies: []FilePolicy{
				{Name: "dns", Dst: "10.2.0.53", Proto: "udp", DPort: "53", Action: "bypass"},
				{Name: "web", Src: "10.1.0.0/24", Dst: "10.2.0.0/24", Proto: "tcp", SPort: "1024-65535", DPort: "443", Action: "protect", Tunnel: "to-b"},
				{Src: "2001:db8:1::/48", Dst: "any", Proto: "58", Action: "protect", Tunnel: "to-c"},
				{Name: "gre", Proto: "47", SPort: "any", Action: "discard"},
			},
			SAs: []FileSA{
				{Name: "a-to-b", SPI: 0x1001, Src: "192.0.2.1", Dst: "192.0.2.2", Encap: "udp", SPort: 4501, DPort: 4600, ESP: "aes128gcm16",
					EncKey: "000102030405060708090a0b0c0d0e0f10111213"},
				{Name: "b-to-a", SPI: 0x2001, Encap: "udp", ESP: "aes128gcm16", EncKey: "101112131415161718191a1b1c1d1e1f20212223"},
				{Name: "b-to-a-new", SPI: 0x2002, Src: "192.0.2.2", Dst: "192.0.2.1", Encap: "udp", ESP: "chacha20poly1305",
					EncKey: "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40414243"},
				{Name: "a-to-c", SPI: 0x3001, Dst: "2001:db8::3", ESP: "aes256-sha256",
					EncKey:  "303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f",
					AuthKey: "505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f"},
				{Name: "c-to-a", SPI: 0x3002, Src: "2001:db8::3", Dst: "2001:db8::1", ESP: "aes256gcm16",
					EncKey: "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f80818283"},
				{SPI: 0x4001, Mode: "transport", ESP: "null-sha256", AuthKey: "707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f"},
			},
		}},
		{"testdata/gateway-ha.toml", &File{
			Tunnels: []FileTunnel{{Name: "t", Local: "192.0.2.10", Peer: "192.0.2.2", Remote: []string{"10.2.0.0/24"}, Out: "o", In: []string{"i"}}},
			HA: &FileHA{Name: "gw-a", Listen: "0.0.0.0:4510", Peer: "10.9.0.2:4510", Cert: "ha/a.crt", Key: "/etc/sluice/ha/a.key", CA: "ha/ca.crt",
				PeerName: "gw-b", Interval: "50ms", Misses: 5, Witness: "10.0.0.254:53", Hook: "ha-hook", HookTimeout: "2s", Preference: 150, Preempt: true,
				Groups: []FileHAGroup{
					{Name: "site1", Addresses: []string{"192.0.2.10/24 dev wan0", "2001:db8::10/64 dev wan0", "10.1.0.1/24 dev lan0"}, Preference: 200},
					{Name: "site2", Addresses: []string{"192.0.2.11/24 dev wan0"}},
				}},
			SAs: []FileSA{
				{Name: "o", SPI: 0x1001, Encap: "udp", ESP: "aes128gcm16", EncKey: "000102030405060708090a0b0c0d0e0f10111213"},
				{Name: "i", SPI: 0x1002, Encap: "udp", ESP: "aes128gcm16", EncKey: "000102030405060708090a0b0c0d0e0f10111213"},
			},
		}},
	} {
		t.Run(filepath.Base(tc.example), func(t *testing.T) {
			want, err := LoadGateway(tc.example)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeFile(t, tc.example, tc.f)
			if !reflect.DeepEqual(withoutPositions(got), withoutPositions(want)) {
				t.Errorf("encoded file decodes to\n%+v\nthe example to\n%+v", got, want)
			}
		})
	}
}

// TestEncodeFleetGateway encodes what the fleet's agent writes: an IKE
// gateway in a pair, with [ha] groups of virtual addresses, a connection
// on one of them and its PSK in hex, and checks the decoded values.
func TestEncodeFleetGateway(t *testing.T) {
	psk := []byte("\x00\x01binary psk\xff\xfe with \"quotes\"\n")
	f := &File{
		Gateway: FileGateway{Workers: 2, ControlSocket: "/run/sluice/s.sock", Metrics: "127.0.0.1:9100", LogFormat: "json",
			LogLevels: map[string]string{"ike": "debug", "tls": "warn"}, Oversize: "drop", StateDir: "/var/lib/sluice-a"},
		TUN:    &FileTUN{Name: "sl0", MTU: 1400, Addresses: []string{"10.1.0.1/24"}, Queues: 2},
		UDP:    &FileUDP{Listen: "0.0.0.0:4500", GSO: new(false)},
		RawESP: &FileRawESP{Listen: "0.0.0.0"},
		IKE:    &FileIKE{RetransmitTries: 3, KeepAlive: "0s"},
		HA: &FileHA{Name: "node-a", PeerName: "node-b", Listen: "0.0.0.0:7310", Peer: "10.9.0.2:7310",
			Cert: "/run/sluice/ha/tls.crt", Key: "/run/sluice/ha/tls.key", CA: "/run/sluice/ha/ca.crt",
			Interval: "100ms", Misses: 3, Preference: 150, Preempt: true,
			Groups: []FileHAGroup{
				{Name: "node-a", Preference: 200, Addresses: []string{"192.0.2.10/32 dev eth0"}},
				{Name: "node-b", Preference: 100, Addresses: []string{"192.0.2.11/32 dev eth0"}},
			}},
		Connections: []FileConnection{{
			Name: "default/site-b", Version: 2, LocalAddrs: []string{"192.0.2.10"}, RemoteAddrs: []string{"198.51.100.2"},
			DPDDelay: "10s", Encap: true, RekeyTime: "1h",
			Local:  FileAuth{Auth: "psk", ID: "gw.example"},
			Remote: FileAuth{Auth: "psk", ID: "site-b.example"},
			Children: []FileChild{{Name: "default/site-b/net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.2.0.0/24", "10.3.0.0/24"},
				ESPProposals: "aes128gcm16", StartAction: "trap", LifeTime: "2h"}},
		}},
		Secrets: []FileSecret{{Type: "ike", IDs: []string{"gw.example", "site-b.example"}, Secret: SecretHex(psk)}},
	}
	g := decodeFile(t, "agent", f)
	if g.Workers != 2 || g.Metrics != "127.0.0.1:9100" || g.LogFormat != LogFormatJSON || g.LevelOf("ike") != "debug" || g.LevelOf("tls") != "warn" ||
		g.Oversize != OversizeDrop || g.StateDir != "/var/lib/sluice-a" || g.ControlSocket != "/run/sluice/s.sock" {
		t.Errorf("[gateway]: %+v", g)
	}
	if g.TUN.Name != "sl0" || g.TUN.MTU != 1400 || g.TUN.Queues != 2 || len(g.TUN.Addresses) != 1 || g.TUN.Addresses[0].String() != "10.1.0.1/24" {
		t.Errorf("[tun]: %+v", g.TUN)
	}
	if g.UDP == nil || g.UDP.Listen.String() != "0.0.0.0:4500" || g.UDP.GSO || !g.UDP.GRO {
		t.Errorf("[udp]: %+v", g.UDP)
	}
	if g.RawESP == nil || g.RawESP.Listen.String() != "0.0.0.0" {
		t.Errorf("[rawesp]: %+v", g.RawESP)
	}
	if g.IKE.RetransmitTries != 3 || g.IKE.KeepAlive >= 0 {
		t.Errorf("[ike]: %+v", g.IKE)
	}
	h := g.HA
	if h == nil || h.Name != "node-a" || h.PeerName != "node-b" || h.Peer.String() != "10.9.0.2:7310" || h.Misses != 3 ||
		h.Preference != 150 || !h.Preempt || h.CA != "/run/sluice/ha/ca.crt" || len(h.Groups) != 2 ||
		h.Groups[0].Name != "node-a" || h.Groups[0].Preference != 200 || h.Groups[0].Addresses[0].String() != "192.0.2.10/32 dev eth0" ||
		h.Groups[1].Preference != 100 {
		t.Errorf("[ha]: %+v", h)
	}
	if len(g.Connections) != 1 {
		t.Fatalf("connections: %+v", g.Connections)
	}
	c := g.Connections[0]
	if c.Name != "default/site-b" || c.Local.String() != "192.0.2.10" || c.Remote.String() != "198.51.100.2" || !c.Encap ||
		c.LocalAuth.ID != "gw.example" || c.RemoteAuth.ID != "site-b.example" || len(c.Children) != 1 {
		t.Errorf("connection: %+v", c)
	}
	ch := c.Children[0]
	if ch.Name != "default/site-b/net" || ch.StartAction != StartTrap || len(ch.RemoteTS) != 2 || ch.RemoteTS[1].String() != "10.3.0.0/24" {
		t.Errorf("child: %+v", ch)
	}
	if got := g.PSK("gw.example", "site-b.example"); string(got) != string(psk) {
		t.Errorf("PSK %q, want %q", got, psk)
	}
	if got := g.HAGroupOf(c.Local); got != "node-a" {
		t.Errorf("connection in group %q, want node-a", got)
	}
}

// TestEncodeHostileStrings checks that values holding TOML's own syntax
// stay values: they decode to the same bytes and add no keys.
func TestEncodeHostileStrings(t *testing.T) {
	hostile := []string{
		`a" = 1`,
		"b'\\\"]\n[gateway]\nworkers = 7\n#",
		`c"""x'''y`,
		"d\t\u00e9\u2028\U0001F600",
		"e\x00\x7f\r",
		"f\a\v\b\f", // Go's %q writes \a and \v, which TOML does not have
	}
	for _, s := range hostile {
		f := &File{
			TUN: &FileTUN{Addresses: []string{"10.1.0.1/24"}},
			Connections: []FileConnection{{Name: "conn", LocalAddrs: []string{"192.0.2.1"}, RemoteAddrs: []string{"192.0.2.2"},
				Local: FileAuth{Auth: "psk", ID: "a.example"}, Remote: FileAuth{Auth: "psk", ID: "b.example"},
				Children: []FileChild{{Name: "net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{"10.2.0.0/24"}}}}},
			// A text PSK takes any bytes but for 0x and 0s at its start.
			Secrets: []FileSecret{{Type: "ike", IDs: []string{"a.example", "b.example"}, Secret: s + strings.Repeat("-", 16)}},
		}
		g := decodeFile(t, "hostile", f)
		if got := string(g.PSK("a.example", "b.example")); got != s+strings.Repeat("-", 16) {
			t.Errorf("secret %q came back as %q", s, got)
		}
		if g.Workers != 0 || len(g.Connections) != 1 {
			t.Errorf("secret %q changed the configuration: %+v", s, g)
		}

		// A name may hold any printable character; it comes back whole.
		if !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
			f.Connections[0].Name = s
			g = decodeFile(t, "hostile", f)
			if g.Connections[0].Name != s {
				t.Errorf("name %q came back as %q", s, g.Connections[0].Name)
			}
			continue
		}
		// One that holds control characters is refused at the name, not
		// read as more keys.
		f.Connections[0].Name = s
		b, err := f.Encode()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseGateway("hostile", b)
		var errs Errors
		if !errorsAs(err, &errs) || len(errs) != 1 || errs[0].Field != "connection[1].name" {
			t.Errorf("name %q: got %v, want one error at connection[1].name\n%s", s, err, b)
		}
	}

	bad := &File{Tunnels: []FileTunnel{{Name: "ok"}, {Name: "x\xff"}}}
	if _, err := bad.Encode(); err == nil || !strings.Contains(err.Error(), "tunnel[2].name is not valid UTF-8") {
		t.Errorf("invalid UTF-8: got %v, want an error naming tunnel[2].name", err)
	}
}

func errorsAs(err error, errs *Errors) bool {
	e, ok := err.(Errors)
	*errs = e
	return ok
}

// TestEncodeCoversSchema checks that every key the parser accepts has a
// field with that toml tag in the File type of its section, and that no
// field has a tag the parser refuses, so that the encoder cannot fall
// behind the schema. It also checks that every key list the parser
// reports unknown keys against is one this test knows.
func TestEncodeCoversSchema(t *testing.T) {
	sections := map[string]struct {
		keys []string
		typ  reflect.Type
	}{
		"gatewaySections": {gatewaySections, reflect.TypeFor[File]()},
		"gatewayKeys":     {gatewayRules.keys, reflect.TypeFor[FileGateway]()},
		"tunKeys":         {tunRules.keys, reflect.TypeFor[FileTUN]()},
		"udpKeys":         {udpRules.keys, reflect.TypeFor[FileUDP]()},
		"rawESPKeys":      {rawESPRules.keys, reflect.TypeFor[FileRawESP]()},
		"tunnelKeys":      {tunnelRules.keys, reflect.TypeFor[FileTunnel]()},
		"policyKeys":      {policyRules.keys, reflect.TypeFor[FilePolicy]()},
		"saKeys":          {saRules.keys, reflect.TypeFor[FileSA]()},
		"ikeKeys":         {ikeRules.keys, reflect.TypeFor[FileIKE]()},
		"connectionKeys":  {connectionRules.keys, reflect.TypeFor[FileConnection]()},
		"authKeys":        {authRules.keys, reflect.TypeFor[FileAuth]()},
		"childKeys":       {childRules.keys, reflect.TypeFor[FileChild]()},
		"secretKeys":      {secretRules.keys, reflect.TypeFor[FileSecret]()},
		"poolKeys":        {poolRules.keys, reflect.TypeFor[FilePool]()},
		"tlsKeys":         {tlsRules.keys, reflect.TypeFor[FileTLS]()},
		"tlsCertKeys":     {tlsCertRules.keys, reflect.TypeFor[FileTLSCert]()},
		"tlsOriginKeys":   {tlsOriginRules.keys, reflect.TypeFor[FileTLSOrigin]()},
		"haKeys":          {haRules.keys, reflect.TypeFor[FileHA]()},
		"haGroupKeys":     {haGroupRules.keys, reflect.TypeFor[FileHAGroup]()},
	}
	// log_levels is a map whose keys are LogSubsystems.
	notSections := []string{"LogSubsystems"}

	for name, s := range sections {
		var tags []string
		for i := range s.typ.NumField() {
			tag := s.typ.Field(i).Tag.Get("toml")
			key, opts, _ := strings.Cut(tag, ",")
			if opts != "omitempty" {
				t.Errorf("%s.%s: tag %q, want omitempty", s.typ.Name(), s.typ.Field(i).Name, tag)
			}
			tags = append(tags, key)
		}
		for _, k := range s.keys {
			if !slices.Contains(tags, k) {
				t.Errorf("%s: key %q (%s) has no field", s.typ.Name(), k, name)
			}
		}
		for _, k := range tags {
			if !slices.Contains(s.keys, k) {
				t.Errorf("%s: field tag %q is not a key of %s", s.typ.Name(), k, name)
			}
		}
	}

	// Every identifier passed to unknownKey as the valid keys.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 3 {
				return true
			}
			if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != "unknownKey" {
				return true
			}
			id, ok := call.Args[2].(*ast.Ident)
			if !ok {
				return true // a literal list, as the SA file's ("sa")
			}
			if _, known := sections[id.Name]; !known && !slices.Contains(notSections, id.Name) {
				t.Errorf("%s: unknownKey with %s, a key list this test does not map to a File type", fset.Position(call.Pos()), id.Name)
			}
			return true
		})
	}
}

// TestToFileRoundTrip writes every example and valid test configuration
// back with the rule tables' encoder (Gateway.ToFile, File.Encode) and
// parses the text again: the model is the same, key for key. The text is
// read from the working directory, against which ToFile's paths are
// resolved.
func TestToFileRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.toml")
	files = append(files, "testdata/gateway-valid.toml", "testdata/gateway-defaults.toml", "testdata/gateway-ha.toml", "testdata/gateway-tls.toml")
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			g, err := LoadGateway(name)
			if err != nil {
				t.Fatal(err)
			}
			g2 := decodeFile(t, "roundtrip.toml", g.ToFile())
			g2.File = g.File
			if a, b := withoutPositions(g), withoutPositions(g2); !reflect.DeepEqual(a, b) {
				t.Errorf("round trip differs:\n got %+v\nwant %+v", b, a)
			}
		})
	}
}
