package ike

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicegw/sluice/ike/eap"
	"github.com/sluicegw/sluice/ike/ippool"
)

// Identity is an IKE identification (RFC 7296 section 3.5).
type Identity struct {
	Type IDType
	Data []byte
}

// ParseIdentity reads an identity the way strongSwan's id = does for the
// common forms: an IPv4 or IPv6 address, a distinguished name
// ("C=CH, O=strongSwan, CN=gw.example": see IsDN and ParseDN),
// "user@domain" (RFC822), "@fqdn" or a bare name (FQDN). The prefixes
// "asn1dn:" and "fqdn:" force a type. A malformed DN is taken as an FQDN
// of its text (which no peer's DN matches); ReadIdentity reports it.
func ParseIdentity(s string) Identity {
	id, err := ReadIdentity(s)
	if err != nil {
		return Identity{Type: IDFQDN, Data: []byte(s)}
	}
	return id
}

// ReadIdentity is ParseIdentity with an error for a malformed
// distinguished name.
func ReadIdentity(s string) (Identity, error) {
	switch {
	case strings.HasPrefix(s, "asn1dn:"):
		der, err := ParseDN(s[len("asn1dn:"):])
		return Identity{Type: IDDERASN1, Data: der}, err
	case strings.HasPrefix(s, "fqdn:"):
		return Identity{Type: IDFQDN, Data: []byte(s[len("fqdn:"):])}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() {
			return Identity{Type: IDIPv4Addr, Data: a.AsSlice()}, nil
		}
		return Identity{Type: IDIPv6Addr, Data: a.AsSlice()}, nil
	}
	if IsDN(s) {
		der, err := ParseDN(s)
		return Identity{Type: IDDERASN1, Data: der}, err
	}
	if strings.HasPrefix(s, "@") {
		return Identity{Type: IDFQDN, Data: []byte(s[1:])}, nil
	}
	if strings.Contains(s, "@") {
		return Identity{Type: IDRFC822, Data: []byte(s)}, nil
	}
	return Identity{Type: IDFQDN, Data: []byte(s)}, nil
}

// String formats the identity for logs.
func (i Identity) String() string {
	switch i.Type {
	case IDIPv4Addr, IDIPv6Addr:
		if a, ok := netip.AddrFromSlice(i.Data); ok {
			return a.String()
		}
	case IDFQDN, IDRFC822:
		return string(i.Data)
	case IDDERASN1:
		if s := dnString(i.Data); s != "" {
			return s
		}
	}
	return fmt.Sprintf("id(%d):%x", i.Type, i.Data)
}

// IsZero reports whether no identity is set.
func (i Identity) IsZero() bool { return i.Type == 0 && len(i.Data) == 0 }

// Equal reports whether i and o are the same identity: distinguished
// names compare by value (DNEqual), other types byte for byte.
func (i Identity) Equal(o Identity) bool {
	if i.Type != o.Type {
		return false
	}
	if i.Type == IDDERASN1 {
		return DNEqual(i.Data, o.Data)
	}
	return bytes.Equal(i.Data, o.Data)
}

func (i Identity) equal(p *ID) bool { return i.Equal(Identity{p.IDType, p.Data}) }

