package agent

// render.go turns what the controller assigned to this gateway into the
// gateway's whole configuration, as a config.File:
//
//	[gateway], [tun], [udp],  the bootstrap parts (control socket, TUN,
//	[rawesp]                  ESP-in-UDP and raw ESP on every address)
//	[ha]                      the sync channel to the partner, on the
//	                          nodes' addresses, with two groups named after
//	                          the pair's members
//	[[connection]]            one per Tunnel, with a [[secret]] for its PSK
//	[[tls]]                   one per TLSListener
//
// Render is pure: the credentials [ha] and [[tls]] name as files come
// back in Rendering.Files for the caller to write (into a memory-backed
// directory); PSKs go in the text, which travels over the control socket
// only.

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/fleet/api/v1alpha1"
)

// The preferences a member renders for the pair's two groups: its own
// group, and its partner's.
const (
	PreferenceOwn     = 200
	PreferencePartner = 100
)

// The keys of the Secrets the agent reads: the HA Secret's (the
// gateway's sync-channel certificate and key, and the pool CA) and a
// kubernetes.io/tls Secret's.
const (
	SecretCert = corev1.TLSCertKey       // "tls.crt"
	SecretKey  = corev1.TLSPrivateKeyKey // "tls.key"
	SecretCA   = "ca.crt"
	// DefaultPSKKey is the key of a PSK Secret when the reference names
	// none.
	DefaultPSKKey = "psk"
	// MinPSKLen is the shortest PSK the gateway takes.
	MinPSKLen = 16
)

// Defaults of the bootstrap parts and of a pool whose spec left them out
// (the API server fills them in from the CRD's defaults).
const (
	DefaultTUNName      = "sluice0"
	DefaultESPPort      = 4500
	DefaultSyncPort     = 7310
	DefaultVIPInterface = "eth0"
)

// Inputs is what a gateway's configuration is rendered from.
type Inputs struct {
	// Assignment is this gateway's GatewayAssignment; Pool its pool.
	Assignment *v1alpha1.GatewayAssignment
	Pool       *v1alpha1.GatewayPool
	// Tunnels, Listeners and Secrets are the objects the assignment
	// names (directly, or through a Tunnel's or a listener's
	// reference), by name; one missing is left out of the rendering with
	// a Problem, not an error.
	Tunnels   map[string]*v1alpha1.Tunnel
	Listeners map[string]*v1alpha1.TLSListener
	Secrets   map[string]*corev1.Secret
	// NodeAddress is this node's address: the sync channel listens on it.
	NodeAddress netip.Addr
	// Dir is the directory the credential files go to (Rendering.Files).
	Dir string
	// ControlSocket is the gateway's control socket path; StateDir its
	// state directory ("" for the gateway's default).
	ControlSocket, StateDir string
}

// Rendering is a gateway's configuration and the credential files it
// names.
type Rendering struct {
	File config.File
	// Files are the files File names, by base name in Inputs.Dir: PEM
	// certificates and keys. The caller writes them (mode 0600) before
	// applying File.
	Files map[string][]byte
	// Problems are the objects left out, one sentence each ("tunnel
	// site-b: Secret site-b-psk has no key psk"), in assignment order.
	Problems []string
}

// Render renders the configuration of the gateway in.Assignment names.
// It fails only when there is no configuration to give the gateway at
// all (no assignment or pool, an invalid node address, an HA Secret that
// is missing or incomplete); a bad Tunnel or listener is left out and
// named in Rendering.Problems.
//
// A bad object is found in two ways: what Render itself checks (a
// missing Secret, an address that is not one), and what the gateway's
// parser says of the rendering (a proposal it does not know, traffic
// selectors that overlap another tunnel's): Render parses each
// rendering as the gateway will, and renders again without the objects
// the errors' fields belong to, so that one bad Tunnel does not make the
// gateway refuse every change.
func Render(in Inputs) (*Rendering, error) {
	if in.Assignment == nil || in.Pool == nil {
		return nil, fmt.Errorf("agent: render: no assignment or pool")
	}
	if !in.NodeAddress.IsValid() {
		return nil, fmt.Errorf("agent: render: no valid node address (give --node-address or $NODE_IP)")
	}
	skip := map[string]string{} // "tunnel NAME" or "listener NAME" -> why
	var order []string
	for {
		r, objs, err := renderOnce(in, skip)
		if err != nil {
			return nil, err
		}
		for _, k := range order {
			r.Problems = append(r.Problems, k+": "+skip[k])
		}
		text, err := r.File.Encode()
		if err != nil {
			return nil, fmt.Errorf("agent: render: %w", err)
		}
		_, perr := config.ParseGateway("rendered", text)
		if perr == nil {
			return r, nil
		}
		var es config.Errors
		if !errors.As(perr, &es) {
			return nil, fmt.Errorf("agent: render: the configuration does not parse: %w", perr)
		}
		progress := false
		for _, e := range es {
			k, rest := objs.of(e.Field)
			if k == "" || skip[k] != "" {
				continue
			}
			skip[k] = strings.TrimPrefix(rest+": ", ": ") + e.Msg
			order = append(order, k)
			progress = true
		}
		if !progress {
			return nil, fmt.Errorf("agent: render: the configuration does not parse: %w", perr)
		}
	}
}

