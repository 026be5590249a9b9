package gateway

// The IKE side as `sluice ike list`, `sluice stats` and the metrics see
// it: the configured connections, their children's pairs (the
// ike.Controller's) and the endpoint's counters by snake_case name.

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/sluicegw/sluice/config"
	"github.com/sluicegw/sluice/ike"
	"github.com/sluicegw/sluice/sad"
)

// IKEInfo is the IKE side for `sluice ike list` and `sluice stats`.
type IKEInfo struct {
	Connections []IKEConnInfo     `json:"connections"`
	Stats       map[string]uint64 `json:"stats"` // ike.Stats by snake_case name
	// Pools are the virtual IP pools the connections use ([[pool]]s
	// named by a connection's pools), by name.
	Pools []IKEPoolInfo `json:"pools,omitempty"`
}

// IKEPoolInfo is one virtual IP pool's occupancy (ippool.Stats).
type IKEPoolInfo struct {
	Name string `json:"name"`
	Size int    `json:"size"` // addresses
	// Online are the leases held by an IKE SA; Offline those kept for an
	// identity that left (it gets the same address back); Free the
	// addresses never leased or given up. Size = Online + Offline + Free.
	Online  int `json:"online"`
	Offline int `json:"offline"`
	Free    int `json:"free"`
}

// IKEConnInfo is one connection and its child.
type IKEConnInfo struct {
	Name    string `json:"name"`
	Local   string `json:"local"`
	Remote  string `json:"remote"` // configured; "%any" for any
	State   string `json:"state"`  // "established", "connecting", "down" or "terminated"
	IKESPIi string `json:"ike_spi_i,omitempty"`
	IKESPIr string `json:"ike_spi_r,omitempty"`
	// IKEEstablished is when the IKE SA in use was made (a rekey makes a
	// new one); IKEInitiator whether we made it; IKERemote the peer's
	// address and port IKE uses now (4500 after a NAT was found).
	IKEEstablished time.Time `json:"ike_established,omitzero"`
	IKEInitiator   bool      `json:"ike_initiator,omitempty"`
	IKERemote      string    `json:"ike_remote,omitempty"`
	// IKESuite is the IKE SA's negotiated suite ("aes256gcm16-prfsha384-
	// ecp384"); LocalID the identity we authenticated with, RemoteID the
	// peer's. All three are empty while no IKE SA is established.
	IKESuite string `json:"ike_suite,omitempty"`
	LocalID  string `json:"local_id,omitempty"`
	RemoteID string `json:"remote_id,omitempty"`
	// Proposal is the configured IKE proposals.
	Proposal string         `json:"proposals"`
	Error    string         `json:"error,omitempty"` // the last failure
	Children []IKEChildInfo `json:"children"`
}

// IKEChildInfo is one child: its current SA pair, if any.
type IKEChildInfo struct {
	Name string `json:"name"`
	// Tunnel is the name of its tunnel (`sluice tunnel list`, the
	// metrics): Name, or for each road warrior of a responder-only
	// connection's child, which the list shows once per road warrior,
	// "<child>/<virtual IP>" (ike.TunnelName); VIPs are the road
	// warrior's virtual IPs.
	Tunnel string   `json:"tunnel,omitempty"`
	VIPs   []string `json:"vips,omitempty"`
	// RemoteID is the identity the peer of the installed pair's IKE SA
	// proved: for a road warrior the one it authenticated with (what
	// EAP proved, with EAP), which the connection's own RemoteID, one of
	// many IKE SAs', does not tell.
	RemoteID    string `json:"remote_id,omitempty"`
	StartAction string `json:"start_action"`
	State       string `json:"state"` // "installed", "trap" or "down"
	InSPI       uint32 `json:"in_spi,omitempty"`
	OutSPI      uint32 `json:"out_spi,omitempty"`
	Suite       string `json:"suite,omitempty"` // the negotiated ESP suite
	ESN         bool   `json:"esn"`
	// BytesIn and PacketsIn count what the inbound SA of the installed
	// pair opened, BytesOut and PacketsOut what its outbound SA sealed
	// (the SAs' counters: ESP payload bytes). A rekey starts them again.
	BytesIn     uint64    `json:"bytes_in"`
	BytesOut    uint64    `json:"bytes_out"`
	PacketsIn   uint64    `json:"packets_in"`
	PacketsOut  uint64    `json:"packets_out"`
	Encap       bool      `json:"encap"`
	PeerAddr    string    `json:"peer,omitempty"` // the outer address and port ESP goes to
	LocalTS     []string  `json:"local_ts"`
	RemoteTS    []string  `json:"remote_ts"`
	Established time.Time `json:"established,omitzero"`
	RekeyTime   string    `json:"rekey_time"`
	LifeTime    string    `json:"life_time"`
}