// Peer is the configuration of one peer: addresses, identities, the
// pre-shared key, proposals and its Child SAs' traffic selectors.
type Peer struct {
	// Name names the peer in logs and in ChildSA.Name.
	Name string
	// Local is our address for this peer; Remote the peer's. A responder
	// matches a zero Remote against any address.
	Local, Remote netip.Addr
	// LocalID is sent as IDi/IDr; RemoteID, if set, must be the peer's.
	LocalID, RemoteID Identity
	// PSK is the pre-shared key (RFC 7296 section 2.15) for whichever
	// direction does not use a signature.
	PSK []byte
	// Certificates is our X.509 chain, ours first, sent in CERT payloads;
	// Signer is its private key (cryptodev.NewSigner keeps it in an
	// engine). With a Signer we authenticate with a signature (see
	// auth.go), otherwise with PSK.
	Certificates []*x509.Certificate
	Signer       crypto.Signer
	// AuthMethod is the signature method we use: 0 chooses RFC 7427's
	// Digital Signature when the peer announced a usable hash, else the
	// key type's classic method (1, 9, 10, 11).
	AuthMethod AuthMethod
	// RemoteCAs, if set, make the peer authenticate with a signature by
	// a certificate that chains to one of them and names RemoteID (or
	// its IDi/IDr); without them the peer authenticates with PSK.
	RemoteCAs []*x509.Certificate
	// IKE and ESP are the proposals in order of preference (see
	// ParseProposals).
	IKE, ESP []Proposal
	// LocalTS and RemoteTS are the Child SA's traffic selectors: our
	// side's networks and the peer's. That Child SA is the one IKE_AUTH
	// makes; ChildName, if set, names it (ChildSA.Child).
	LocalTS, RemoteTS []netip.Prefix
	ChildName         string
	// Children are the connection's further Child SAs (swanctl's
	// children beyond the first), each with its own traffic selectors
	// and proposals, made on the established IKE SA with CREATE_CHILD_SA
	// (RFC 7296 section 1.3.1): by us with Endpoint.InitiateChild, or by
	// the peer, whose request is matched against LocalTS/RemoteTS and
	// then each of these in order (the first whose selectors intersect
	// the proposed ones and whose proposals fit).
	Children []Child
	// ForceEncap makes the peer believe we are behind a NAT (a made-up
	// NAT_DETECTION_SOURCE_IP, like strongSwan's encap = yes), so that
	// ESP goes in UDP whatever the path.
	ForceEncap bool

	// ChildLifetime is the Child SAs' lifetime (swanctl's rekey_time,
	// life_time and rand_time of a child): each is rekeyed by the
	// Endpoint itself, make-before-break, and deleted if it reaches its
	// LifeTime unrekeyed. IKELifetime is the IKE SA's (rekey_time,
	// rekey_time + over_time, rand_time), rekeyed with CREATE_CHILD_SA
	// (section 2.18). The zero Lifetime never rekeys; the gateway's
	// configuration applies swanctl's defaults.
	ChildLifetime, IKELifetime Lifetime
	// DPDDelay is swanctl's dpd_delay: when nothing was heard from the
	// peer for this long, an empty INFORMATIONAL request checks it is
	// alive (section 1.4). A peer that does not answer within the
	// retransmission schedule (RetransmitTimeout, RetransmitTries) is
	// dead: its SAs are deleted (OnDelete), Config.OnPeerDead is told and
	// DPDAction says what comes next. 0 sends no liveness checks (any
	// other request that goes unanswered still finds a dead peer).
	DPDDelay time.Duration
	// DPDAction is what the Endpoint does when the peer is dead or its
	// IKE SA fails otherwise after it was established: ActionNone (the
	// default) leaves it to the caller (OnPeerDead), ActionRestart
	// initiates to the peer again (it needs a Remote address), retrying
	// with backoff until it succeeds or the Endpoint closes (swanctl's
	// dpd_action = restart, or start_action = start), then makes again
	// the additional Child SAs (Children) the dead IKE SA carried.
	DPDAction Action

	// EAP (issue 20, eap helper): sluice as the EAP server of RFC 7296
	// section 2.16. When EAP is set, an initiator whose first IKE_AUTH
	// request carries IDi without AUTH authenticates with EAP: we answer
	// with IDr, our certificate and AUTH (Signer; or PSK) and the first
	// EAP Request, rounds follow, and after EAP Success both AUTH
	// payloads are computed with the method's MSK as the shared secret
	// (SK_pi/SK_pr when a method has none). The configuration is shared
	// by the peer's sessions and not changed.
	EAP *eap.Config

	// Remote access: configuration payloads (RFC 7296 section 3.15,
	// cp.go and task_config.go), swanctl's pools and vips.
	//
	// Pools, as responder: an initiator's CFG_REQUEST gets an address of
	// each family it asks for from these pools (ippool.Acquire, in
	// order), leased to its authenticated identity while the IKE SA
	// lives (a rekey of the IKE SA keeps it), with the pools' DNS
	// servers; the Child SA's initiator selector (TSi) is narrowed to
	// the address. With every address online the answer is
	// INTERNAL_ADDRESS_FAILURE and the IKE SA stays up without a Child
	// SA (3.15.4). A peer with pools requires a virtual IP, as
	// strongSwan's connections with pools do: an initiator that asks for
	// no address (no CFG_REQUEST, or one without an address attribute)
	// gets FAILED_CP_REQUIRED (3.10.1) in place of the Child SA, and the
	// IKE SA stays up without one. Without pools nothing is required.
	// The pools may be shared by peers and Endpoints.
	Pools []*ippool.Pool
	// VIPs, as initiator: the virtual IPs to ask for with a CFG_REQUEST
	// (0.0.0.0 or :: for any address of that family, another for that
	// one). The Child SA of IKE_AUTH proposes as TSi the whole family of
	// each (or the address asked for) instead of LocalTS, which may be
	// empty, and the responder narrows it to the address it assigns
	// (ChildSA.VIPs).
	VIPs []netip.Addr

	// CRL checks (crl.go). CRLs are the certificate revocation lists
	// that the peer's certificate chain (RemoteCAs) is checked against:
	// each certificate of the chain but the trust anchor, by the valid
	// CRL of its issuer (signed by it, current). Revocation is the
	// policy for a certificate without one (swanctl's revocation):
	// RevocationRelaxed, the default, fails only a revoked certificate;
	// RevocationStrict also fails one whose status is unknown.
	CRLs       []*x509.RevocationList
	Revocation Revocation

	// MOBIKE (RFC 4555; mobike.go). NoMOBIKE keeps MOBIKE_SUPPORTED out
	// of IKE_AUTH (swanctl's mobike = no; the default announces it): the
	// peer then cannot move the IKE SA to other addresses.
	NoMOBIKE bool

	// Reauthentication (RFC 7296 section 2.8.3; reauth.go). ReauthTime
	// (swanctl's reauth_time) is when an IKE SA we can initiate (Remote
	// set) is replaced by a new one with a full IKE_SA_INIT and IKE_AUTH,
	// make-before-break, less a random part of up to a tenth of it; 0:
	// never.
	ReauthTime time.Duration
}

