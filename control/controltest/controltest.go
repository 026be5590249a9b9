// Package controltest provides test doubles for package control: an
// in-memory Backend, so that the control server and the command line can be
// tested without a TUN device or a running gateway.
package controltest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/dataplane"
	"github.com/sluicegw/sluice/gateway"
	"github.com/sluicegw/sluice/ha"
)

// Backend is an in-memory control.Backend that behaves like a small gateway:
// SAs are added to and removed from its tunnels, and every call is counted.
// Its exported fields may be set before it is used; afterwards use its
// methods, which are safe for concurrent use.
type Backend struct {
	mu       sync.Mutex
	sas      []gateway.SAInfo
	tunnels  []gateway.TunnelInfo
	policies []gateway.PolicyInfo
	data     dataplane.Stats
	tls      []gateway.TLSInfo
	ike      *gateway.IKEInfo
	ha       *ha.Status
	calls    map[string]int
	applies  []Applied

	// ReloadErr is what Reload returns, and ReloadChanges the changes it
	// reports when ReloadErr is nil.
	ReloadErr     error
	ReloadChanges []string
	// Panic, when set, makes the method of that name ("SAs", "Stats", ...)
	// panic, to test that a failing backend does not take the server down.
	Panic string
	// Block, when non-nil, makes every method wait until it is closed.
	Block chan struct{}
}

// New returns a backend with one tunnel "to-b" (outbound SA a-to-b, SPI
// 0x1001; inbound SA b-to-a, SPI 0x2001), one policy, two workers and two
// receivers, and one TLS listener "web", with some packets, handshakes and
// drops counted.
func New() *Backend {
	return &Backend{
		tunnels: []gateway.TunnelInfo{{
			Name: "to-b", Local: "192.0.2.1", Peer: "192.0.2.2", Encap: "udp",
			Remote: []string{"10.2.0.0/24"}, MTU: 1400, Worker: 0, Out: "a-to-b", In: []string{"b-to-a"},
		}},
		sas: []gateway.SAInfo{
			{Name: "a-to-b", Tunnel: "to-b", Direction: "out", SPI: 0x1001, Alg: "aes128gcm16", Mode: "tunnel",
				Encap: "udp", Engine: "soft", Packets: 10, Bytes: 1000, Drops: map[string]uint64{}},
			{Name: "b-to-a", Tunnel: "to-b", Direction: "in", SPI: 0x2001, Alg: "aes128gcm16", Mode: "tunnel",
				Encap: "udp", Engine: "soft", Packets: 7, Bytes: 700, Drops: map[string]uint64{"replay": 2, "auth_failed": 1}},
		},
		policies: []gateway.PolicyInfo{{Name: "web", Selector: "10.1.0.0/24 -> 10.2.0.0/24 tcp", Action: "protect", Tunnel: "to-b"}},
		data: dataplane.Stats{
			Workers: []dataplane.WorkerStats{
				{Index: 0, Sealed: 10, Opened: 7, TxPackets: 17, Drops: map[string]uint64{"no_route": 3}},
				{Index: 1, Drops: map[string]uint64{}},
			},
			Receivers: []dataplane.RxStats{
				{Plain: true, Packets: 13, Bytes: 1300, Drops: map[string]uint64{}},
				{Plain: false, Packets: 10, Bytes: 1500, Drops: map[string]uint64{"unknown_spi": 1}},
			},
		},
		tls: []gateway.TLSInfo{{
			Name: "web", Kind: "terminate", Listen: "127.0.0.1:8443",
			Open: 2, Accepted: 12, Refused: 1, Handshakes: 10, Resumed: 4,
			HandshakeFailures: map[string]uint64{"protocol": 1, "timeout": 1},
			BytesIn:           5120, BytesOut: 1048576, IdleClosed: 3, Requests: 7,
			SignQueueDepth: 0, SignOps: 6, SignBatches: 2, SignMaxBatch: 4,
		}},
		calls: map[string]int{},
	}
}

// SetTLS replaces the TLS listeners' counters that Stats returns.
func (b *Backend) SetTLS(tls []gateway.TLSInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tls = slices.Clone(tls)
}

// Calls returns how many times the method of that name was called.
func (b *Backend) Calls(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[method]
}

