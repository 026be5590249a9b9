package ike

// The configuration payload task of IKE_AUTH (RFC 7296 section 3.15.4;
// the payload itself is cp.go's): a road warrior asks for virtual IPs,
// its gateway leases them from its pools and narrows the Child SA to
// them.
//
//	initiator (Peer.VIPs)                  responder (Peer.Pools)
//	build:   CP(CFG_REQUEST); TSi of the
//	         child becomes the families
//	         asked for (setup.vip.localTS)
//	                                       process: keeps the CFG_REQUEST;
//	                                         once the peer is authenticated,
//	                                         leases an address per family
//	                                         asked (ippool.Acquire) to its
//	                                         identity; the child's TSi is
//	                                         narrowed to them (setup.vip.remoteTS),
//	                                         or, with none, the child is
//	                                         refused with INTERNAL_ADDRESS_FAILURE
//	                                         (setup.vip.noChild); with
//	                                         pools and no address asked
//	                                         for, FAILED_CP_REQUIRED
//	                                       build:   CP(CFG_REPLY)
//	process: reads the CFG_REPLY; the
//	         Child SA carries the addresses
//	         (setup.vip.vips, ChildSA.VIPs)
//	         it takes (acceptVIPs: one per
//	         family asked, a unicast host
//	         address, inside the TSi the
//	         responder narrowed to); the
//	         rest are refused (WARN,
//	         Stats.VIPRefused)
//
// The leases belong to the IKE SA (ikeSA.leases): they go offline when it
// is removed (releaseLeasesLocked) and move to its successor when it is
// rekeyed (moveChildrenLocked), with the addresses (ikeSA.vips) that
// every Child SA it makes carries (ChildSA.VIPs, rekey.go).

import (
	"errors"
	"net/netip"

	"github.com/sluicegw/sluice/ike/ippool"
)

func init() { registerTask(IKE_AUTH, orderConfig, newConfigTask) }

// vipLease is one address an IKE SA holds of a pool, for the identity
// it was leased to.
type vipLease struct {
	pool *ippool.Pool
	addr netip.Addr
	id   string
}

// vipSetup is what the configuration payload task tells the Child SA
// task of IKE_AUTH (setup.vip).
type vipSetup struct {
	// localTS, initiator: the TSi to propose instead of Peer.LocalTS.
	localTS []netip.Prefix
	// remoteTS, responder: the TSi to narrow to instead of each child's
	// RemoteTS (the virtual IPs assigned).
	remoteTS []netip.Prefix
	// noChild, responder: the error to answer instead of the Child SA.
	noChild NotifyType
	// vips are the virtual IPs assigned (ChildSA.VIPs).
	vips []netip.Addr
	// identity, responder: whom the leases are for, when another task
	// knows better than the IKE identity (an EAP task: the EAP identity,
	// as strongSwan leases by it); "" is the peer's IKE identity.
	identity string
}

// local returns the TSi an initiator proposes: its peer's LocalTS, or
// the families of the virtual IPs it asks for.
func (v *vipSetup) local(peerTS []netip.Prefix) []netip.Prefix {
	if v.localTS != nil {
		return v.localTS
	}
	return peerTS
}

// confs returns the child configurations a responder negotiates the
// Child SA of IKE_AUTH from: with virtual IPs assigned, their remote
// selectors are the addresses.
func (v *vipSetup) confs(cs []childConf) []childConf {
	if v.remoteTS == nil {
		return cs
	}
	for i := range cs {
		cs[i].remoteTS = v.remoteTS
	}
	return cs
}

type configTask struct {
	// Responder: the initiator's CFG_REQUEST (kept from the first round)
	// and our CFG_REPLY.
	req   *CP
	asked bool
	reply *CP
}

func newConfigTask(sa *ikeSA) task {
	if sa.initiator && len(sa.peer.VIPs) == 0 {
		return nil
	}
	// A responder does not know its peer yet (task_auth.go chooses it):
	// the task looks for a CFG_REQUEST whatever the peer.
	return &configTask{}
}

func (t *configTask) build(x *exchange) taskStatus {
	if !x.sa.initiator {
		if !x.setup.peerAuthed {
			return taskMore
		}
		if t.reply != nil {
			x.add(t.reply)
		}
		return taskDone
	}
	if x.round > 0 {
		return taskMore // the first request asked
	}
	vips := x.sa.peer.VIPs
	x.add(vipRequest(vips))
	ts := make([]netip.Prefix, 0, len(vips))
	for _, v := range vips {
		switch {
		case !v.IsUnspecified():
			ts = append(ts, netip.PrefixFrom(v, v.BitLen()))
		case v.Is4():
			ts = append(ts, netip.PrefixFrom(v, 0))
		default:
			ts = append(ts, netip.PrefixFrom(netip.IPv6Unspecified(), 0))
		}
	}
	x.setup.vip.localTS = ts
	return taskMore
}