// IKE describes the connections and the endpoint's counters.
func (g *Gateway) IKE() IKEInfo {
	s := &g.ike
	s.mu.Lock()
	ep, ctl, dp := s.ep, s.ctl, s.dp
	conns := s.conns
	s.mu.Unlock()
	info := IKEInfo{Connections: []IKEConnInfo{}, Stats: map[string]uint64{}}
	ikeSAs := map[string]ike.IKESAInfo{} // the established IKE SA of each peer
	ids := map[*ike.ChildSA]string{}     // the remote identity of each pair's IKE SA
	if ep != nil {
		info.Stats = IKEStatsMap(ep.Stats())
		for _, sa := range ep.IKESAs() {
			if sa.State == "established" {
				ikeSAs[sa.Peer] = sa
			}
			for _, c := range sa.Children {
				ids[c] = sa.RemoteID
			}
		}
	}
	info.Pools = g.poolInfo()
	children := map[string][]ike.ChildStatus{} // by child: its road warriors', else its own
	if ctl != nil {
		for _, st := range ctl.Children() {
			if st.Tunnel == "" && st.Pair == nil {
				continue // a responder-only connection's child: its road warriors follow
			}
			children[st.Child] = append(children[st.Child], st)
		}
		for _, st := range ctl.Children() {
			if st.Tunnel == "" && len(children[st.Child]) == 0 {
				children[st.Child] = []ike.ChildStatus{st} // no road warrior
			}
		}
	}
	db := g.store.Load()
	for i := range conns {
		c := &conns[i]
		ci := IKEConnInfo{Name: c.Name, Local: c.Local.String(), Remote: "%any", Proposal: c.Proposals, State: "down"}
		if c.Remote.IsValid() {
			ci.Remote = c.Remote.String()
		}
		for j := range c.Children {
			child := &c.Children[j]
			for _, st := range children[child.Name] {
				if st.Peer != c.Name {
					continue
				}
				cc := g.ikeChildInfo(&ci, child, st, ep, dp, db)
				if st.Pair != nil {
					cc.RemoteID = ids[st.Pair]
				}
				ci.Children = append(ci.Children, cc)
			}
		}
		if sa, ok := ikeSAs[c.Name]; ok {
			ci.IKESPIi, ci.IKESPIr = fmt.Sprintf("%016x", sa.SPIi), fmt.Sprintf("%016x", sa.SPIr)
			ci.IKEEstablished, ci.IKEInitiator, ci.IKERemote = sa.Established, sa.Initiator, sa.Remote.String()
			ci.IKESuite, ci.LocalID, ci.RemoteID = sa.Suite, sa.LocalID, sa.RemoteID
		}
		info.Connections = append(info.Connections, ci)
	}
	return info
}

