// Package ha keeps a hot standby for a gateway's tunnels: two members, each
// group of tunnels owned by one and mirrored by the other, which takes it
// over when the owner dies (or is asked to, in a planned handover).
//
// # The sync channel
//
// The members talk over one TCP connection with mutual TLS 1.3
// (TLSConfig): each certificate chains to a common CA and names its member.
// The member whose name sorts lower dials, again every Interval while the
// connection is down; the other accepts, and a newer connection replaces an
// older one. Sockets have TCP_NODELAY and TCP_USER_TIMEOUT of
// Interval*Misses, so unacknowledged data ends a dead connection in the
// detection time.
//
// Frames are a 4-byte length, a type byte and a body of varints and
// length-prefixed strings (wire.go); a frame longer than MaxFrame, of an
// unknown type or that does not decode drops the connection and is counted.
// One writer goroutine sends from a bounded queue: a caller never waits on
// the network. When the queue is full the frame is dropped and every
// standby is marked out of sync; once the queue drains, each gets a fresh
// snapshot. One reader goroutine hands frames to the event goroutine, which
// alone changes roles and epochs and calls the Handler.
//
// # Membership
//
// Each group has an epoch that grows by one at every change of owner and
// travels in every message about the group; a message with an older epoch
// is ignored and counted. Heartbeats, every Interval, carry each group's
// role, epoch and the sender's preference. The peer is dead after
// Interval*Misses without a frame, or at once when its connection ends
// (a killed process's kernel closes its sockets).
//
//   - At start, a member that hears no peer within Interval*Misses acquires
//     its groups with an empty state. When both are up, the more preferred
//     (higher preference, then the lower name) acquires and the other
//     becomes standby.
//   - An owner whose peer is a standby (or undecided) sends the group's
//     whole state (Handler.Snapshot and the reservations it has seen), then
//     every change: reservation bounds, forgotten keys, IKE SA snapshots.
//     The standby is in sync once it has acked the snapshot.
//   - A standby whose owner dies takes over (Handler.Acquire with the
//     replicated state, planned false) at epoch+1, logging the gap since
//     the owner's last frame; with a witness configured, only if the
//     witness answers (a TCP connect to it completes) within Interval.
//   - When the link returns and both own a group, the higher epoch wins
//     (then preference, then name); the other releases it and becomes the
//     winner's standby.
//   - A planned handover (Member.Handover) releases the group, sends its
//     exact state at epoch+1, and the standby acquires it with planned
//     true; with Preempt, a more preferred standby in sync asks for it.
//
// # Safety
//
// The owner may use a sequence number only up to a bound the standby has
// acknowledged (Reserve grants only then), so a standby that takes over
// starts above every sequence number the owner can have sent, and treats
// every inbound number up to the replicated bound as seen: nothing is
// sealed twice under one number by the pair in turn, and nothing accepted
// before the takeover is accepted again after it. A lone owner (no standby
// in sync) grants at once: there is nobody to take over from it. Under
// split brain both members seal, with a witness configured only until an
// owner that hears neither its peer nor the witness for twice the
// detection time is fenced (Handler.Fence) while the standby, which
// reached the witness, takes over. Epochs order the claims, so that when
// the link returns the stale owner yields.
//
// # AEAD nonces
//
// Sequence numbers do not keep nonces apart: under split brain both
// members seal the same SAs above the same bounds. Each acquisition
// instead gets a block of IVBlockEpochs AEAD IV epochs (Handler.Acquire's
// ivEpoch; esp's IV is epoch || a 32-bit counter, and the epoch grows by
// one every 2^32 packets), laid out as member bit || block || rollover
// (iv.go), and the claim is: no two instances of one key, on either
// member, seal under one epoch, while the pair remembers. The argument:
//
//   - The two members never share an epoch: the member whose name sorts
//     lower has the epochs below 2^31. That holds with no message
//     exchanged, so an old owner that goes on sealing after the new one
//     took over (before it is fenced, or forever without a witness),
//     rollovers included, and two members that both start alone, are
//     apart by construction. The fencing epoch could not serve here: two
//     members alone at start both acquire at epoch 1, and a member that
//     took over in a split brain and then restarted is told an older
//     epoch by its peer.
//   - Within a member, every acquisition (takeover, handover, handover
//     abandoned, start) takes the next block, also when the Handler then
//     refuses; so does Member.NewIVEpoch. Blocks only grow while the
//     process lives.
//   - Across a member's restart, its peer remembers: each group's record
//     of both members' next blocks travels in every heartbeat, and each
//     side keeps the higher. A restarted member takes the peer's record of
//     its own and adds ivRestartMargin, for the blocks it may have taken
//     after the last heartbeat the peer heard (at most one acquisition per
//     group while the two were apart, since a lone owner keeps its group,
//     and static SAs installed again). Acquiring needs the peer's
//     heartbeat or the alone wait, so a restarted member that hears its
//     peer learns before it takes a block.
//   - Where nothing remembers (both members lost together, a member that
//     starts alone while its peer is down, a peer of the version before
//     blocks, which sends none), the member starts at a random block in
//     the lower half of its space and counts up: it meets a block of an
//     earlier life only if the random start lands among the blocks that
//     life used, a chance of their number over 2^22 per such start.
//     Nothing on disk is needed; a lost state directory changes nothing
//     here.
//   - An SA instance that seals past its block's 2^40 packets runs into
//     the next block; esp.SA.Resume never moves it below the epoch it is
//     at, and negotiated keys are rekeyed long before.
//
// A peer of the earlier version draws its epochs at random, as before; the
// pair then has the birthday bound of esp's package doc on that side.
//
// # The witness
//
// The witness breaks the tie of a pair that lost its sync channel: the
// member that reaches it may take over or keep sealing, the one that does
// not stands back. It is reachable only when a TCP connect to it
// completes: the witness's own SYN-ACK answered. A refused connect (a
// reset, an ICMP unreachable) is not counted, since anything on the path
// can send one, and an isolated owner that took its router's "no route"
// for the witness would never fence. Nothing is asked of the witness
// beyond the connect, because its port may be any service. A good
// witness therefore:
//
//   - listens on the TCP port configured (a DNS server's 53, an SSH or
//     HTTPS port of a router): a closed port is unreachable;
//   - sits where the traffic goes, beyond what the members share (the
//     upstream router, not the switch between them), so that reaching it
//     means the member can still carry traffic;
//   - runs on neither member nor on the sync channel's path alone, and is
//     reached from both members by the same kind of route;
//   - answers its own SYNs: not behind a SYN proxy or a transparent proxy
//     that completes connects for hosts that are down;
//   - stays up: an unreachable witness blocks every takeover (counted as
//     TakeoversBlocked) and fences a lone owner.
//
// Keys never leave memory: the channel is the only copy.
package ha
