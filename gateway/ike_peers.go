package gateway

// The IKE peers of the configuration: the one place where ike.Peers (with
// their credentials: pre-shared keys, certificates, private keys imported
// into the gateway's engine) and the Controller's ike.ChildPolicys are
// made of [[connection]]s and [[secret]]s.

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/cryptodev"
	"github.com/sluicegw/sluice/ike"
)

// ikeCred is the endpoint's peer of one connection and its credentials:
// the signer and the engine's key, for certificates.
type ikeCred struct {
	peer   *ike.Peer
	signer crypto.Signer
	key    *cryptodev.Key
}

func (c ikeCred) close() {
	if c.signer != nil {
		closeSigner(c.signer)
	}
	if c.key != nil {
		c.key.Destroy()
	}
}

func closeCreds(cs map[string]ikeCred) {
	for _, c := range cs {
		c.close()
	}
}

// ikePolicies makes the Controller's children of cfg's connections.
func ikePolicies(cfg *config.Gateway) []ike.ChildPolicy {
	var out []ike.ChildPolicy
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		for j := range c.Children {
			ch := &c.Children[j]
			pol := ike.ChildPolicy{Peer: c.Name, Child: ch.Name, RekeyBytes: ch.RekeyBytes, LifeBytes: ch.LifeBytes,
				RekeyPackets: ch.RekeyPackets, LifePackets: ch.LifePackets}
			switch ch.StartAction {
			case config.StartStart:
				pol.Start = ike.StartStart
			case config.StartTrap:
				pol.Start = ike.StartTrap
			}
			out = append(out, pol)
		}
	}
	return out
}

func closeSigner(s crypto.Signer) {
	if c, ok := s.(interface{ Close() error }); ok {
		c.Close()
	}
}

// ikePeer makes the ike.Peer of connection i, with its credentials: the
// pre-shared key, or our certificates with the private key loaded into the
// gateway's engine and signed through it (cryptodev.NewSigner).
func (g *Gateway) ikePeer(cfg *config.Gateway, i int) (*ike.Peer, crypto.Signer, *cryptodev.Key, error) {
	p, priv, field, err := ikeCredentials(cfg, i, g.log)
	if err == nil {
		err = eapPeer(cfg, i, p) // eap: [connection.remote] auth = "eap*"
	}
	if err == nil {
		err = g.vipPeer(cfg, i, p) // pools and vips (vip.go)
	}
	if err != nil || priv == nil {
		return p, nil, nil, err
	}
	eng := g.engines[cfg.Engine]
	ae, ok := eng.(cryptodev.AsymEngine)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%s: gateway.engine: engine %q holds no private keys (auth = \"pubkey\" of connection %q needs one that does, such as soft)",
			cfg.FieldPos("gateway.engine"), eng.Name(), cfg.Connections[i].Name)
	}
	key, err := ae.NewPrivateKey(priv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %s: engine %s: %w", cfg.FieldPos(field), field, eng.Name(), err)
	}
	sg, err := cryptodev.NewSigner(eng, key)
	if err != nil {
		key.Destroy()
		return nil, nil, nil, fmt.Errorf("gateway: %w", err)
	}
	p.Signer = sg
	return p, sg, key, nil
}