// enter counts a call, waits for Block and panics if asked to. The caller
// holds no lock.
func (b *Backend) enter(method string) {
	b.mu.Lock()
	if b.calls == nil {
		b.calls = map[string]int{}
	}
	b.calls[method]++
	block, p := b.Block, b.Panic == method
	b.mu.Unlock()
	if block != nil {
		<-block
	}
	if p {
		panic("controltest: " + method + " panics as asked")
	}
}

// SAs lists the SAs.
func (b *Backend) SAs() []gateway.SAInfo {
	b.enter("SAs")
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sas)
}

// Tunnels lists the tunnels.
func (b *Backend) Tunnels() []gateway.TunnelInfo {
	b.enter("Tunnels")
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.tunnels)
	for i := range out {
		out[i].In = slices.Clone(out[i].In) // AddSA appends to ours while the caller encodes this
	}
	return out
}

// Policies lists the policies.
func (b *Backend) Policies() []gateway.PolicyInfo {
	b.enter("Policies")
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.policies)
}

// Stats returns the counters.
func (b *Backend) Stats() gateway.Stats {
	b.enter("Stats")
	b.mu.Lock()
	defer b.mu.Unlock()
	return gateway.Stats{Dataplane: b.data, SAs: slices.Clone(b.sas), TLS: slices.Clone(b.tls), IKE: b.ike,
		Tunnels: b.tunnelStatsLocked(), HA: b.ha}
}

// tunnelStatsLocked sums the SAs' counters by tunnel and direction, as the
// gateway does (its retired SAs aside: this backend retires none). b.mu
// is held.
func (b *Backend) tunnelStatsLocked() []gateway.TunnelStats {
	var out []gateway.TunnelStats
	for _, t := range b.tunnels {
		for _, dir := range []string{"in", "out"} {
			ts := gateway.TunnelStats{Tunnel: t.Name, Direction: dir, Drops: map[string]uint64{}}
			for _, r := range gateway.DropReasons(dir) {
				ts.Drops[r] = 0
			}
			for _, sa := range b.sas {
				if sa.Tunnel != t.Name || sa.Direction != dir {
					continue
				}
				ts.Packets += sa.Packets
				ts.Bytes += sa.Bytes
				for r, v := range sa.Drops {
					ts.Drops[r] += v
				}
				ts.NeedsRekey = ts.NeedsRekey || sa.NeedsRekey
				ts.StateFailing = ts.StateFailing || sa.StateFailing
				ts.StateFailures += sa.StateFailures
			}
			out = append(out, ts)
		}
	}
	return out
}

// AddSA adds an inbound SA to a tunnel, or replaces its outbound SA, as the
// gateway does; the errors name the same problems.
func (b *Backend) AddSA(tunnel, dir string, sa *config.SA) error {
	b.enter("AddSA")
	b.mu.Lock()
	defer b.mu.Unlock()
	ti := slices.IndexFunc(b.tunnels, func(t gateway.TunnelInfo) bool { return t.Name == tunnel })
	if ti < 0 {
		return fmt.Errorf("gateway: no tunnel %q", tunnel)
	}
	if dir != "in" && dir != "out" {
		return fmt.Errorf("gateway: direction must be \"in\" or \"out\", not %q", dir)
	}
	info := gateway.SAInfo{Name: sa.Name, Tunnel: tunnel, Direction: dir, SPI: sa.SPI, Alg: sa.Alg.String(),
		Mode: string(sa.Mode), Encap: string(sa.Encap), ESN: sa.ESN, Engine: "soft", Drops: map[string]uint64{}}
	if dir == "in" {
		if slices.ContainsFunc(b.sas, func(s gateway.SAInfo) bool { return s.Direction == "in" && s.SPI == sa.SPI }) {
			return fmt.Errorf("sad: inbound SPI %#x is in use", sa.SPI)
		}
		b.sas = append(b.sas, info)
		b.tunnels[ti].In = append(b.tunnels[ti].In, sa.Name)
		return nil
	}
	b.sas = slices.DeleteFunc(b.sas, func(s gateway.SAInfo) bool { return s.Tunnel == tunnel && s.Direction == "out" })
	b.sas = append(b.sas, info)
	b.tunnels[ti].Out = sa.Name
	return nil
}

