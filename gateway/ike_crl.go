package gateway

import (
	"fmt"
	"os"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
)

// setPeerCRLs gives p the certificate revocation lists and the
// revocation policy of connection i's [connection.remote] (crls,
// revocation). The files are read here, PEM or DER (ike.ParseCRLs), so
// that a missing or malformed one, or one that RFC 5280 says must not be
// used (a critical extension not understood), is an error naming its
// position and field, at start-up, in Check and on reload; ike checks
// the peer's certificate chain against them (ike/crl.go: complete CRLs
// with their deltas, by scope), so a base CRL and its delta CRL are
// listed side by side.
func setPeerCRLs(cfg *config.Gateway, i int, p *ike.Peer) error {
	ra := &cfg.Connections[i].RemoteAuth
	cf := config.ConnectionField(i)
	for j, f := range ra.CRLs {
		field := fmt.Sprintf("%s.remote.crls[%d]", cf, j+1)
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
		}
		crls, err := ike.ParseCRLs(data)
		if err != nil {
			return fmt.Errorf("%s: %s: %s: %w", cfg.FieldPos(field), field, f, err)
		}
		p.CRLs = append(p.CRLs, crls...)
	}
	var err error
	if p.Revocation, err = ike.ParseRevocation(ra.Revocation); err != nil {
		field := cf + ".remote.revocation"
		return fmt.Errorf("%s: %s: %w", cfg.FieldPos(field), field, err)
	}
	return nil
}
