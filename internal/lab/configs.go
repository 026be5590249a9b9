package lab

import (
	"github.com/sluicegw/sluice/config"
)

// PairConfigs parses the configurations of two gateways with one tunnel
// between them, "t" at both: A at 192.0.2.1 with 10.1.0.1/24, B at
// 192.0.2.2 with 10.2.0.1/24, two workers and the soft engine, for
// in-memory pairs (MemoryPair). sas holds the [[sa]] tables of "a-to-b"
// and "b-to-a", which both files carry.
func PairConfigs(sas string) (a, b *config.Gateway, err error) {
	site := func(name, tunAddr, local, peer, remote, out, in string) (*config.Gateway, error) {
		f := &config.File{
			Gateway: config.FileGateway{Workers: 2, Engine: "soft"},
			TUN:     &config.FileTUN{Addresses: []string{tunAddr}},
			Tunnels: []config.FileTunnel{{Name: "t", Local: local, Peer: peer, Remote: []string{remote}, Out: out, In: []string{in}}},
		}
		text, err := f.Encode()
		if err != nil {
			return nil, err
		}
		// The SAs come last: after the tunnel's table, their [[sa]]
		// tables are the file's own.
		return config.ParseGateway(name, append(text, "\n"+sas...))
	}
	if a, err = site("a.toml", "10.1.0.1/24", "192.0.2.1", "192.0.2.2", "10.2.0.0/24", "a-to-b", "b-to-a"); err != nil {
		return nil, nil, err
	}
	if b, err = site("b.toml", "10.2.0.1/24", "192.0.2.2", "192.0.2.1", "10.1.0.0/24", "b-to-a", "a-to-b"); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}