func (t *configTask) process(x *exchange) taskStatus {
	if x.sa.initiator {
		return t.processReply(x)
	}
	return t.processRequest(x)
}

// processReply is the initiator's: the addresses the responder assigned.
// None is not an error here: the Child SA task finds the responder's
// INTERNAL_ADDRESS_FAILURE (or its selectors) and decides.
func (t *configTask) processReply(x *exchange) taskStatus {
	if !x.setup.peerAuthed {
		return taskMore
	}
	sa := x.sa
	cp, ok := find[*CP](x.in, func(c *CP) bool { return c.CfgType == CfgReply })
	if !ok {
		sa.ep.cfg.Log.Warn("ike: the responder assigned no virtual IP", sa.logAttrs("asked", sa.peer.VIPs)...)
		return taskDone
	}
	assigned, dns := cp.assigned()
	var tsi []Selector
	if ts, ok := find[*TS](x.in, isInitiatorTS); ok {
		tsi = ts.Selectors // the Child SA task checks them against our offer
	}
	vips, refused := acceptVIPs(assigned, sa.peer.VIPs, tsi)
	if len(refused) > 0 {
		sa.ep.stats.VIPRefused += uint64(len(refused))
		sa.ep.cfg.Log.Warn("ike: virtual IPs the responder assigned refused", sa.logAttrs("refused", refusedList(refused), "asked", sa.peer.VIPs)...)
	}
	x.setup.vip.vips, sa.vips = vips, vips
	if len(vips) > 0 {
		sa.ep.cfg.Log.Info("ike: virtual IP assigned", sa.logAttrs("vips", vips, "dns", dns)...)
	}
	return taskDone
}

// processRequest is the responder's: once the initiator is
// authenticated, an address of each family its CFG_REQUEST asks for,
// leased from the peer's pools to its identity.
func (t *configTask) processRequest(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	if !t.asked {
		t.asked = true
		t.req, _ = find[*CP](x.in, func(c *CP) bool { return c.CfgType == CfgRequest })
	}
	if !x.setup.peerAuthed {
		return taskMore
	}
	if len(sa.peer.Pools) == 0 {
		return taskMore // nothing to give: no CP in the answer
	}
	var ask cpAsk
	if t.req != nil {
		ask = t.req.requested()
	}
	if len(ask.Addrs) == 0 {
		// A connection with pools requires a virtual IP, as strongSwan's
		// does: an initiator that asks for none (no CFG_REQUEST, or one
		// without an address attribute) gets FAILED_CP_REQUIRED
		// (section 3.10.1) in place of the Child SA; the IKE SA stands.
		x.setup.vip.noChild = FailedCPRequired
		e.cfg.Log.Warn("ike: the peer asked for no virtual IP where its connection has pools; no Child SA", sa.logAttrs("cp_request", t.req != nil)...)
		return taskMore
	}
	id := x.setup.vip.identity
	if id == "" {
		id = sa.remoteID.String()
	}
	var vips, dns []netip.Addr
	var ts []netip.Prefix
	for _, want := range ask.Addrs {
		a, pool, err := ippool.Acquire(sa.peer.Pools, id, want)
		if err != nil {
			if !errors.Is(err, ippool.ErrExhausted) {
				continue // no pool of that family: nothing assigned of it
			}
			e.stats.VIPExhausted++
			e.cfg.Log.Warn("ike: virtual IP pools exhausted", sa.logAttrs("asked", want)...)
			continue
		}
		if containsAddr(vips, a) {
			pool.Release(id, a) // asked twice for the one it holds
			continue
		}
		sa.leases = append(sa.leases, vipLease{pool: pool, addr: a, id: id})
		vips = append(vips, a)
		ts = append(ts, netip.PrefixFrom(a, a.BitLen()))
		for _, d := range pool.DNS() {
			if !containsAddr(dns, d) {
				dns = append(dns, d)
			}
		}
	}
	if len(ask.Addrs) > 0 && len(vips) == 0 {
		// Section 3.15.4: the IKE SA stands, the Child SA is refused.
		x.setup.vip.noChild = InternalAddressFailure
		e.cfg.Log.Warn("ike: no virtual IP for the peer; the IKE SA stays up without a Child SA", sa.logAttrs()...)
		return taskMore
	}
	if len(vips) > 0 {
		e.stats.VIPAssigned += uint64(len(vips))
		x.setup.vip.remoteTS, x.setup.vip.vips, sa.vips = ts, vips, vips
		e.cfg.Log.Info("ike: virtual IP assigned", sa.logAttrs("vips", vips)...)
	}
	t.reply = vipReply(vips, dns, ask.Netmask)
	return taskMore
}

// releaseLeasesLocked lets go of the IKE SA's virtual IPs: each lease
// goes offline, kept for its identity (ippool). The Endpoint's lock is
// held.
func (sa *ikeSA) releaseLeasesLocked() {
	for _, l := range sa.leases {
		l.pool.Release(l.id, l.addr)
	}
	sa.leases = nil
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}