// ikeCredentials makes the ike.Peer of connection i with its pre-shared
// key or certificates, and finds the private key of our certificate among
// the [[secret]]s (priv, with field, the secret's file field), without
// touching an engine: ikePeer imports priv, Check only wants to know that
// it is there. priv is nil for a connection that does not sign.
func ikeCredentials(cfg *config.Gateway, i int, log *slog.Logger) (*ike.Peer, crypto.PrivateKey, string, error) {
	c := &cfg.Connections[i]
	cf := config.ConnectionField(i)
	ch := &c.Children[0]
	p := &ike.Peer{
		Name: c.Name, Local: c.Local, Remote: c.Remote,
		LocalID: ike.ParseIdentity(c.LocalID()),
		IKE:     c.IKE, ESP: ch.ESP, LocalTS: ch.LocalTS, RemoteTS: ch.RemoteTS,
		ForceEncap: c.Encap,
	}
	if c.RemoteAuth.ID != "" {
		p.RemoteID = ike.ParseIdentity(c.RemoteAuth.ID)
	}
	if c.LocalAuth.Auth == config.AuthPSK || c.RemoteAuth.Auth == config.AuthPSK {
		p.PSK = cfg.PSK(c.LocalID(), c.RemoteAuth.ID)
	}
	setPeerLifetimes(p, c, ch)
	p.NoMOBIKE = !c.MOBIKE // swanctl's mobike (ike_mobike.go)
	// The first child comes with IKE_AUTH; the others with
	// CREATE_CHILD_SA on the same IKE SA (ike.Peer.Children).
	p.ChildName = ch.Name
	for _, more := range c.Children[1:] {
		p.Children = append(p.Children, ike.Child{Name: more.Name, LocalTS: more.LocalTS, RemoteTS: more.RemoteTS, ESP: more.ESP,
			Lifetime: ike.Lifetime{RekeyTime: more.RekeyTime, LifeTime: more.LifeTime}})
	}
	if c.RemoteAuth.Auth == config.AuthPubkey {
		cas, err := remoteCAs(cfg, i)
		if err != nil {
			return nil, nil, "", err
		}
		p.RemoteCAs = cas
	}
	if c.RemoteAuth.Auth == config.AuthPubkey || config.IsEAP(c.RemoteAuth.Auth) {
		// EAP-TLS's certificates are checked against them too (task_eap.go).
		if err := setPeerCRLs(cfg, i, p); err != nil {
			return nil, nil, "", err
		}
	}
	if c.LocalAuth.Auth != config.AuthPubkey {
		return p, nil, "", nil
	}
	for j, f := range c.LocalAuth.Certs {
		certs, err := readCerts(f)
		if err != nil {
			field := fmt.Sprintf("%s.local.certs[%d]", cf, j+1)
			return nil, nil, "", fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		p.Certificates = append(p.Certificates, certs...)
	}
	leaf := p.Certificates[0]
	if c.LocalAuth.ID == "" {
		// A certificate's identity is its first subjectAltName.
		switch {
		case len(leaf.DNSNames) > 0:
			p.LocalID = ike.ParseIdentity("@" + leaf.DNSNames[0])
		case len(leaf.EmailAddresses) > 0:
			p.LocalID = ike.ParseIdentity(leaf.EmailAddresses[0])
		default:
			// None: its subject, as strongSwan's default id.
			p.LocalID = ike.Identity{Type: ike.IDDERASN1, Data: leaf.RawSubject}
		}
	}
	for k := range cfg.Secrets {
		sec := &cfg.Secrets[k]
		if sec.Type != config.SecretPrivate {
			continue
		}
		field := config.SecretField(k) + ".file"
		priv, err := cryptodev.ReadPrivateKey(sec.File)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		if mode, loose := cryptodev.LooseKeyFile(sec.File); loose {
			log.Warn("gateway: private key file readable by others (chmod 600 it, or 640 for a group)", "file", sec.File, "mode", fmt.Sprintf("%#o", mode), "field", field)
		}
		ps, ok := priv.(crypto.Signer)
		pk, ok2 := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
		if !ok || !ok2 || !pk.Equal(ps.Public()) {
			continue
		}
		return p, priv, field, nil
	}
	field := cf + ".local.certs[1]"
	return nil, nil, "", fmt.Errorf("%s: %s: no [[secret]] with type = \"private\" holds the key of %s", cfg.FieldPos(field), field, c.LocalAuth.Certs[0])
}

func readCerts(file string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return out, nil
}

// sameCredentials reports whether two peers built from equal sections
// authenticate alike: the same pre-shared key, certificates and
// revocation lists (the files behind them may have changed).
func sameCredentials(a, b *ike.Peer) bool {
	return sameKeys(a, b) && sameRevocation(a, b)
}

// sameKeys is sameCredentials but for the revocation lists: the same
// keys, certificates and virtual IP pools.
func sameKeys(a, b *ike.Peer) bool {
	eq := func(x, y []*x509.Certificate) bool {
		return slices.EqualFunc(x, y, func(c, d *x509.Certificate) bool { return c.Equal(d) })
	}
	return bytes.Equal(a.PSK, b.PSK) && eq(a.Certificates, b.Certificates) && eq(a.RemoteCAs, b.RemoteCAs) &&
		sameEAP(a, b) && // eap: passwords and EAP-TLS CAs
		slices.Equal(a.Pools, b.Pools) // vip.go: a pool changed in place is the same; one of another family is new
}

// sameRevocation reports whether two peers check certificates against
// the same CRLs (byte for byte) under the same policy.
func sameRevocation(a, b *ike.Peer) bool {
	return a.Revocation == b.Revocation && slices.EqualFunc(a.CRLs, b.CRLs, func(x, y *x509.RevocationList) bool { return bytes.Equal(x.Raw, y.Raw) })
}

// withRevocation is the running peer old with next's revocation lists and
// policy: what a reload that changed only a CRL file (or revocation)
// gives the endpoint, so that its SAs carry on (ike.Peer.RotatesCRLs)
// and the lists apply to the next authentication.
func withRevocation(old, next *ike.Peer) *ike.Peer {
	p := *old
	p.CRLs, p.Revocation = next.CRLs, next.Revocation
	return &p
}

// setPeerLifetimes gives the endpoint the connection's times: it rekeys
// the child at rekey_time (less a random part, swanctl's rand_time) and
// the IKE SA at its rekey_time, and checks the peer's liveness every
// dpd_delay. (The Controller restarts a dead peer whose first child
// starts with the gateway; a trap child is negotiated again by its next
// packet.)
func setPeerLifetimes(p *ike.Peer, c *config.Connection, ch *config.Child) {
	p.ChildLifetime = ike.Lifetime{RekeyTime: ch.RekeyTime, LifeTime: ch.LifeTime}
	p.IKELifetime = ike.Lifetime{RekeyTime: c.RekeyTime}
	if c.OverTime > 0 {
		p.IKELifetime.LifeTime = c.RekeyTime + c.OverTime
	}
	p.DPDDelay = c.DPDDelay
	p.ReauthTime = c.ReauthTime // reauth_time (ike/reauth.go)
}

// remoteCAs reads the certificates connection i's remote side trusts: its
// cacerts, then its certs (the peer's own, pinned); an error names the
// file's key and position.
func remoteCAs(cfg *config.Gateway, i int) ([]*x509.Certificate, error) {
	ra := &cfg.Connections[i].RemoteAuth
	var cas []*x509.Certificate
	for k, files := range [][]string{ra.CACerts, ra.Certs} {
		key := "cacerts"
		if k == 1 {
			key = "certs"
		}
		for j, f := range files {
			certs, err := readCerts(f)
			if err != nil {
				field := fmt.Sprintf("%s.remote.%s[%d]", config.ConnectionField(i), key, j+1)
				return nil, fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
			}
			cas = append(cas, certs...)
		}
	}
	return cas, nil
}
