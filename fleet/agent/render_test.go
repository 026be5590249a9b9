package agent

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
	"github.com/sluicegw/sluice/gateway/certgen"
)

const testNS = "sluice"

// webCert and webKey are a certificate and its key for the listeners.
var webCert, webKey = func() ([]byte, []byte) {
	ca, err := certgen.NewCA("agent test CA")
	if err != nil {
		panic(err)
	}
	c, k, err := ca.Issue(false, "web.example")
	if err != nil {
		panic(err)
	}
	return c, k
}()

var binaryPSK = []byte{0xff, 0x00, 0x80, 'x', 0xfe, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

// testPool is a pool as the API server defaults it.
func testPool() *v1alpha1.GatewayPool {
	return &v1alpha1.GatewayPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "pool"},
		Spec: v1alpha1.GatewayPoolSpec{Steering: "vip", VIPInterface: "eth0", VIPPrefixLength: 32, SyncPort: 7310,
			Detection:  v1alpha1.Detection{Interval: &metav1.Duration{Duration: 100 * time.Millisecond}, Misses: 3},
			TicketKeys: v1alpha1.TicketKeys{Lifetime: &metav1.Duration{Duration: 24 * time.Hour}}},
	}
}

// testTunnel is a PSK tunnel on vip to peer, with its Secret name-psk;
// its remote traffic selector is 10.<peer's last byte>.0.0/24.
func testTunnel(name, vip, peer string) *v1alpha1.Tunnel {
	remoteTS := "10." + peer[strings.LastIndexByte(peer, '.')+1:] + ".0.0/24"
	return &v1alpha1.Tunnel{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: v1alpha1.TunnelSpec{
			Pool: "pool", Redundancy: 2, Version: 2,
			LocalAddrs: []string{vip}, RemoteAddrs: []string{peer},
			Proposals: "aes256gcm16-prfsha384-ecp384", DPDDelay: &metav1.Duration{Duration: 30 * time.Second},
			RekeyTime: &metav1.Duration{Duration: 4 * time.Hour},
			Local:     v1alpha1.TunnelAuth{Auth: "psk"}, Remote: v1alpha1.TunnelAuth{Auth: "psk"},
			PSKSecretRef: &v1alpha1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			Children: []v1alpha1.TunnelChild{{Name: "net", LocalTS: []string{"10.1.0.0/24"}, RemoteTS: []string{remoteTS},
				ESPProposals: "aes256gcm16", StartAction: "start", RekeyTime: &metav1.Duration{Duration: time.Hour}}},
		},
	}
}

func testSecret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}, Data: data}
}

// testHASecret is gw's HA Secret (the PEM is not read by Render).
func testHASecret(gw string) *corev1.Secret {
	return testSecret("pool-ha-"+gw, map[string][]byte{
		"tls.crt": []byte("CERT " + gw), "tls.key": []byte("KEY " + gw), "ca.crt": []byte("CA")})
}

// testInputs renders for gateway "gw-a" paired with "gw-b": tunnel t1
// owned by a, t2 owned by b (a stands by), with their Secrets.
func testInputs() Inputs {
	asg := &v1alpha1.GatewayAssignment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "gw-a"},
		Spec: v1alpha1.GatewayAssignmentSpec{Pool: "pool", Gateway: "gw-a", Partner: "gw-b", PartnerAddress: "10.9.0.2",
			Generation: 3, HASecret: "pool-ha-gw-a",
			Tunnels: []v1alpha1.AssignedObject{
				{Name: "t1", Role: v1alpha1.RoleOwner, Owner: "gw-a", Epoch: 1},
				{Name: "t2", Role: v1alpha1.RoleStandby, Owner: "gw-b", Epoch: 1},
			}},
	}
	in := Inputs{Assignment: asg, Pool: testPool(),
		Tunnels:   map[string]*v1alpha1.Tunnel{"t1": testTunnel("t1", "192.0.2.10", "198.51.100.1"), "t2": testTunnel("t2", "192.0.2.11", "198.51.100.2")},
		Listeners: map[string]*v1alpha1.TLSListener{},
		Secrets: map[string]*corev1.Secret{
			"t1-psk":       testSecret("t1-psk", map[string][]byte{"psk": []byte("secret one, 16 bytes or more")}),
			"t2-psk":       testSecret("t2-psk", map[string][]byte{"psk": binaryPSK}), // not UTF-8
			"pool-ha-gw-a": testHASecret("gw-a"),
		},
		NodeAddress: netip.MustParseAddr("10.9.0.1"), Dir: "/run/sluice/creds", ControlSocket: "/run/sluice/sluice.sock"}
	return in
}