// sections maps the rendering's [[connection]]s, [[secret]]s and
// [[tls]]s to the objects they come from ("tunnel t1").
type sections struct{ connection, secret, tls []string }

// of returns the object of a field path with 1-based indexes
// ("connection[2].proposals" is the second connection's object) and the
// rest of the path ("proposals"); "" for a field of no object.
func (s sections) of(field string) (obj, rest string) {
	for _, sec := range []struct {
		name string
		objs []string
	}{{"connection", s.connection}, {"secret", s.secret}, {"tls", s.tls}} {
		p, ok := strings.CutPrefix(field, sec.name+"[")
		if !ok {
			continue
		}
		n, after, ok := strings.Cut(p, "]")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 1 || i > len(sec.objs) {
			return "", ""
		}
		return sec.objs[i-1], strings.TrimPrefix(after, ".")
	}
	return "", ""
}

// renderOnce renders in without the objects in skip, and says which
// object each section came from.
func renderOnce(in Inputs, skip map[string]string) (*Rendering, sections, error) {
	asg, pool := in.Assignment, in.Pool
	var objs sections
	r := &Rendering{Files: map[string][]byte{}}
	f := &r.File
	f.Gateway = config.FileGateway{ControlSocket: in.ControlSocket, StateDir: in.StateDir}
	f.TUN = &config.FileTUN{Name: DefaultTUNName}
	f.UDP = &config.FileUDP{Listen: netip.AddrPortFrom(unspecified(in.NodeAddress), DefaultESPPort).String()}
	// Always both sockets: the parser adds [rawesp] for a connection
	// without encap, and a gateway started without it could not take
	// one later ([udp] and [rawesp] are fixed for the process).
	f.RawESP = &config.FileRawESP{Listen: unspecified(in.NodeAddress).String()}

	gw := asg.Spec.Gateway
	if gw == "" {
		gw = asg.Name
	}
	owned := map[string][]string{} // member -> VIPs of the objects it owns
	ownerOf := func(o v1alpha1.AssignedObject) string {
		switch {
		case o.Owner != "":
			return o.Owner
		case o.Role == v1alpha1.RoleOwner:
			return gw
		}
		return asg.Spec.Partner
	}
	vipPrefix := int(pool.Spec.VIPPrefixLength)
	dev := cmp.Or(pool.Spec.VIPInterface, DefaultVIPInterface)
	vipOf := map[netip.Addr]struct{ member, obj string }{}
	// claimVIP says why the object k may not have VIP a for member: one
	// of another member's objects has it (an address is in one group).
	claimVIP := func(k, member string, a netip.Addr) error {
		if prev, ok := vipOf[a]; ok && prev.member != member {
			return fmt.Errorf("VIP %s is also %s's, whose owner is %s, not %s: objects on one VIP need one owner", a, prev.obj, prev.member, member)
		} else if !ok {
			vipOf[a] = struct{ member, obj string }{member, k}
		}
		return nil
	}
	addVIP := func(member string, a netip.Addr) {
		bits := vipPrefix
		if bits == 0 || bits > a.BitLen() {
			bits = a.BitLen()
		}
		s := netip.PrefixFrom(a, bits).String() + " dev " + dev
		if !slices.Contains(owned[member], s) {
			owned[member] = append(owned[member], s)
		}
	}

	for _, o := range asg.Spec.Tunnels {
		k := "tunnel " + o.Name
		if skip[k] != "" {
			continue
		}
		t := in.Tunnels[o.Name]
		if t == nil {
			r.Problems = append(r.Problems, fmt.Sprintf("tunnel %s: not found", o.Name))
			continue
		}
		conn, secret, vip, err := renderTunnel(t, in.Secrets)
		if err == nil {
			err = claimVIP(k, ownerOf(o), vip)
		}
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("tunnel %s: %v", o.Name, err))
			continue
		}
		f.Connections = append(f.Connections, conn)
		objs.connection = append(objs.connection, k)
		if secret != nil {
			f.Secrets = append(f.Secrets, *secret)
			objs.secret = append(objs.secret, k)
		}
		addVIP(ownerOf(o), vip)
		for _, a := range t.Spec.InsideAddrs {
			if !slices.Contains(owned[ownerOf(o)], a) {
				owned[ownerOf(o)] = append(owned[ownerOf(o)], a)
			}
		}
	}
	for _, o := range asg.Spec.Listeners {
		k := "listener " + o.Name
		if skip[k] != "" {
			continue
		}
		l := in.Listeners[o.Name]
		if l == nil {
			r.Problems = append(r.Problems, fmt.Sprintf("listener %s: not found", o.Name))
			continue
		}
		tl, vip, files, err := renderListener(l, in.Secrets, in.Dir)
		if err == nil {
			err = claimVIP(k, ownerOf(o), vip)
		}
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("listener %s: %v", o.Name, err))
			continue
		}
		f.TLS = append(f.TLS, tl)
		objs.tls = append(objs.tls, k)
		for k, v := range files {
			r.Files[k] = v
		}
		addVIP(ownerOf(o), vip)
	}

	if asg.Spec.Partner != "" {
		h, files, err := renderHA(in, gw, owned)
		if err != nil {
			return nil, objs, err
		}
		f.HA = h
		for k, v := range files {
			r.Files[k] = v
		}
	}
	return r, objs, nil
}