// DelSA removes the inbound SA with the given SPI.
func (b *Backend) DelSA(spi uint32) error {
	b.enter("DelSA")
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.IndexFunc(b.sas, func(s gateway.SAInfo) bool { return s.Direction == "in" && s.SPI == spi })
	if i < 0 {
		return fmt.Errorf("sad: no inbound SA with SPI %#x", spi)
	}
	gone := b.sas[i]
	b.sas = slices.Delete(b.sas, i, i+1)
	for ti := range b.tunnels {
		if b.tunnels[ti].Name == gone.Tunnel {
			b.tunnels[ti].In = slices.DeleteFunc(b.tunnels[ti].In, func(n string) bool { return n == gone.Name })
		}
	}
	return nil
}

// SetReloadErr sets what Reload returns from now on.
func (b *Backend) SetReloadErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ReloadErr = err
}

// SetReloadChanges sets the changes Reload reports from now on.
func (b *Backend) SetReloadChanges(changes []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ReloadChanges = changes
}

// Reload counts the reload and returns ReloadChanges and ReloadErr.
func (b *Backend) Reload() ([]string, error) {
	b.enter("Reload")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ReloadErr != nil {
		return nil, b.ReloadErr
	}
	return b.ReloadChanges, nil
}

// Applied is one call of Apply: its arguments.
type Applied struct {
	Name, Text string
	TicketKeys [][32]byte
}

// Apply records the call (Applies) and returns ReloadChanges and
// ReloadErr, as Reload does.
func (b *Backend) Apply(name, text string, ticketKeys [][32]byte) ([]string, error) {
	b.enter("Apply")
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applies = append(b.applies, Applied{Name: name, Text: text, TicketKeys: ticketKeys})
	if b.ReloadErr != nil {
		return nil, b.ReloadErr
	}
	return b.ReloadChanges, nil
}

// Applies returns the calls of Apply so far, in order.
func (b *Backend) Applies() []Applied {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.applies)
}

// SocketPath returns a path for a control socket in a new directory that
// is removed when the test ends. It is short: a socket path has at most
// 107 bytes, which t.TempDir's long names can exceed.
func SocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluicectl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "sluice.sock")
}

// SetHA makes the backend a member of a pair: what HAStatus returns and
// Stats reports.
func (b *Backend) SetHA(st *ha.Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ha = st
}

// HAStatus returns what SetHA set, or false (no [ha]).
func (b *Backend) HAStatus() (ha.Status, bool) {
	b.enter("HAStatus")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ha == nil {
		return ha.Status{}, false
	}
	return *b.ha, true
}

// HAHandover hands the groups this member owns (group, or all for "")
// to the standby named in their status, as a real member would; it
// refuses a group it does not own.
func (b *Backend) HAHandover(ctx context.Context, group string) error {
	b.enter("HAHandover")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ha == nil {
		return fmt.Errorf("gateway: this gateway has no [ha] section")
	}
	done := false
	for i := range b.ha.Groups {
		g := &b.ha.Groups[i]
		if (group == "" || g.Name == group) && g.Role == "owner" && g.Standby != "" {
			g.Role, g.Owner, g.Standby, g.Epoch = "standby", g.Standby, b.ha.Name, g.Epoch+1
			done = true
		}
	}
	if !done {
		return fmt.Errorf("ha: handover of %q: this member owns no such group with a standby", group)
	}
	return nil
}

// SetIKE sets what IKE returns, and what Stats reports as its IKE side.
func (b *Backend) SetIKE(info *gateway.IKEInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ike = info
}

// IKE returns what SetIKE set, or no connections.
func (b *Backend) IKE() gateway.IKEInfo {
	b.enter("IKE")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ike == nil {
		return gateway.IKEInfo{Stats: map[string]uint64{}}
	}
	return *b.ike
}

// InitiateIKE succeeds for a connection SetIKE named.
func (b *Backend) InitiateIKE(ctx context.Context, name string) error {
	b.enter("InitiateIKE")
	return b.ikeConn(name)
}

// TerminateIKE succeeds for a connection SetIKE named.
func (b *Backend) TerminateIKE(ctx context.Context, name string) error {
	b.enter("TerminateIKE")
	return b.ikeConn(name)
}

func (b *Backend) ikeConn(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ike != nil {
		for _, c := range b.ike.Connections {
			if c.Name == name {
				return nil
			}
		}
	}
	return fmt.Errorf("gateway: no IKE connection %q", name)
}
