package ha

import (
	"crypto/rand"
	"encoding/binary"
)

// AEAD IV epochs: the pair hands each acquisition of a group a block of
// IV epochs (esp's explicit IV is epoch || counter) that no instance of
// the group's SAs on either member used before, as far as either member
// remembers (the safety argument is in the package documentation).
//
//	epoch = member (1 bit) || block (IVBlockBits) || rollover (8 bits)
//
// The member bit is 0 for the member whose name sorts lower: the two
// members' epochs never meet, however long both seal (split brain) and
// however often each rolls over. Blocks count up per member; each group
// holds, for both members, the next block neither has used, and every
// heartbeat carries both (the higher wins), so that a member that
// restarts learns from its peer where it stood.

// IVBlockBits is the width of the block number in an IV epoch: a member
// has 2^IVBlockBits blocks per group.
const IVBlockBits = 23

// IVBlockEpochs is how many IV epochs a block spans: an SA instance may
// seal IVBlockEpochs * 2^32 packets (2^40) within its block.
const IVBlockEpochs = 1 << 8

// ivRestartMargin is how many blocks a member skips above what its peer
// recorded for it, the first time it hears the peer after its start:
// blocks it took after the peer's last heartbeat from it (an acquisition
// at most, while the two were apart, and static SAs installed again)
// are among them.
const ivRestartMargin = 64

// ivBlocks is a group's record of both members' IV blocks. Guarded by
// Member.mu.
type ivBlocks struct {
	next    [2]uint64 // by member bit: the lowest block that member has not used
	learned bool      // this member's own entry came from the peer once
	started bool      // this member's own entry is decided (learned or drawn)
}

// self is this member's bit: 0 when its name sorts lower.
func (m *Member) ivSelf() int {
	if m.cfg.Name < m.cfg.PeerName {
		return 0
	}
	return 1
}

// merge takes what the peer's heartbeat says of both members' blocks.
// The first time it tells this member's own, the margin is added.
func (b *ivBlocks) merge(self int, peer [2]uint64) {
	other := 1 - self
	b.next[other] = max(b.next[other], peer[other])
	own := peer[self]
	if !b.learned {
		own += ivRestartMargin
		b.learned, b.started = true, true
	}
	b.next[self] = max(b.next[self], own)
}

// allocLocked takes this member's next block of g and returns its first
// IV epoch. A member that has heard nothing of its own blocks (it started
// alone, or its peer is of a version without them) starts at a random
// block in the lower half, so that the blocks of its earlier lives are
// met only by chance. Member.mu is held.
func (m *Member) allocIVLocked(g *group) uint32 {
	self := m.ivSelf()
	b := &g.iv
	if !b.started {
		var r [8]byte
		rand.Read(r[:]) // never fails (crypto/rand ends the program instead)
		b.next[self] = max(b.next[self], binary.BigEndian.Uint64(r[:])%(1<<(IVBlockBits-1)))
		b.started = true
	}
	if b.next[self] >= 1<<IVBlockBits-1 {
		// 2^23 acquisitions of one group: start over from a random
		// block, as an unknown past would (the last block stays free
		// for the rollovers of the one before).
		m.log.Error("ha: the group's IV epoch blocks are used up: starting again at a random one", "group", g.name)
		b.started = false
		b.next[self] = 0
		return m.allocIVLocked(g)
	}
	blk := b.next[self]
	b.next[self]++
	return uint32(self)<<31 | uint32(blk)<<8
}

// NewIVEpoch gives the owner of group a fresh block of IV epochs and
// returns its first epoch, for an SA whose key an earlier instance on
// this member may have sealed with under the current block (a static SA
// installed again by a reload). ok is false when this member does not
// own the group.
func (m *Member) NewIVEpoch(group string) (epoch uint32, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || g.role != roleOwner {
		return 0, false
	}
	return m.allocIVLocked(g), true
}