// Child is one Child SA of a connection beyond the one IKE_AUTH makes
// (Peer.Children).
type Child struct {
	// Name names it in InitiateChild and ChildSA.Child; it is unique
	// within the Peer.
	Name string
	// LocalTS and RemoteTS are its traffic selectors: our side's
	// networks and the peer's.
	LocalTS, RemoteTS []netip.Prefix
	// ESP are its proposals in order of preference; nil takes the
	// Peer's. A DH group in them asks for PFS when it is made and
	// rekeyed.
	ESP []Proposal
	// Lifetime is its lifetime; the zero value takes the Peer's
	// ChildLifetime.
	Lifetime Lifetime
}

// Lifetime is when an SA is rekeyed and when it expires, as swanctl
// says it: the rekey starts at RekeyTime minus a random part of RandTime
// (so that both sides do not rekey at once), and the SA is deleted at
// LifeTime if no rekey replaced it.
type Lifetime struct {
	// RekeyTime is the time from the SA's creation to its rekey; 0
	// never rekeys (and never expires).
	RekeyTime time.Duration
	// LifeTime is the hard expiry; 0 means RekeyTime plus 10%
	// (swanctl's default life_time, and rekey_time + over_time for an
	// IKE SA). It is raised to RekeyTime if it is below.
	LifeTime time.Duration
	// RandTime bounds the random time subtracted from RekeyTime; 0 means
	// LifeTime - RekeyTime (swanctl's default). It is cut to RekeyTime.
	RandTime time.Duration
}

// Action is what an Endpoint does about a peer whose IKE SA died.
type Action uint8

const (
	// ActionNone deletes the SAs and leaves the rest to the caller.
	ActionNone Action = iota
	// ActionRestart initiates to the peer again, with backoff, until
	// it succeeds or the Endpoint closes.
	ActionRestart
)

// DefaultRekeyDeleteDelay is Config.RekeyDeleteDelay's default.
const DefaultRekeyDeleteDelay = 100 * time.Millisecond

// DefaultMaxChildSAs is Config.MaxChildSAs's default: far more Child SAs
// than one connection's configuration names (a gateway's configuration
// refuses a connection with more children than its limit), so that only
// a peer that makes Child SAs without end meets it.
const DefaultMaxChildSAs = 1024

// DefaultBlockThreshold is Config.BlockThreshold's default, strongSwan's
// charon.block_threshold: half-open IKE SAs one address may hold.
const DefaultBlockThreshold = 5

// DefaultCookieThresholdIP is Config.CookieThresholdIP's default,
// strongSwan's charon.cookie_threshold_ip.
const DefaultCookieThresholdIP = 3

// DefaultCookieSecretLifetime is Config.CookieSecretLifetime's default.
const DefaultCookieSecretLifetime = 2 * time.Minute