// parseBack encodes r's File and parses it with the gateway's parser.
func parseBack(t *testing.T, r *Rendering) *config.Gateway {
	t.Helper()
	text, err := r.File.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	g, err := config.ParseGateway("rendered.toml", text)
	if err != nil {
		t.Fatalf("the rendering does not parse: %v\n%s", err, text)
	}
	return g
}

func groupAddrs(g config.HAGroup) []string {
	var s []string
	for _, a := range g.Addresses {
		s = append(s, a.String())
	}
	return s
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(in *Inputs)
		check  func(t *testing.T, r *Rendering, g *config.Gateway)
	}{
		{
			name: "pair",
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				h := g.HA
				if h == nil {
					t.Fatal("no [ha]")
				}
				if h.Name != "gw-a" || h.PeerName != "gw-b" || h.Listen.String() != "10.9.0.1:7310" || h.Peer.String() != "10.9.0.2:7310" {
					t.Errorf("[ha] = name %q peer_name %q listen %v peer %v", h.Name, h.PeerName, h.Listen, h.Peer)
				}
				if h.Cert != "/run/sluice/creds/ha.crt" || h.Key != "/run/sluice/creds/ha.key" || h.CA != "/run/sluice/creds/ha-ca.crt" {
					t.Errorf("[ha] files = %q %q %q", h.Cert, h.Key, h.CA)
				}
				if h.Interval != 100*time.Millisecond || h.Misses != 3 {
					t.Errorf("[ha] interval %v misses %d", h.Interval, h.Misses)
				}
				if len(h.Groups) != 2 {
					t.Fatalf("%d groups, want 2", len(h.Groups))
				}
				want := []struct {
					name  string
					pref  int
					addrs []string
				}{{"gw-a", 200, []string{"192.0.2.10/32 dev eth0"}}, {"gw-b", 100, []string{"192.0.2.11/32 dev eth0"}}}
				for i, w := range want {
					gr := h.Groups[i]
					if gr.Name != w.name || gr.Preference != w.pref || !slices.Equal(groupAddrs(gr), w.addrs) {
						t.Errorf("group %d = %s pref %d %v, want %s pref %d %v", i, gr.Name, gr.Preference, groupAddrs(gr), w.name, w.pref, w.addrs)
					}
				}
				if len(g.Connections) != 2 {
					t.Fatalf("%d connections, want 2 (the standby renders its partner's tunnels too)", len(g.Connections))
				}
				c := g.Connections[0]
				if c.Name != "t1" || c.Local.String() != "192.0.2.10" || c.Remote.String() != "198.51.100.1" || c.DPDDelay != 30*time.Second ||
					c.RekeyTime != 4*time.Hour || len(c.Children) != 1 || c.Children[0].Name != "t1/net" || c.Children[0].StartAction != "start" {
					t.Errorf("connection t1 = %+v", c)
				}
				if got := g.HAGroupOf(c.Local); got != "gw-a" {
					t.Errorf("t1 is in group %q, want gw-a", got)
				}
				if got := g.HAGroupOf(g.Connections[1].Local); got != "gw-b" {
					t.Errorf("t2 is in group %q, want gw-b", got)
				}
				if psk := g.PSK("192.0.2.10", "198.51.100.1"); string(psk) != "secret one, 16 bytes or more" {
					t.Errorf("PSK of t1 = %q", psk)
				}
				if psk := g.PSK("192.0.2.11", "198.51.100.2"); !bytes.Equal(psk, binaryPSK) {
					t.Errorf("PSK of t2 = %x (raw bytes must come through)", psk)
				}
				if g.ControlSocket != "/run/sluice/sluice.sock" || g.TUN.Name != DefaultTUNName || g.UDP == nil || g.UDP.Listen.String() != "0.0.0.0:4500" {
					t.Errorf("bootstrap parts: control %q tun %q udp %+v", g.ControlSocket, g.TUN.Name, g.UDP)
				}
				if string(r.Files["ha.crt"]) != "CERT gw-a" || string(r.Files["ha.key"]) != "KEY gw-a" || string(r.Files["ha-ca.crt"]) != "CA" {
					t.Errorf("files = %q", r.Files)
				}
				if len(r.Problems) != 0 {
					t.Errorf("problems: %q", r.Problems)
				}
			},
		},
		{
			name: "the partner renders the same groups, preferring its own",
			modify: func(in *Inputs) {
				s := &in.Assignment.Spec
				s.Gateway, s.Partner, s.PartnerAddress, s.HASecret = "gw-b", "gw-a", "10.9.0.1", "pool-ha-gw-b"
				s.Tunnels[0].Role, s.Tunnels[1].Role = v1alpha1.RoleStandby, v1alpha1.RoleOwner
				in.Secrets["pool-ha-gw-b"] = testHASecret("gw-b")
				in.NodeAddress = netip.MustParseAddr("10.9.0.2")
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				h := g.HA
				if h.Name != "gw-b" || h.PeerName != "gw-a" || h.Listen.String() != "10.9.0.2:7310" || h.Peer.String() != "10.9.0.1:7310" {
					t.Errorf("[ha] = name %q peer_name %q listen %v peer %v", h.Name, h.PeerName, h.Listen, h.Peer)
				}
				if h.Groups[0].Name != "gw-a" || h.Groups[0].Preference != 100 || h.Groups[1].Name != "gw-b" || h.Groups[1].Preference != 200 {
					t.Errorf("groups %+v", h.Groups)
				}
				if !slices.Equal(groupAddrs(h.Groups[0]), []string{"192.0.2.10/32 dev eth0"}) {
					t.Errorf("group gw-a addresses %v", groupAddrs(h.Groups[0]))
				}
			},
		},
		{
			name: "pool settings",
			modify: func(in *Inputs) {
				p := &in.Pool.Spec
				p.VIPInterface, p.VIPPrefixLength, p.SyncPort = "ens5", 24, 4600
				p.Detection = v1alpha1.Detection{Interval: &metav1.Duration{Duration: 50 * time.Millisecond}, Misses: 5}
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				h := g.HA
				if h.Listen.Port() != 4600 || h.Peer.Port() != 4600 || h.Interval != 50*time.Millisecond || h.Misses != 5 {
					t.Errorf("[ha] %+v", h)
				}
				if a := groupAddrs(h.Groups[0]); !slices.Equal(a, []string{"192.0.2.10/24 dev ens5"}) {
					t.Errorf("addresses %v", a)
				}
			},
		},
		{
			name: "no partner: no [ha]",
			modify: func(in *Inputs) {
				in.Assignment.Spec.Partner, in.Assignment.Spec.PartnerAddress = "", ""
				in.Assignment.Spec.Tunnels = in.Assignment.Spec.Tunnels[:1]
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				if g.HA != nil || len(g.Connections) != 1 || len(r.Files) != 0 {
					t.Errorf("[ha] %+v, %d connections, files %q", g.HA, len(g.Connections), r.Files)
				}
			},
		},
		{
			name: "a missing Secret leaves its tunnel out",
			modify: func(in *Inputs) {
				delete(in.Secrets, "t2-psk")
				in.Tunnels["t3"] = testTunnel("t3", "192.0.2.12", "198.51.100.3")
				in.Secrets["t3-psk"] = testSecret("t3-psk", map[string][]byte{"psk": nil})
				in.Tunnels["t4"] = testTunnel("t4", "192.0.2.13", "198.51.100.4")
				in.Tunnels["t4"].Spec.PSKSecretRef.Key = "other"
				in.Secrets["t4-psk"] = testSecret("t4-psk", map[string][]byte{"psk": []byte("a pre-shared key of t4")})
				in.Tunnels["t5"] = testTunnel("t5", "vip", "198.51.100.5")
				in.Tunnels["t6"] = testTunnel("t6", "192.0.2.16", "198.51.100.6")
				in.Tunnels["t6"].Spec.PSKSecretRef = nil
				s := &in.Assignment.Spec
				for _, n := range []string{"t3", "t4", "t5", "t6", "t7"} {
					s.Tunnels = append(s.Tunnels, v1alpha1.AssignedObject{Name: n, Role: v1alpha1.RoleStandby, Owner: "gw-b"})
				}
				s.Tunnels = append(s.Tunnels, v1alpha1.AssignedObject{Name: "t2b", Role: v1alpha1.RoleStandby, Owner: "gw-b"})
				in.Tunnels["t2b"] = testTunnel("t2b", "192.0.2.20", "198.51.100.20")
				in.Secrets["t2b-psk"] = testSecret("t2b-psk", map[string][]byte{"psk": []byte("a pre-shared key of t2b")})
				in.Tunnels["t8"] = testTunnel("t8", "192.0.2.18", "198.51.100.8")
				in.Secrets["t8-psk"] = testSecret("t8-psk", map[string][]byte{"psk": []byte("short")})
				s.Tunnels = append(s.Tunnels, v1alpha1.AssignedObject{Name: "t8", Role: v1alpha1.RoleStandby, Owner: "gw-b"})
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				want := []string{
					"tunnel t2: Secret t2-psk not found",
					"tunnel t3: Secret t3-psk: key psk is empty (want the pre-shared key)",
					"tunnel t4: Secret t4-psk has no key other",
					`tunnel t5: localAddrs[0] "vip" is not an IP address (want the tunnel's VIP, e.g. 192.0.2.10)`,
					"tunnel t6: auth psk and no pskSecretRef",
					"tunnel t7: not found",
					"tunnel t8: Secret t8-psk: key psk holds a PSK of 5 bytes, too short to be safe (want at least 16)",
				}
				if !slices.Equal(r.Problems, want) {
					t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
				}
				var names []string
				for _, c := range g.Connections {
					names = append(names, c.Name)
				}
				if !slices.Equal(names, []string{"t1", "t2b"}) {
					t.Errorf("connections %v, want [t1 t2b]", names)
				}
			},
		},
		{
			name: "what the gateway's parser refuses leaves its tunnel out",
			modify: func(in *Inputs) {
				s := &in.Assignment.Spec
				add := func(name, vip, peer, owner string) *v1alpha1.Tunnel {
					tn := testTunnel(name, vip, peer)
					in.Tunnels[name] = tn
					in.Secrets[name+"-psk"] = testSecret(name+"-psk", map[string][]byte{"psk": []byte("a pre-shared key of " + name)})
					s.Tunnels = append(s.Tunnels, v1alpha1.AssignedObject{Name: name, Role: v1alpha1.RoleOwner, Owner: owner})
					return tn
				}
				add("t3", "192.0.2.13", "198.51.100.3", "gw-a").Spec.Proposals = "rot13-md4"
				add("t4", "192.0.2.14", "198.51.100.4", "gw-a").Spec.Children[0].RemoteTS = []string{"10.1.0.0/16"} // overlaps t1's
				add("t5", "192.0.2.10", "198.51.100.5", "gw-b")                                                     // t1's VIP, another owner
				add("t6", "192.0.2.16", "198.51.100.6", "gw-a").Spec.LocalAddrs = []string{"192.0.2.16", "192.0.2.17"}
				add("t7", "192.0.2.18", "198.51.100.7", "gw-a")
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				var names []string
				for _, c := range g.Connections {
					names = append(names, c.Name)
				}
				if !slices.Equal(names, []string{"t1", "t2", "t7"}) {
					t.Errorf("connections %v, want [t1 t2 t7]", names)
				}
				want := []string{
					"tunnel t5: VIP 192.0.2.10 is also tunnel t1's, whose owner is gw-a, not gw-b: objects on one VIP need one owner",
					"tunnel t3: proposals: ",
					"tunnel t4: children[1].remote_ts[1]: 10.1.0.0/16 overlaps",
					"tunnel t6: local_addrs[2]: one address only",
				}
				if len(r.Problems) != len(want) {
					t.Fatalf("problems:\n%s", strings.Join(r.Problems, "\n"))
				}
				for i, w := range want {
					if !strings.HasPrefix(r.Problems[i], w) {
						t.Errorf("problem %d = %q, want prefix %q", i, r.Problems[i], w)
					}
				}
			},
		},
		{
			name: "a TLS listener",
			modify: func(in *Inputs) {
				in.Assignment.Spec.Listeners = []v1alpha1.AssignedObject{{Name: "web", Role: v1alpha1.RoleOwner, Owner: "gw-a"}}
				in.Listeners["web"] = &v1alpha1.TLSListener{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"},
					Spec: v1alpha1.TLSListenerSpec{Pool: "pool", Listen: "192.0.2.30:443", Backend: "10.1.0.5:8080",
						CertificateSecretRef: v1alpha1.LocalObjectRef{Name: "web-tls"}}}
				in.Secrets["web-tls"] = testSecret("web-tls", map[string][]byte{"tls.crt": webCert, "tls.key": webKey})
				in.Listeners["bad"] = &v1alpha1.TLSListener{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "bad"},
					Spec: v1alpha1.TLSListenerSpec{Pool: "pool", Listen: "192.0.2.31:443", Backend: "10.1.0.5:8080",
						CertificateSecretRef: v1alpha1.LocalObjectRef{Name: "bad-tls"}}}
				in.Secrets["bad-tls"] = testSecret("bad-tls", map[string][]byte{"tls.crt": webCert, "tls.key": []byte("not a key")})
				in.Assignment.Spec.Listeners = append(in.Assignment.Spec.Listeners, v1alpha1.AssignedObject{Name: "bad", Role: v1alpha1.RoleOwner, Owner: "gw-a"})
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				if len(g.TLS) != 1 {
					t.Fatalf("%d [[tls]], want 1", len(g.TLS))
				}
				l := g.TLS[0]
				if l.Name != "web" || l.Listen != "192.0.2.30:443" || l.Backend != "tcp://10.1.0.5:8080" ||
					len(l.Certs) != 1 || l.Certs[0].Cert != "/run/sluice/creds/tls-web.crt" || l.Certs[0].Key != "/run/sluice/creds/tls-web.key" {
					t.Errorf("[[tls]] = %+v", l)
				}
				if len(r.Problems) != 1 || !strings.HasPrefix(r.Problems[0], "listener bad: Secret bad-tls: tls.crt and tls.key are not a certificate and its key: ") {
					t.Errorf("problems %q", r.Problems)
				}
				if !bytes.Equal(r.Files["tls-web.crt"], webCert) || !bytes.Equal(r.Files["tls-web.key"], webKey) {
					t.Errorf("files %q", r.Files)
				}
				if a := groupAddrs(g.HA.Groups[0]); !slices.Equal(a, []string{"192.0.2.10/32 dev eth0", "192.0.2.30/32 dev eth0"}) {
					t.Errorf("group gw-a addresses %v", a)
				}
			},
		},
		{
			name: "children of the same name in two tunnels",
			modify: func(in *Inputs) {
			},
			check: func(t *testing.T, r *Rendering, g *config.Gateway) {
				if g.Connections[1].Children[0].Name != "t2/net" {
					t.Errorf("child %q", g.Connections[1].Children[0].Name)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInputs()
			if tc.modify != nil {
				tc.modify(&in)
			}
			r, err := Render(in)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r, parseBack(t, r))
		})
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(in *Inputs)
		want   string
	}{
		{"no HA Secret", func(in *Inputs) { delete(in.Secrets, "pool-ha-gw-a") }, "agent: render: HA Secret pool-ha-gw-a not found"},
		{"HA Secret without CA", func(in *Inputs) { delete(in.Secrets["pool-ha-gw-a"].Data, "ca.crt") }, "agent: render: HA Secret pool-ha-gw-a has no ca.crt"},
		{"no haSecret", func(in *Inputs) { in.Assignment.Spec.HASecret = "" }, "agent: render: the assignment names no haSecret (the sync channel's certificate)"},
		{"bad partner address", func(in *Inputs) { in.Assignment.Spec.PartnerAddress = "gw-b.example" },
			`agent: render: partner gw-b has no valid address (partnerAddress "gw-b.example")`},
		{"no node address", func(in *Inputs) { in.NodeAddress = netip.Addr{} }, "agent: render: no valid node address (give --node-address or $NODE_IP)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInputs()
			tc.modify(&in)
			_, err := Render(in)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %s", err, tc.want)
			}
		})
	}
}