// Bootstrap returns the parts of r.File the gateway must be started with,
// since a reload or config.apply cannot change them: [gateway], [tun],
// [udp], [rawesp], [ike] and [ha] with its groups' names and
// preferences, but no address (an apply gives the groups their
// addresses). It holds no secret and names no credential file that
// Files does not.
func (r *Rendering) Bootstrap() config.File {
	f := r.File
	b := config.File{Gateway: f.Gateway, TUN: f.TUN, UDP: f.UDP, RawESP: f.RawESP, IKE: f.IKE}
	if f.HA != nil {
		h := *f.HA
		h.Groups = nil
		for _, g := range f.HA.Groups {
			h.Groups = append(h.Groups, config.FileHAGroup{Name: g.Name, Preference: g.Preference})
		}
		b.HA = &h
	}
	return b
}

// renderTunnel renders t as a [[connection]] and, with PSK
// authentication, its [[secret]]; vip is the tunnel's VIP, its first
// local address.
func renderTunnel(t *v1alpha1.Tunnel, secrets map[string]*corev1.Secret) (c config.FileConnection, s *config.FileSecret, vip netip.Addr, err error) {
	sp := &t.Spec
	if len(sp.LocalAddrs) == 0 {
		return c, nil, vip, fmt.Errorf("no localAddrs (the first is the tunnel's VIP)")
	}
	for i, a := range sp.InsideAddrs {
		if _, err := config.ParseHAAddress(a); err != nil {
			return c, nil, vip, fmt.Errorf("insideAddrs[%d]: %v", i, err)
		}
	}
	vip, err = netip.ParseAddr(sp.LocalAddrs[0])
	if err != nil {
		return c, nil, vip, fmt.Errorf("localAddrs[0] %q is not an IP address (want the tunnel's VIP, e.g. 192.0.2.10)", sp.LocalAddrs[0])
	}
	vip = vip.Unmap()
	c = config.FileConnection{
		Name:        t.Name,
		Version:     int(sp.Version),
		LocalAddrs:  slices.Clone(sp.LocalAddrs),
		RemoteAddrs: slices.Clone(sp.RemoteAddrs),
		Proposals:   sp.Proposals,
		DPDDelay:    duration(sp.DPDDelay),
		Encap:       sp.Encap,
		RekeyTime:   duration(sp.RekeyTime),
		OverTime:    duration(sp.OverTime),
		Local:       auth(sp.Local),
		Remote:      auth(sp.Remote),
	}
	for _, ch := range sp.Children {
		c.Children = append(c.Children, config.FileChild{
			Name:         ChildName(t.Name, ch.Name),
			LocalTS:      slices.Clone(ch.LocalTS),
			RemoteTS:     slices.Clone(ch.RemoteTS),
			ESPProposals: ch.ESPProposals,
			StartAction:  ch.StartAction,
			RekeyTime:    duration(ch.RekeyTime),
			LifeTime:     duration(ch.LifeTime),
		})
	}
	if sp.Local.Auth != config.AuthPSK && sp.Remote.Auth != config.AuthPSK {
		return c, nil, vip, nil
	}
	ref := sp.PSKSecretRef
	if ref == nil || ref.Name == "" {
		return c, nil, vip, fmt.Errorf("auth psk and no pskSecretRef")
	}
	key := cmp.Or(ref.Key, DefaultPSKKey)
	sec := secrets[ref.Name]
	if sec == nil {
		return c, nil, vip, fmt.Errorf("Secret %s not found", ref.Name)
	}
	psk, ok := sec.Data[key]
	switch {
	case !ok:
		return c, nil, vip, fmt.Errorf("Secret %s has no key %s", ref.Name, key)
	case len(psk) == 0:
		return c, nil, vip, fmt.Errorf("Secret %s: key %s is empty (want the pre-shared key)", ref.Name, key)
	case len(psk) < MinPSKLen:
		return c, nil, vip, fmt.Errorf("Secret %s: key %s holds a PSK of %d bytes, too short to be safe (want at least %d)", ref.Name, key, len(psk), MinPSKLen)
	}
	// The PSK is for this tunnel's identities: its local one (by default
	// its VIP) and the peer's (by default the peer's address), so that
	// tunnels with different keys do not share one.
	s = &config.FileSecret{Type: config.SecretIKE, Secret: config.SecretHex(psk)}
	s.IDs = append(s.IDs, cmp.Or(sp.Local.ID, vip.String()))
	switch {
	case sp.Remote.ID != "":
		s.IDs = append(s.IDs, sp.Remote.ID)
	case len(sp.RemoteAddrs) > 0 && sp.RemoteAddrs[0] != "%any":
		s.IDs = append(s.IDs, sp.RemoteAddrs[0])
	}
	return c, s, vip, nil
}