// Config configures an Endpoint. The zero value of each optional field
// selects the default named.
type Config struct {
	// Peers are the configured peers. The responder picks the first
	// whose addresses fit for IKE_SA_INIT, and checks identities in
	// IKE_AUTH.
	Peers []*Peer
	// Port and NATTPort are the IKE ports: 500 and 4500 by default.
	// Datagrams on NATTPort carry the non-ESP marker (RFC 3948).
	Port, NATTPort uint16
	// MaxHalfOpen bounds the responder's IKE SAs that have not finished
	// IKE_AUTH (default 256); requests beyond it are dropped and
	// counted.
	MaxHalfOpen int
	// CookieThreshold is the number of half-open SAs from which the
	// responder demands a cookie (RFC 7296 section 2.6; default half of
	// MaxHalfOpen). 0 keeps the default; a negative value demands a
	// cookie always.
	CookieThreshold int
	// BlockThreshold bounds the half-open SAs of one initiator address,
	// or of one IPv6 /64 (strongSwan's charon.block_threshold, per
	// address; default
	// DefaultBlockThreshold): its further IKE_SA_INIT requests are
	// dropped (Stats.RxBlocked), cookie or not, so that a host that
	// answers cookies cannot take the places of all others (MaxHalfOpen).
	BlockThreshold int
	// CookieThresholdIP is the number of half-open SAs of one initiator
	// (as BlockThreshold counts them) from which it must return a
	// cookie whatever the others hold (strongSwan's
	// charon.cookie_threshold_ip; default DefaultCookieThresholdIP, at
	// most BlockThreshold-1). A sender that forges a peer's address
	// never sees the cookies, so it cannot take all of that address's
	// BlockThreshold places and lock the peer out.
	CookieThresholdIP int
	// HalfOpenTimeout is how long a half-open SA may live (default 30s).
	// Under pressure (CookieThreshold half-open SAs or more) a new one
	// lives a fifth of it, at least a second: a legitimate initiator
	// finishes IKE_AUTH in a few round trips.
	HalfOpenTimeout time.Duration
	// CookieSecretLifetime is how long a cookie secret serves (default
	// 2m; section 2.6): then a fresh one takes its place, and cookies
	// made with the previous one are still accepted until the next
	// change, so that an initiator that got its cookie just before a
	// change is not refused.
	CookieSecretLifetime time.Duration
	// RetransmitTimeout is the first retransmission timeout of a
	// request (default 1s); it doubles with each retransmission
	// (section 2.1).
	RetransmitTimeout time.Duration
	// RetransmitTries is how many times a request is retransmitted
	// before the SA is given up (default 5).
	RetransmitTries int
	// MaxSAs bounds the IKE SAs of the endpoint (default 4096).
	MaxSAs int
	// QueueLen bounds the datagrams Deliver holds for the endpoint's
	// goroutine (default 256); beyond it Deliver drops and counts.
	QueueLen int
	// OnChildSA, if set, is called (without locks held, from the
	// goroutine that delivered the completing message, or from the one
	// that computed its signature or Diffie-Hellman off the lock) for
	// each Child SA established, as initiator or responder. As
	// responder, the answer that makes the Child SA leaves only once it
	// returned; as rekey requester, the Delete of the old Child SA
	// likewise (see ChildSA.HoldOutbound): it must install the SAs
	// before it returns, and not take long.
	OnChildSA func(*ChildSA)
	// OnDelete, if set, is called when an established Child SA goes
	// (deleted by either side, or its IKE SA failed).
	OnDelete func(*ChildSA)
	// OnPeerDead, if set, is called (without locks held) when an
	// established IKE SA failed: its peer (by Peer.Name) did not answer
	// a request within the retransmission schedule (a liveness check,
	// see Peer.DPDDelay, or any other). OnDelete has been called for its
	// Child SAs before. err says what failed.
	OnPeerDead func(peer string, err error)
	// OnSnapshot, if set, is told the replicated state of each
	// established IKE SA (snapshot.go), for a hot standby that continues
	// it with Adopt: s.Data after every change of its state (message IDs,
	// the last response, the outstanding request, keys after a rekey,
	// Child SAs, timers), with gone false, and once it is deleted,
	// replaced by a rekey or failed, with gone true and no Data. A
	// change is reported before any datagram of the Endpoint leaves and
	// before the Endpoint's lock is released, so whatever the peer has
	// seen of an IKE SA is in its last snapshot. It is called with the
	// Endpoint's lock held, in order: it must not block or call into the
	// Endpoint (copy or enqueue s and return); s.Data is its to keep,
	// and holds keys (keep it in memory only). Close does not report the
	// IKE SAs gone: the peer still holds them.
	OnSnapshot func(s Snapshot, gone bool)
	// Log receives events; nil discards.
	Log *slog.Logger
	// FragmentSize is the largest IKE message sent in one datagram (the
	// UDP payload, the non-ESP marker included) once both sides announced
	// IKE fragmentation (RFC 7383); longer encrypted messages go in
	// fragments of at most this size. The default, 1232, is IPv6's
	// minimum MTU (1280) less the IPv6 and UDP headers. A negative value
	// turns fragmentation off: it is not announced, and fragments are
	// dropped.
	FragmentSize int
	// MaxChildSAs bounds the Child SAs of one IKE SA (default
	// DefaultMaxChildSAs), not counting those a rekey is replacing: a
	// CREATE_CHILD_SA for one more is refused with NO_ADDITIONAL_SAS
	// (Stats.ChildSALimit) and InitiateChild fails. strongSwan has no
	// such limit; this one only bounds what a peer can make us hold.
	MaxChildSAs int
	// MaxCryptoJobs bounds the signatures and Diffie-Hellman computations
	// running outside the Endpoint's lock at once (default 64); a message
	// that would start one more is dropped and counted
	// (Stats.CryptoBusy), and the peer's retransmission tries again.
	MaxCryptoJobs int
	// RekeyDeleteDelay is how long, after a Child SA rekey of ours
	// completes (or one that collided with the peer's, section 2.8.1),
	// the Delete of the Child SA it made redundant waits before it goes
	// (default 100ms; negative: at once). The data plane switches its
	// outbound traffic to the new SA when OnChildSA reports it, but ESP
	// sealed under the old one just before may still be in a queue or
	// on the wire, and a peer such as strongSwan removes its inbound SA
	// as soon as it reads our Delete: the hold lets those packets reach
	// the peer first. (strongSwan's own delete_rekeyed_delay serves the
	// same purpose on its side.) Other requests, liveness checks
	// among them, go out meanwhile; the old Child SA is reported through
	// OnDelete, and Rekey returns, once the Delete exchange is done.
	RekeyDeleteDelay time.Duration
	// KeepAlive is how long a NAT's UDP mappings are assumed to live
	// (default DefaultKeepAlive, strongSwan's keep_alive; negative: no
	// keepalives): an IKE SA whose own address NAT detection found
	// translated (we are behind a NAT) sends a NAT-keepalive to the
	// peer when it sent nothing else for KeepAlive less a tenth (RFC
	// 3948 section 2.3), so that the NAT keeps the mapping through which
	// the peer reaches us; after a silence longer than KeepAlive (a late
	// timer) it also sends a liveness check, so that the peer learns a
	// new mapping (RFC 7296 section 2.23). See keepalive.go.
	KeepAlive time.Duration
	// ESPSent, if set, tells the keepalives whether ESP went out on a
	// Child SA: it returns a count that grows with each packet sent on
	// it (an outbound sequence number). It is called without locks held,
	// every KeepAlive/10 for each IKE SA behind a NAT, and must not call
	// into the Endpoint. Without it a keepalive goes every KeepAlive
	// less a tenth whatever the traffic.
	ESPSent func(*ChildSA) uint64
	// OnChildAddress, if set, is called (without locks held) for each
	// Child SA that MOBIKE (RFC 4555) moved to new outer addresses,
	// once the peer proved it receives there (the return routability
	// check, section 3.5), or that followed the NAT mapping of a peer
	// behind a NAT (RFC 7296 section 2.23): c is the Child SA as
	// OnChildSA reported it (its fields keep the addresses it was made
	// with: the caller may hold it), local and remote its new outer
	// addresses and ports. From then on the data plane sends c's ESP
	// from local to remote; what arrives with c's inbound SPI is c's
	// wherever it comes from. Each move is compared with where c is
	// (Endpoint.ChildAddrs), so a move back to where c was made is
	// reported too; Child SAs made later on the IKE SA (rekeys) carry
	// the new addresses themselves.
	OnChildAddress func(c *ChildSA, local, remote netip.AddrPort)

	// clock is the time source; nil is the real one (tests set a fake).
	clock clock
	// newDH, if set, replaces NewDH for IKE_SA_INIT (tests: a slow DH).
	newDH func(group uint16) (DH, error)
}

