package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"path/filepath"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/gateway/certgen"
)

// HASyncPort is the port of the sync channel on each gateway's sync
// address (HAGateway.SyncAddr).
const HASyncPort = 4510

// HACreds are the files of a pair's sync channel: a CA, and for each
// member ("a" and "b") a certificate that names it (the DNS name the
// other's peer_name asks for) and its key.
type HACreds struct {
	CA        string
	Cert, Key map[string]string
}

// WriteHACreds makes a CA and the members' certificates and keys
// (ECDSA P-256) in dir.
func WriteHACreds(dir string) (HACreds, error) {
	c, err := certgen.NewCA("sluice lab HA CA")
	if err != nil {
		return HACreds{}, err
	}
	cr := HACreds{CA: filepath.Join(dir, "ca.pem"), Cert: map[string]string{}, Key: map[string]string{}}
	if err := WritePEM(cr.CA, "CERTIFICATE", c.Cert.Raw); err != nil {
		return HACreds{}, err
	}
	for _, name := range []string{"a", "b"} {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return HACreds{}, err
		}
		crt, err := c.Certify(k.Public(), []string{name})
		if err != nil {
			return HACreds{}, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return HACreds{}, err
		}
		cr.Cert[name], cr.Key[name] = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
		if err := WritePEM(cr.Cert[name], "CERTIFICATE", crt.Raw); err != nil {
			return HACreds{}, err
		}
		if err := WritePEM(cr.Key[name], "PRIVATE KEY", der); err != nil {
			return HACreds{}, err
		}
	}
	return cr, nil
}

// HAConfig is member me's [ha] section on t: the other member's sync
// address, 100 ms heartbeats and 3 misses, the witness on the wan router,
// and one group "site" with both virtual addresses at preference pref.
func (t *HATopology) HAConfig(me, other *HAGateway, pref int, c HACreds) *config.FileHA {
	return &config.FileHA{
		Name: me.Name, PeerName: other.Name,
		Listen: me.SyncAddr(HASyncPort).String(), Peer: other.SyncAddr(HASyncPort).String(),
		Cert: c.Cert[me.Name], Key: c.Key[me.Name], CA: c.CA,
		Interval: "100ms", Misses: 3, Witness: t.Witness.String(),
		Groups: []config.FileHAGroup{{
			Name:       "site",
			Addresses:  []string{t.WANVIP.String() + " dev " + HAWANIf, t.LANVIP.String() + " dev " + HALANIf},
			Preference: pref,
		}},
	}
}

// HASection is HAConfig as text, for configurations written as text: it
// ends them, after their last section. The encoder fails only on a string
// that is not UTF-8, which the lab's names and the paths of WriteHACreds
// never are; it panics then, failing the test that asked.
func (t *HATopology) HASection(me, other *HAGateway, pref int, c HACreds) string {
	f := &config.File{HA: t.HAConfig(me, other, pref, c)}
	b, err := f.Encode()
	if err != nil {
		panic("lab: " + err.Error())
	}
	return "\n" + string(b)
}