// ChildName is the gateway's name of a Tunnel's child: children of all
// connections share one name space in the gateway (each is a tunnel), so
// the Tunnel's name comes first, with a '/' that no object name has.
func ChildName(tunnel, child string) string { return tunnel + "/" + child }

// renderListener renders l as a [[tls]], with the certificate and key of
// its Secret as files.
func renderListener(l *v1alpha1.TLSListener, secrets map[string]*corev1.Secret, dir string) (config.FileTLS, netip.Addr, map[string][]byte, error) {
	sp := &l.Spec
	host, _, err := net.SplitHostPort(sp.Listen)
	if err != nil {
		return config.FileTLS{}, netip.Addr{}, nil, fmt.Errorf("listen %q is not host:port (want the VIP and a port, e.g. 192.0.2.10:443)", sp.Listen)
	}
	vip, err := netip.ParseAddr(host)
	if err != nil {
		return config.FileTLS{}, netip.Addr{}, nil, fmt.Errorf("listen %q: the host is not an IP address (want the listener's VIP)", sp.Listen)
	}
	sec := secrets[sp.CertificateSecretRef.Name]
	if sec == nil {
		return config.FileTLS{}, vip, nil, fmt.Errorf("Secret %s not found", sp.CertificateSecretRef.Name)
	}
	cert, key := sec.Data[SecretCert], sec.Data[SecretKey]
	if len(cert) == 0 || len(key) == 0 {
		return config.FileTLS{}, vip, nil, fmt.Errorf("Secret %s needs %s and %s (a kubernetes.io/tls Secret)", sp.CertificateSecretRef.Name, SecretCert, SecretKey)
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		// The gateway checks the files on apply and would refuse the
		// whole configuration.
		return config.FileTLS{}, vip, nil, fmt.Errorf("Secret %s: %s and %s are not a certificate and its key: %v", sp.CertificateSecretRef.Name, SecretCert, SecretKey, err)
	}
	backend := sp.Backend
	if !strings.Contains(backend, "://") && !strings.HasPrefix(backend, "static:") {
		backend = "tcp://" + backend
	}
	base := "tls-" + fileSafe(l.Name)
	files := map[string][]byte{base + ".crt": cert, base + ".key": key}
	t := config.FileTLS{Name: l.Name, Listen: sp.Listen, Backend: backend,
		Certs: []config.FileTLSCert{{Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key")}}}
	return t, vip, files, nil
}

// renderHA renders [ha] for the pair of gw and its partner: the sync
// channel between the nodes' addresses, and the groups named after the
// members (owned: each member's VIPs).
func renderHA(in Inputs, gw string, owned map[string][]string) (*config.FileHA, map[string][]byte, error) {
	asg, pool := in.Assignment, in.Pool
	partner := asg.Spec.Partner
	port := uint16(pool.Spec.SyncPort)
	if port == 0 {
		port = DefaultSyncPort
	}
	paddr, err := netip.ParseAddr(asg.Spec.PartnerAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: render: partner %s has no valid address (partnerAddress %q)", partner, asg.Spec.PartnerAddress)
	}
	if asg.Spec.HASecret == "" {
		return nil, nil, fmt.Errorf("agent: render: the assignment names no haSecret (the sync channel's certificate)")
	}
	sec := in.Secrets[asg.Spec.HASecret]
	if sec == nil {
		return nil, nil, fmt.Errorf("agent: render: HA Secret %s not found", asg.Spec.HASecret)
	}
	files := map[string][]byte{}
	for k, name := range map[string]string{SecretCert: "ha.crt", SecretKey: "ha.key", SecretCA: "ha-ca.crt"} {
		if len(sec.Data[k]) == 0 {
			return nil, nil, fmt.Errorf("agent: render: HA Secret %s has no %s", asg.Spec.HASecret, k)
		}
		files[name] = sec.Data[k]
	}
	me, other := HAName(gw), HAName(partner)
	h := &config.FileHA{
		Name:     me,
		PeerName: other,
		Listen:   netip.AddrPortFrom(in.NodeAddress.Unmap(), port).String(),
		Peer:     netip.AddrPortFrom(paddr.Unmap(), port).String(),
		Cert:     filepath.Join(in.Dir, "ha.crt"),
		Key:      filepath.Join(in.Dir, "ha.key"),
		CA:       filepath.Join(in.Dir, "ha-ca.crt"),
		Interval: duration(pool.Spec.Detection.Interval),
		Misses:   int(pool.Spec.Detection.Misses),
	}
	// Both members render the same two groups in the same order, each
	// preferring its own.
	members := []string{gw, partner}
	slices.Sort(members)
	for _, m := range members {
		pref := PreferencePartner
		if m == gw {
			pref = PreferenceOwn
		}
		h.Groups = append(h.Groups, config.FileHAGroup{Name: HAName(m), Addresses: owned[m], Preference: pref})
	}
	return h, files, nil
}

// HAName is the name a gateway has in [ha] (v1alpha1.HAMemberName): the
// controller issues its sync-channel certificate for the same name.
func HAName(gateway string) string { return v1alpha1.HAMemberName(gateway) }

// auth renders one end's authentication.
func auth(a v1alpha1.TunnelAuth) config.FileAuth {
	return config.FileAuth{Auth: a.Auth, ID: a.ID, Certs: slices.Clone(a.Certs), CACerts: slices.Clone(a.CACerts)}
}

// duration writes d as the file does ("100ms"), or "" for none.
func duration(d *metav1.Duration) string {
	if d == nil || d.Duration == 0 {
		return ""
	}
	return shortDuration(d.Duration)
}

// shortDuration is d without Go's trailing zero units ("1h0m0s" is "1h").
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// fileSafe keeps the characters of a name a file name may have.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// unspecified is the unspecified address of a's family.
func unspecified(a netip.Addr) netip.Addr {
	if a.Unmap().Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}