func (c *Config) defaults() error {
	if c.Port == 0 {
		c.Port = 500
	}
	if c.NATTPort == 0 {
		c.NATTPort = 4500
	}
	if c.Port == c.NATTPort {
		return errors.New("ike: Port and NATTPort must differ")
	}
	if c.MaxHalfOpen <= 0 {
		c.MaxHalfOpen = 256
	}
	if c.CookieThreshold == 0 {
		c.CookieThreshold = c.MaxHalfOpen / 2
	}
	if c.HalfOpenTimeout <= 0 {
		c.HalfOpenTimeout = 30 * time.Second
	}
	if c.BlockThreshold <= 0 {
		c.BlockThreshold = DefaultBlockThreshold
	}
	if c.CookieThresholdIP <= 0 {
		c.CookieThresholdIP = DefaultCookieThresholdIP
	}
	c.CookieThresholdIP = min(c.CookieThresholdIP, c.BlockThreshold-1)
	if c.CookieSecretLifetime <= 0 {
		c.CookieSecretLifetime = DefaultCookieSecretLifetime
	}
	if c.RetransmitTimeout <= 0 {
		c.RetransmitTimeout = time.Second
	}
	if c.RetransmitTries <= 0 {
		c.RetransmitTries = 5
	}
	if c.MaxSAs <= 0 {
		c.MaxSAs = 4096
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 256
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.FragmentSize == 0 {
		c.FragmentSize = 1232
	}
	if c.FragmentSize > 0 && c.FragmentSize < 256 {
		return fmt.Errorf("ike: FragmentSize %d is below 256", c.FragmentSize)
	}
	if c.MaxChildSAs <= 0 {
		c.MaxChildSAs = DefaultMaxChildSAs
	}
	if c.MaxCryptoJobs <= 0 {
		c.MaxCryptoJobs = 64
	}
	if c.RekeyDeleteDelay == 0 {
		c.RekeyDeleteDelay = DefaultRekeyDeleteDelay
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	for _, p := range c.Peers {
		if p == nil || len(p.IKE) == 0 || len(p.ESP) == 0 || !p.Local.IsValid() {
			return fmt.Errorf("ike: peer %q needs Local, IKE and ESP proposals", peerName(p))
		}
		// Each direction needs a credential: ours a Signer or the PSK,
		// the peer's RemoteCAs, the PSK or EAP.
		ours, theirs := p.Signer != nil || len(p.PSK) > 0, len(p.RemoteCAs) > 0 || len(p.PSK) > 0 || p.EAP != nil
		if !ours || !theirs {
			return fmt.Errorf("ike: peer %q needs a PSK for the direction without certificates", p.Name)
		}
		if p.EAP != nil {
			if err := p.EAP.Check(); err != nil {
				return fmt.Errorf("ike: peer %q: %w", p.Name, err)
			}
		}
		if p.Signer != nil {
			if len(p.Certificates) == 0 {
				return fmt.Errorf("ike: peer %q has a Signer but no certificate", p.Name)
			}
			if k, ok := p.Certificates[0].PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(p.Signer.Public()) {
				return fmt.Errorf("ike: peer %q: the Signer's key is not the certificate's", p.Name)
			}
		}
		if (len(p.LocalTS) == 0 && len(p.VIPs) == 0) || len(p.RemoteTS) == 0 {
			return fmt.Errorf("ike: peer %q needs traffic selectors", p.Name)
		}
		if err := p.checkRemoteAccess(); err != nil {
			return err
		}
		if err := p.checkCRLs(); err != nil {
			return err
		}
		names := map[string]bool{p.ChildName: true}
		for _, c := range p.Children {
			if c.Name == "" || names[c.Name] {
				return fmt.Errorf("ike: peer %q: child %q: each child needs a name of its own", p.Name, c.Name)
			}
			names[c.Name] = true
			if len(c.LocalTS) == 0 || len(c.RemoteTS) == 0 {
				return fmt.Errorf("ike: peer %q: child %q needs traffic selectors", p.Name, c.Name)
			}
			if c.Lifetime.RekeyTime < 0 {
				return fmt.Errorf("ike: peer %q: child %q: negative lifetime", p.Name, c.Name)
			}
		}
		if p.LocalID.IsZero() {
			return fmt.Errorf("ike: peer %q needs LocalID", p.Name)
		}
		if p.ChildLifetime.RekeyTime < 0 || p.IKELifetime.RekeyTime < 0 || p.DPDDelay < 0 || p.ReauthTime < 0 {
			return fmt.Errorf("ike: peer %q: negative lifetime or DPD delay", p.Name)
		}
		if p.DPDAction == ActionRestart && !p.Remote.IsValid() {
			return fmt.Errorf("ike: peer %q: DPDAction restart needs a Remote address", p.Name)
		}
		if p.Revocation > RevocationStrict {
			return fmt.Errorf("ike: peer %q: unknown %v", p.Name, p.Revocation)
		}
	}
	return nil
}

func peerName(p *Peer) string {
	if p == nil {
		return "<nil>"
	}
	return p.Name
}

// ChildSA is the result of a successful negotiation: one ESP SA pair, as
// the data plane needs it. Keys are as sluice's configuration takes them:
// for an AEAD the encryption key is followed by its 4-byte salt.
type ChildSA struct {
	// Name is the peer's configured name.
	Name string
	// Initiator is true when we initiated the IKE SA.
	Initiator bool
	// Local and Remote are the outer addresses and ports it was made
	// with; with Encap, the ports are those of ESP in UDP (normally 4500
	// both). They stay when the IKE SA moves (Config.OnChildAddress
	// reports the move, Endpoint.ChildAddrs where its ESP goes now); a
	// Child SA adopted from a snapshot (Endpoint.Adopt) has those it had
	// when the snapshot was taken.
	Local, Remote netip.AddrPort
	// InSPI is the SPI of our inbound SA (chosen by us); OutSPI the
	// peer's, for what we send.
	InSPI, OutSPI uint32
	// Suite is the ESP suite in sluice's keywords ("aes128gcm16",
	// "aes256-sha256", "chacha20poly1305").
	Suite string
	// ESN is true when extended sequence numbers were agreed.
	ESN bool
	// InKey and OutKey are the encryption keys (salt included) of the
	// inbound and outbound SA; InAuthKey and OutAuthKey the integrity
	// keys (empty for an AEAD).
	InKey, OutKey, InAuthKey, OutAuthKey []byte
	// LocalTS and RemoteTS are the negotiated traffic selectors (ours,
	// the peer's), narrowed as both sides agreed.
	LocalTS, RemoteTS []Selector
	// Encap is true when ESP must travel in UDP (RFC 3948): a NAT was
	// detected on the path or either side forced it.
	Encap bool
	// Child is the name of the connection's child it was negotiated
	// for: Peer.ChildName for the one of IKE_AUTH, or one of
	// Peer.Children. A rekey keeps it.
	Child string
	// IKESPIi and IKESPIr name the IKE SA that made the Child SA. An IKE
	// SA rekey moves the Child SA to the new IKE SA without changing
	// them: the Endpoint finds a Child SA by InSPI (IKESAs lists where
	// each is now).
	IKESPIi, IKESPIr uint64
	// VIPs are the IKE SA's virtual IPs (RFC 7296 section 3.15):
	// initiator, those the responder assigned us (Peer.VIPs); responder,
	// those we assigned the peer from Peer.Pools. A rekey keeps them.
	VIPs []netip.Addr
	// HoldOutbound is set on a Child SA that the peer made by rekeying
	// one (we answered its CREATE_CHILD_SA, RFC 7296 section 2.8): the
	// peer can open ESP on it only once it has read our answer, which
	// leaves after OnChildSA returned. The data plane installs its
	// inbound SA at once, but keeps sending on the Child SA it replaces
	// until OnDelete reports that one (the peer's Delete, or its
	// expiry), as strongSwan does.
	HoldOutbound bool
}

// Stats are the endpoint's counters. Each dropped message is counted under
// exactly one reason.
type Stats struct {
	RxPackets uint64 // datagrams handed to Receive (directly or through Deliver)
	TxPackets uint64 // datagrams sent (retransmissions included)

	// Drops, by reason.
	RxQueueFull        uint64 // Deliver found its queue full
	RxMalformed        uint64 // not a decodable IKEv2 message
	RxNoMarker         uint64 // on the NAT-T port without the non-ESP marker
	RxUnknownSPI       uint64 // no IKE SA with that SPI
	RxOutOfWindow      uint64 // request with a message ID outside the window
	RxUnexpected       uint64 // response to no outstanding request, or out of place
	RxIntegrityFailed  uint64 // SK payload failed its ICV or did not decrypt
	RxHalfOpenLimit    uint64 // IKE_SA_INIT dropped: half-open or SA limit
	RxBlocked          uint64 // IKE_SA_INIT dropped: its address holds BlockThreshold half-open SAs
	RxBadCookie        uint64 // IKE_SA_INIT with a wrong cookie when one was due
	RxUnsupportedCrit  uint64 // unknown critical payload
	RxRetransmits      uint64 // retransmitted requests, answered from the cache
	TxRetransmits      uint64 // our requests retransmitted
	CookiesSent        uint64 // cookie challenges (section 2.6)
	Timeouts           uint64 // SAs given up after the last retransmission
	AuthFailed         uint64 // AUTH did not verify (either side)
	NoProposalChosen   uint64 // no acceptable proposal (either side)
	TSUnacceptable     uint64 // no traffic selector intersection
	InvalidKE          uint64 // INVALID_KE_PAYLOAD sent or received
	IKESAEstablished   uint64
	ChildSAEstablished uint64 // IKE_AUTH, rekeys and additional Child SAs
	ChildSARekeyed     uint64 // Child SAs made by CREATE_CHILD_SA (either side)
	Deleted            uint64 // IKE SAs deleted (either side)

	IKESARekeyed       uint64 // IKE SAs replaced by CREATE_CHILD_SA (section 2.18, either side)
	RekeyCollisions    uint64 // simultaneous rekeys resolved (section 2.8.1): the one with the lowest nonce lost
	TempFailures       uint64 // TEMPORARY_FAILURE sent or received (section 2.25)
	ChildSAExpired     uint64 // Child SAs deleted at their LifeTime, unrekeyed
	IKESAExpired       uint64 // IKE SAs deleted at their LifeTime, unrekeyed
	LivenessChecks     uint64 // empty INFORMATIONAL requests sent (DPD)
	PeersDead          uint64 // established IKE SAs whose peer stopped answering
	Restarts           uint64 // initiations started by DPDAction restart
	RestartChildFailed uint64 // additional Child SAs a restart could not make again
	InitialContacts    uint64 // IKE SAs dropped because their peer sent INITIAL_CONTACT on a new one
	RequestQueueFull   uint64 // a request (rekey, check, delete) not queued: too many waiting on one IKE SA
	KeepAlives         uint64 // NAT-keepalives sent (we are behind a NAT; keepalive.go)
	NATMappingChecks   uint64 // liveness checks sent behind a NAT that may have forgotten our mapping (keepalive.go)
	NATPeerMoved       uint64 // IKE SAs moved to the address and port a peer behind a NAT now sends from (natupdate.go)
	Adopted            uint64 // IKE SAs continued from another Endpoint's snapshot (Adopt)

	ChildSALimit uint64 // a new Child SA refused: Config.MaxChildSAs on its IKE SA (NO_ADDITIONAL_SAS)

	// MOBIKE (RFC 4555, mobike.go).
	MOBIKEUpdates      uint64 // UPDATE_SA_ADDRESSES accepted: the IKE SA moved
	MOBIKERefused      uint64 // UPDATE_SA_ADDRESSES refused (MOBIKE not agreed, a NAT under NO_NATS_ALLOWED)
	RoutabilityChecked uint64 // return routability checks passed: the Child SAs moved
	RoutabilityFailed  uint64 // return routability checks answered without our COOKIE2
	ChildSAAdded       uint64 // additional Child SAs made by CREATE_CHILD_SA (section 1.3.1, either side)

	TxFragments     uint64 // SKF fragments sent (RFC 7383), retransmissions aside
	RxFragments     uint64 // SKF fragments received, checked and kept
	RxReassembled   uint64 // messages reassembled from fragments
	RxFragInvalid   uint64 // fragment dropped: fragmentation not negotiated, too many, or fewer than before
	RxFragDuplicate uint64 // fragment dropped: already held
	RxFragTooLarge  uint64 // message dropped: its fragments exceed MaxMessageLen
	RxFragTimeout   uint64 // incomplete message dropped after HalfOpenTimeout

	RxBusy      uint64 // message for an IKE SA whose signature or DH is being computed (the peer retransmits)
	CryptoBusy  uint64 // message dropped: Config.MaxCryptoJobs computations already in flight
	CryptoStale uint64 // a computation's result dropped: its IKE SA moved on (deleted, timed out) meanwhile

	// Exchanges (section 1) by type: those we initiated whose response
	// arrived, and the requests we answered, each once however often it
	// was retransmitted. An IKE_SA_INIT counts only when it goes on to
	// make keys: a cookie challenge (CookiesSent), INVALID_KE_PAYLOAD
	// (InvalidKE) or another error in its place does not count.
	IKESAInitInitiated     uint64
	IKESAInitAnswered      uint64
	IKEAuthInitiated       uint64
	IKEAuthAnswered        uint64
	CreateChildSAInitiated uint64
	CreateChildSAAnswered  uint64
	InformationalInitiated uint64
	InformationalAnswered  uint64
	// IKE_INTERMEDIATE exchanges (RFC 9242), one per additional key
	// exchange (RFC 9370).
	IKEIntermediateInitiated uint64
	IKEIntermediateAnswered  uint64
	// AddKEFailed counts additional key exchanges that failed (either
	// side): a KE payload missing, of the wrong method or with malformed
	// data, an error in its place, or IKE_AUTH before them.
	AddKEFailed uint64

	// VIPRefused counts, as initiator, the addresses a CFG_REPLY
	// assigned that we did not take (task_config.go, acceptVIPs).
	VIPRefused uint64

	// Remote access (task_config.go): virtual IPs we assigned from
	// Peer.Pools, and addresses asked for that no pool had left
	// (INTERNAL_ADDRESS_FAILURE when none was assigned).
	VIPAssigned  uint64
	VIPExhausted uint64
}

// countExchange counts a completed exchange of type exch, initiated by us
// or answered. Unknown types are not counted.
func (s *Stats) countExchange(exch ExchangeType, initiated bool) {
	var c [2]*uint64
	switch exch {
	case IKE_SA_INIT:
		c = [2]*uint64{&s.IKESAInitAnswered, &s.IKESAInitInitiated}
	case IKE_AUTH:
		c = [2]*uint64{&s.IKEAuthAnswered, &s.IKEAuthInitiated}
	case CREATE_CHILD_SA:
		c = [2]*uint64{&s.CreateChildSAAnswered, &s.CreateChildSAInitiated}
	case INFORMATIONAL:
		c = [2]*uint64{&s.InformationalAnswered, &s.InformationalInitiated}
	case IKE_INTERMEDIATE:
		c = [2]*uint64{&s.IKEIntermediateAnswered, &s.IKEIntermediateInitiated}
	default:
		return
	}
	if initiated {
		*c[1]++
	} else {
		*c[0]++
	}
}

// Selector helpers -------------------------------------------------------

// SelectorFromPrefix is the selector of a whole prefix, any protocol and
// port.
func SelectorFromPrefix(p netip.Prefix) Selector {
	p = p.Masked()
	start := p.Addr()
	end := lastAddr(p)
	return Selector{StartPort: 0, EndPort: 65535, Start: start, End: end}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Prefix returns the selector's address range as a prefix when it is one
// (any protocol and port aside).
func (s Selector) Prefix() (netip.Prefix, bool) {
	for bits := 0; bits <= s.Start.BitLen(); bits++ {
		p := netip.PrefixFrom(s.Start, bits)
		if p.Masked().Addr() == s.Start && lastAddr(p) == s.End {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

func (s Selector) String() string {
	r := s.Start.String() + "-" + s.End.String()
	if p, ok := s.Prefix(); ok {
		r = p.String()
	}
	if s.IPProto != 0 || s.StartPort != 0 || s.EndPort != 65535 {
		r += fmt.Sprintf("[%d/%d-%d]", s.IPProto, s.StartPort, s.EndPort)
	}
	return r
}

func maxAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) > 0 {
		return a
	}
	return b
}

func minAddr(a, b netip.Addr) netip.Addr {
	if a.Compare(b) < 0 {
		return a
	}
	return b
}

// intersect returns the intersection of two selectors (section 2.9).
func intersect(a, b Selector) (Selector, bool) {
	if a.Start.Is4() != b.Start.Is4() {
		return Selector{}, false
	}
	var r Selector
	switch {
	case a.IPProto == b.IPProto || b.IPProto == 0:
		r.IPProto = a.IPProto
	case a.IPProto == 0:
		r.IPProto = b.IPProto
	default:
		return r, false
	}
	r.StartPort, r.EndPort = max(a.StartPort, b.StartPort), min(a.EndPort, b.EndPort)
	r.Start, r.End = maxAddr(a.Start, b.Start), minAddr(a.End, b.End)
	if r.StartPort > r.EndPort || r.Start.Compare(r.End) > 0 {
		return r, false
	}
	return r, true
}

// narrow returns the intersections of what the peer proposed with what we
// allow (section 2.9), empty when there are none.
func narrow(proposed, allowed []Selector) []Selector {
	var out []Selector
	for _, p := range proposed {
		for _, a := range allowed {
			if r, ok := intersect(p, a); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// within reports whether every selector of got lies inside one of
// proposed (an initiator's check of the responder's narrowing).
func within(got, proposed []Selector) bool {
	if len(got) == 0 {
		return false
	}
	for _, g := range got {
		ok := false
		for _, p := range proposed {
			if r, in := intersect(g, p); in && r == g {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func selectors(ps []netip.Prefix) []Selector {
	out := make([]Selector, len(ps))
	for i, p := range ps {
		out[i] = SelectorFromPrefix(p)
	}
	return out
}

// childConf is what one child of a connection negotiates: the Peer's own
// (IKE_AUTH's) or one of its Children.
type childConf struct {
	name              string
	esp               []Proposal
	localTS, remoteTS []netip.Prefix
	life              Lifetime
}

// childConfs returns the peer's children, IKE_AUTH's first.
func (p *Peer) childConfs() []childConf {
	out := []childConf{{p.ChildName, p.ESP, p.LocalTS, p.RemoteTS, p.ChildLifetime}}
	for _, c := range p.Children {
		cc := childConf{c.Name, c.ESP, c.LocalTS, c.RemoteTS, c.Lifetime}
		if cc.esp == nil {
			cc.esp = p.ESP
		}
		if cc.life == (Lifetime{}) {
			cc.life = p.ChildLifetime
		}
		out = append(out, cc)
	}
	return out
}

// childConf returns the child named name (the Peer's own for its
// ChildName); ok is false when there is none.
func (p *Peer) childConf(name string) (childConf, bool) {
	for _, c := range p.childConfs() {
		if c.name == name {
			return c, true
		}
	}
	return childConf{}, false
}
