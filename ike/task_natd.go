package ike

// NAT detection in IKE_SA_INIT (section 2.23): both sides send hashes of
// the addresses they see; a mismatch means a NAT between them, and then
// ESP goes in UDP (ikeSA.encap), the side behind the NAT sends
// NAT-keepalives (keepalive.go), and the initiator moves to the NAT-T
// port for IKE_AUTH and everything after. Peer.ForceEncap fakes our
// source hash so that the peer sees a NAT too.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"net/netip"
)

func init() { registerTask(IKE_SA_INIT, orderNATD, newNATDTask) }

type natdTask struct{}

func newNATDTask(*ikeSA) task { return natdTask{} }

func (natdTask) build(x *exchange) taskStatus {
	sa := x.sa
	if sa.initiator {
		x.add(natNotifies(sa.spii, 0, sa.local, sa.remote, sa.peer.ForceEncap)...)
		return taskMore
	}
	x.add(natNotifies(sa.spii, sa.spir, sa.local, sa.remote, sa.peer.ForceEncap)...)
	return taskDone
}

func (natdTask) process(x *exchange) taskStatus {
	sa, e := x.sa, x.sa.ep
	ourNAT, peerNAT := natCheck(x.in, sa.spii, sa.spir, sa.local, sa.remote)
	if !sa.initiator {
		ourNAT, peerNAT = natCheck(x.in, sa.spii, 0, sa.local, sa.remote)
	}
	sa.encap = ourNAT || peerNAT || sa.peer.ForceEncap
	sa.natHere, sa.natThere = ourNAT, peerNAT
	e.cfg.Log.Debug("ike: NAT detection", sa.logAttrs("local_behind_nat", ourNAT, "remote_behind_nat", peerNAT, "forced", sa.peer.ForceEncap, "encap", sa.encap)...)
	if !sa.initiator {
		return taskMore
	}
	if sa.encap {
		// Section 2.23: once a NAT is detected, the initiator moves to
		// port 4500 for IKE_AUTH and everything after.
		sa.setAddrsLocked(netip.AddrPortFrom(sa.local.Addr(), e.cfg.NATTPort), netip.AddrPortFrom(sa.remote.Addr(), e.cfg.NATTPort))
	}
	return taskDone
}

// natHash is the NAT detection hash of section 2.23:
// SHA-1(SPIi | SPIr | IP | port).
func natHash(spii, spir uint64, a netip.AddrPort) []byte {
	h := sha1.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], spii)
	binary.BigEndian.PutUint64(b[8:16], spir)
	h.Write(b[:])
	h.Write(a.Addr().Unmap().AsSlice())
	h.Write([]byte{byte(a.Port() >> 8), byte(a.Port())})
	return h.Sum(nil)
}

// natNotifies returns our NAT detection notifies for the addresses
// local and remote; fake makes the source hash random (ForceEncap).
func natNotifies(spii, spir uint64, local, remote netip.AddrPort, fake bool) []Payload {
	src := natHash(spii, spir, local)
	if fake {
		rand.Read(src)
	}
	return []Payload{
		&Notify{NType: NATDetectionSourceIP, Data: src},
		&Notify{NType: NATDetectionDestinationIP, Data: natHash(spii, spir, remote)},
	}
}

// natCheck evaluates the peer's NAT detection notifies (section 2.23):
// peerNAT when no source hash matches the address the message came from,
// ourNAT when the destination hash does not match the address it came to.
// Without notifies there is no NAT detection (both false).
func natCheck(ps []Payload, spii, spir uint64, local, remote netip.AddrPort) (ourNAT, peerNAT bool) {
	var srcSeen, srcMatch, dstSeen, dstMatch bool
	want, wantDst := natHash(spii, spir, remote), natHash(spii, spir, local)
	for _, p := range ps {
		n, ok := p.(*Notify)
		if !ok {
			continue
		}
		switch n.NType {
		case NATDetectionSourceIP:
			srcSeen = true
			srcMatch = srcMatch || bytes.Equal(n.Data, want)
		case NATDetectionDestinationIP:
			dstSeen = true
			dstMatch = dstMatch || bytes.Equal(n.Data, wantDst)
		}
	}
	return dstSeen && !dstMatch, srcSeen && !srcMatch
}