// TestRenderEmptyGroup: a member that owns nothing still renders its
// group (the groups of a pair may not change on reload), with no
// address; and a gateway with nothing assigned is an empty IPsec gateway.
func TestRenderEmptyGroup(t *testing.T) {
	in := testInputs()
	in.Assignment.Spec.Tunnels = in.Assignment.Spec.Tunnels[:1]
	r, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	g := parseBack(t, r)
	if len(g.HA.Groups) != 2 || g.HA.Groups[1].Name != "gw-b" || len(g.HA.Groups[1].Addresses) != 0 {
		t.Errorf("groups %+v", g.HA.Groups)
	}
	in.Assignment.Spec.Tunnels = nil
	if r, err = Render(in); err != nil {
		t.Fatal(err)
	}
	if g := parseBack(t, r); len(g.Connections) != 0 || g.TLSOnly() {
		t.Errorf("%d connections, TLS-only %v", len(g.Connections), g.TLSOnly())
	}
}

// TestBootstrap: the bootstrap file parses, and its parts that a reload
// cannot change are the full rendering's (else config.apply is refused
// with "needs a restart"); a connection without encap needs no [rawesp]
// the bootstrap lacks.
func TestBootstrap(t *testing.T) {
	in := testInputs()
	r, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	full := parseBack(t, r)
	boot := r.Bootstrap()
	text, err := boot.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.ParseGateway("bootstrap.toml", text)
	if err != nil {
		t.Fatalf("the bootstrap does not parse: %v\n%s", err, text)
	}
	if bytes.Contains(text, []byte("secret")) || len(b.Connections) != 0 {
		t.Errorf("the bootstrap holds more than the fixed parts:\n%s", text)
	}
	if b.TUN.Name != full.TUN.Name || !slices.Equal(b.TUN.Addresses, full.TUN.Addresses) || *b.UDP != *full.UDP ||
		b.RawESP == nil || full.RawESP == nil || *b.RawESP != *full.RawESP ||
		b.ControlSocket != full.ControlSocket || b.StateDir != full.StateDir || b.Engine != full.Engine {
		t.Errorf("fixed parts differ:\nboot %+v %+v %+v\nfull %+v %+v %+v", b.TUN, b.UDP, b.RawESP, full.TUN, full.UDP, full.RawESP)
	}
	bh, fh := *b.HA, *full.HA
	bh.Groups, fh.Groups = nil, nil
	if !reflect.DeepEqual(bh, fh) {
		t.Errorf("[ha] differs:\nboot %+v\nfull %+v", bh, fh)
	}
	for i := range full.HA.Groups {
		if b.HA.Groups[i].Name != full.HA.Groups[i].Name || b.HA.Groups[i].Preference != full.HA.Groups[i].Preference || len(b.HA.Groups[i].Addresses) != 0 {
			t.Errorf("group %d: boot %+v, full %+v", i, b.HA.Groups[i], full.HA.Groups[i])
		}
	}
}