// ikeChildInfo describes the child st of connection ci, configured as
// child, and sets ci's state and error by it; ep (nil: none) says where
// its pair's ESP goes now.
func (g *Gateway) ikeChildInfo(ci *IKEConnInfo, child *config.Child, st ike.ChildStatus, ep *ike.Endpoint, dp *ikeDataPlane, db *sad.DB) IKEChildInfo {
	cc := IKEChildInfo{Name: child.Name, Tunnel: st.Tunnel, StartAction: child.StartAction, State: "down",
		RekeyTime: child.RekeyTime.String(), LifeTime: child.LifeTime.String()}
	if cc.Tunnel == "" {
		cc.Tunnel = child.Name
	}
	// The negotiated selectors while a pair is installed (the
	// peer may have narrowed them), else the configured ones.
	if cur := st.Pair; cur != nil {
		for _, sel := range cur.LocalTS {
			cc.LocalTS = append(cc.LocalTS, sel.String())
		}
		for _, sel := range cur.RemoteTS {
			cc.RemoteTS = append(cc.RemoteTS, sel.String())
		}
	} else {
		for _, p := range child.LocalTS {
			cc.LocalTS = append(cc.LocalTS, p.String())
		}
		for _, p := range child.RemoteTS {
			cc.RemoteTS = append(cc.RemoteTS, p.String())
		}
	}
	switch cur := st.Pair; {
	case cur != nil:
		cc.State, cc.InSPI, cc.OutSPI, cc.Suite, cc.ESN, cc.Encap = "installed", cur.InSPI, cur.OutSPI, cur.Suite, cur.ESN, cur.Encap
		// Where its ESP goes now: MOBIKE or a NAT the peer is
		// behind may have moved it from where it was made.
		peer := cur.Remote
		if ep != nil {
			if _, r, ok := ep.ChildAddrs(cur); ok {
				peer = r
			}
		}
		cc.PeerAddr, cc.Established = peer.String(), st.Since
		for _, v := range cur.VIPs {
			cc.VIPs = append(cc.VIPs, v.String())
		}
		tr := dp.Traffic(cc.Tunnel, cur)
		cc.PacketsIn, cc.BytesIn, cc.PacketsOut, cc.BytesOut = tr.PacketsIn, tr.BytesIn, tr.PacketsOut, tr.BytesOut
		ci.State = "established"
	case db.Tunnel(cc.Tunnel) != nil:
		cc.State = "trap"
	}
	if ci.State != "established" {
		switch {
		case st.Busy:
			ci.State = "connecting"
		case st.Terminated:
			ci.State = "terminated"
		}
	}
	if st.LastErr != "" {
		ci.Error = st.LastErr
	}
	return cc
}

// IKEStatsMap names each counter of ike.Stats in snake_case, for JSON
// and Prometheus: RxIntegrityFailed is rx_integrity_failed.
func IKEStatsMap(st ike.Stats) map[string]uint64 {
	m := map[string]uint64{}
	v := reflect.ValueOf(st)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			m[snake(v.Type().Field(i).Name)] = f.Uint()
		}
	}
	return m
}

// snake turns a Go name into snake_case: "TSUnacceptable" is
// "ts_unacceptable", "IKESAEstablished" "ike_sa_established".
func snake(s string) string {
	var b strings.Builder
	r := []rune(strings.ReplaceAll(s, "IKESA", "IkeSa"))
	for i, c := range r {
		upper := c >= 'A' && c <= 'Z'
		if upper && i > 0 {
			prevLower := r[i-1] >= 'a' && r[i-1] <= 'z'
			nextLower := i+1 < len(r) && r[i+1] >= 'a' && r[i+1] <= 'z'
			if prevLower || nextLower && r[i-1] >= 'A' && r[i-1] <= 'Z' {
				b.WriteByte('_')
			}
		}
		if upper {
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

// poolInfo is the occupancy of each virtual IP pool, by name.
func (g *Gateway) poolInfo() []IKEPoolInfo {
	s := &g.vip
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []IKEPoolInfo
	for name, vp := range s.pools {
		st := vp.pool.Stats()
		out = append(out, IKEPoolInfo{Name: name, Size: st.Size, Online: st.Online, Offline: st.Offline,
			Free: max(st.Size-st.Online-st.Offline, 0)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