func TestHAName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"gw-a", "gw-a"},
		{"node-1", "node-1"},
		{"ip-10-0-0-1.ec2.internal", "ip-10-0-0-1-ec2-interna-"},
		{"Node_A", "node-a-"},
	} {
		got := HAName(tc.in)
		if !strings.HasPrefix(got, tc.want) || len(got) > config.MaxHANameLen {
			t.Errorf("HAName(%q) = %q, want prefix %q and at most %d bytes", tc.in, got, tc.want, config.MaxHANameLen)
		}
		if HAName(tc.in) != got {
			t.Errorf("HAName(%q) is not deterministic", tc.in)
		}
	}
}

// TestHANameLimit: the API's bound on [ha] names is the gateway's.
func TestHANameLimit(t *testing.T) {
	if v1alpha1.MaxHANameLen != config.MaxHANameLen {
		t.Fatalf("v1alpha1.MaxHANameLen %d, config.MaxHANameLen %d", v1alpha1.MaxHANameLen, config.MaxHANameLen)
	}
}

// TestRenderInsideAddrs: a tunnel's inside addresses join its owner's
// group beside its VIP (the standby renders them in the owner's group
// too); one that is not "PREFIX dev IFNAME" leaves the tunnel out, named.
func TestRenderInsideAddrs(t *testing.T) {
	in := testInputs()
	in.Tunnels["t1"].Spec.InsideAddrs = []string{"10.1.0.1/24 dev lan0"}
	in.Tunnels["t2"].Spec.InsideAddrs = []string{"10.1.0.2/24 dev lan0"}
	r, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	g := parseBack(t, r)
	want := map[string][]string{"gw-a": {"192.0.2.10/32 dev eth0", "10.1.0.1/24 dev lan0"}, "gw-b": {"192.0.2.11/32 dev eth0", "10.1.0.2/24 dev lan0"}}
	for _, gr := range g.HA.Groups {
		if got := groupAddrs(gr); !slices.Equal(got, want[gr.Name]) {
			t.Errorf("group %s: %q, want %q", gr.Name, got, want[gr.Name])
		}
	}
	in.Tunnels["t2"].Spec.InsideAddrs = []string{"10.1.0.2/24"}
	if r, err = Render(in); err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "tunnel t2: insideAddrs[0]") {
		t.Errorf("problems %q", r.Problems)
	}
}
