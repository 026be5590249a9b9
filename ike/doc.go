// Package ike implements IKEv2 (RFC 7296) for sluice: it negotiates the
// ESP Child SAs that the data plane (esp, sad) runs, authenticated with a
// pre-shared key, certificates (checked against CRLs) or, as the server,
// EAP, and rekeys them, against peers such as strongSwan; it hands road
// warriors virtual IPs from pools, follows a peer that moves (MOBIKE), and
// adds post-quantum key exchanges (ML-KEM) over IKE_INTERMEDIATE.
//
// # Exchanges
//
// An IKE SA starts with two exchanges of one request and one response
// each (section 1.2), with IKE_INTERMEDIATE exchanges between them for
// additional key exchanges and more IKE_AUTH rounds for EAP. HDR is the IKE header, SK{...} the Encrypted payload,
// N(...) a Notify:
//
//	Initiator                               Responder
//	---------                               ---------
//	IKE_SA_INIT (message ID 0, port 500)
//	HDR, SAi1, KEi, Ni,
//	  N(NAT_DETECTION_SOURCE_IP),
//	  N(NAT_DETECTION_DESTINATION_IP)  -->
//	                                   <--  HDR, N(COOKIE)          (2.6: too many half-open SAs)
//	HDR, N(COOKIE), SAi1, KEi, Ni, ... -->
//	                                   <--  HDR, N(INVALID_KE_PAYLOAD)  (1.2: the group it wants)
//	                                   <--  HDR, SAr1, KEr, Nr, N(NAT_DETECTION_*)
//	  both may add N(INTERMEDIATE_EXCHANGE_SUPPORTED) (RFC 9242)
//
//	  both: SKEYSEED = prf(Ni | Nr, g^ir),
//	        SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr =
//	          prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)           (2.14)
//	  a NAT on the path (or a forced encapsulation) moves both to
//	  port 4500 with the non-ESP marker                      (2.23)
//
//	IKE_INTERMEDIATE (RFC 9242, one per additional key exchange of the
//	proposal chosen, e.g. x25519-ke1_mlkem768; RFC 9370; intermediate.go,
//	kem.go, task_intermediate.go)
//	HDR, SK{KEi(ML-KEM encapsulation key)} -->
//	                                   <--  HDR, SK{KEr(ciphertext)}
//	  each round's shared secret makes new SK_* (RFC 9370 section 2.2.2),
//	  and both messages enter the AUTH octets (IntAuth, RFC 9242 3.3)
//
//	IKE_AUTH (message ID 1, or the next after IKE_INTERMEDIATE)
//	HDR, SK{IDi, [IDr,] AUTH,
//	  N(INITIAL_CONTACT), [CP(CFG_REQUEST),]
//	  [N(MOBIKE_SUPPORTED),] SAi2, TSi, TSr} -->
//	                                   <--  HDR, SK{IDr, AUTH, [CP(CFG_REPLY),]
//	                                             [N(MOBIKE_SUPPORTED),] SAr2, TSi, TSr}
//	  CP: virtual IPs (3.15; cp.go, task_config.go, package ippool): the
//	  initiator asks (Peer.VIPs), the responder leases an address per
//	  family from Peer.Pools and narrows TSi to it, or answers
//	  INTERNAL_ADDRESS_FAILURE without a Child SA (FAILED_CP_REQUIRED
//	  when the peer has pools and the initiator asked for no address)
//
//	IKE_AUTH with EAP (2.16; sluice as the server: task_eap.go, package eap)
//	HDR, SK{IDi, [IDr,] SAi2, TSi, TSr} -->   (no AUTH: EAP wanted)
//	                                   <--  HDR, SK{IDr, [CERT,] AUTH, EAP(Request)}
//	HDR, SK{EAP(Response)}             -->   ... a round per method step
//	                                   <--  HDR, SK{EAP(Success)}
//	HDR, SK{AUTH(MSK)}                 -->
//	                                   <--  HDR, SK{AUTH(MSK), [CP,] SAr2, TSi, TSr}
//
//	  AUTH = prf(prf(PSK, "Key Pad for IKEv2"),
//	             <first message> | <peer's nonce> | prf(SK_px, ID body))  (2.15)
//	  Child SA KEYMAT = prf+(SK_d, Ni | Nr): initiator-to-responder
//	  encryption and integrity keys, then the other direction     (2.17)
//
//	  with certificates: CERTREQ in IKE_SA_INIT's response and IKE_AUTH's
//	  request, CERT after IDi/IDr, AUTH a signature over the same octets
//	  (methods 1, 9-11, and 14 of RFC 7427; see auth.go)
//
//	CREATE_CHILD_SA (either side; rekeying a Child SA, see rekey.go)
//	HDR, SK{N(REKEY_SA), SA, Ni, [KEi,] TSi, TSr} -->
//	                                   <--  HDR, SK{SA, Nr, [KEr,] TSi, TSr}
//
//	CREATE_CHILD_SA (either side; an additional Child SA, section 1.3.1:
//	another child of the connection, Peer.Children, InitiateChild)
//	HDR, SK{SA, Ni, [KEi,] TSi, TSr}   -->
//	                                   <--  HDR, SK{SA, Nr, [KEr,] TSi, TSr}
//	  the responder takes the first child whose proposals fit and whose
//	  selectors intersect; NO_ADDITIONAL_SAS beyond Config.MaxChildSAs
//
//	CREATE_CHILD_SA (either side; rekeying the IKE SA, see ikerekey.go)
//	HDR, SK{SA(IKE, new SPIi), Ni, KEi} -->
//	                                   <--  HDR, SK{SA(IKE, new SPIr), Nr, KEr}
//	  the Child SAs move to the new IKE SA; the old one is deleted
//
//	  both sides rekeying one SA at once (2.8.1): both exchanges
//	  complete, the one with the lowest of the four nonces made the
//	  redundant SA; TEMPORARY_FAILURE while the SA is going (2.25)
//
//	IKE fragmentation (RFC 7383; see frag.go): both announce
//	N(IKEV2_FRAGMENTATION_SUPPORTED) in IKE_SA_INIT; an encrypted
//	message longer than Config.FragmentSize then goes as
//	HDR, SKF{1/n} ... HDR, SKF{n/n}, each fragment protected on its own
//
//	INFORMATIONAL (either side, next message ID)
//	HDR, SK{D(IKE) | D(ESP, SPIs) | }  -->   (empty: a liveness check)
//	                                   <--  HDR, SK{[D(ESP, SPIs)]}
//
//	INFORMATIONAL (MOBIKE, RFC 4555; mobike.go, task_mobike.go: the
//	initiator moved to new addresses, both announced MOBIKE_SUPPORTED)
//	HDR, SK{N(UPDATE_SA_ADDRESSES),
//	  N(NAT_DETECTION_*), [N(COOKIE2)]} -->   the IKE SA takes the
//	                                         request's addresses
//	                                   <--  HDR, SK{N(NAT_DETECTION_*), [N(COOKIE2)]}
//	                                   <--  HDR, SK{N(COOKIE2)}  (return routability:
//	HDR, SK{N(COOKIE2)}                -->   then the Child SAs move)
//
// # Shape
//
// wire.go and payload.go are the wire format: ParseMessage and
// Message.Encode with one struct per payload, every length checked
// (FuzzParseMessage). transform.go parses strongSwan's proposal keywords
// and selects proposals, from transform_table.go's one table of the
// algorithms implemented (with the IANA names the logs give the others);
// keys.go, dh.go and sk.go are the keying, the Diffie-Hellman groups (14,
// 19, 20, 31; 2 and 5 when a configuration names them) and the SK
// payload's protection (AES-GCM-16, ChaCha20-Poly1305, AES-CBC with
// HMAC-SHA-2, or HMAC-SHA-1 when named); auth.go the
// signatures and certificates; crl.go the revocation checks of a peer's
// certificate chain (Peer.CRLs, Peer.Revocation); frag.go IKE
// fragmentation (RFC 7383); kem.go ML-KEM-768 and -1024 (crypto/mlkem)
// as key exchange methods and intermediate.go the RFC 9370 key schedule
// and the IntAuth octets; cp.go the Configuration payload; mobike.go
// MOBIKE's notifies and its return routability check. Package ippool
// holds the virtual IP pools, package eap the EAP server (EAP-MSCHAPv2,
// EAP-TLS).
//
// An IKE SA is set up by exchanges made of tasks, one file per concern
// (task.go): each task has a build and a process step per role and
// answers done, more (another round of the exchange, as EAP needs),
// failed (with the Notify error the responder answers) or async (its
// work runs off the lock). IKE_SA_INIT is task_ikeinit.go (SA, KE,
// Nonce, COOKIE and INVALID_KE_PAYLOAD), task_natd.go (NAT detection),
// task_certpre.go (signature hash algorithms, CERTREQ) and task_frag.go
// (fragmentation's announcement); IKE_INTERMEDIATE is
// task_intermediate.go (a round per additional key exchange); IKE_AUTH
// is task_auth.go (ID, CERT, AUTH, INITIAL_CONTACT, the responder's
// choice of peer), task_eap.go (EAP rounds, responder), task_config.go
// (CFG_REQUEST/CFG_REPLY and the pool leases), task_mobike.go
// (MOBIKE_SUPPORTED) and task_child.go (its Child SA). An exchange type
// registered besides these runs between IKE_SA_INIT and IKE_AUTH
// (IKE_INTERMEDIATE). The
// peer's requests on an established IKE SA are answered by the tasks
// registered for their type: CREATE_CHILD_SA by rekey.go's (a new Child
// SA or a Child SA's rekey) and ikerekey.go's (the IKE SA's rekey),
// INFORMATIONAL by task_delete.go's (Deletes) and task_mobike.go's
// (UPDATE_SA_ADDRESSES, COOKIE2; nothing else is a liveness check); our
// own requests are tasks as well, sent with
// ikeSA.startLocked (childSAOurs, ikeRekeyOurs, deleteIKEOurs,
// deleteChildOurs). endpoint.go receives and sends, and Endpoint.call is
// the one shape of the methods that wait for an exchange (Initiate,
// Delete, Rekey, RekeyIKE, InitiateChild); exchange.go holds the IKE SA,
// its state predicates (up, settingUp, windowFree), the request and
// response windows and the responder's defences before an IKE SA exists
// (cookies, half-open limits); job.go the computations that run off the
// lock; life.go
// what an IKE SA does on its own (lifetimes, liveness checks, dead peers,
// the request queue) on clock.go's time: an Endpoint owns every IKE SA of
// a set of peers, behind one mutex; it learns datagrams through Receive
// and sends through a Transport, so it runs over plain UDP sockets
// (UDPTransport) or behind the gateway's ESP-in-UDP link. controller.go's
// Controller keeps an Endpoint's configured children up for the gateway:
// start and trap actions (initiating a trap child on its first packet),
// restarts after DPD, rekeys at the sequence-number limit and at
// rekey_bytes/rekey_packets, deletes at life_bytes/life_packets, the data
// plane's install and removal of pairs, and reloads.
//
// Signing and verifying AUTH (a crypto.Signer may be an engine's queue)
// and the Diffie-Hellman of IKE_SA_INIT, of a Child SA's
// CREATE_CHILD_SA and of our own IKE SA rekey run off that mutex (job.go), and Transport.Send is
// called without it (unlock sends what sendLocked queued): the exchange
// snapshots what the work needs, the work runs on its own goroutine, and
// the result is used only if the IKE SA is still where it was left
// (Stats.CryptoStale otherwise), so one slow key does not stall the other
// IKE SAs. Such computations are bounded (Config.MaxCryptoJobs).
//
// Each side has at most one request outstanding (window size 1, section
// 2.3); further requests of ours (rekeys, deletes, checks) wait in a short
// queue per IKE SA. A request is retransmitted with doubling timeouts and
// the SA is given up after Config.RetransmitTries: an established one's
// peer is then dead (Config.OnPeerDead, Peer.DPDAction). A retransmitted
// request from the peer is answered from a cache of the last response.
// Whatever cannot be processed (malformed, unknown SPI, outside the
// message ID window, failing its integrity check) is dropped and counted
// in Stats, never answered with state changes. Half-open SAs are bounded
// (Config.MaxHalfOpen) and, per initiator address, by
// Config.BlockThreshold; cookies are demanded beyond
// Config.CookieThreshold (or Config.CookieThresholdIP from one address),
// made with a secret that changes every
// Config.CookieSecretLifetime.
//
// Child SAs and the IKE SA are rekeyed by the Endpoint at their
// Lifetime's rekey time less a random jitter (Peer.ChildLifetime,
// Peer.IKELifetime, swanctl's semantics), make-before-break: OnChildSA
// reports the new Child SA before OnDelete the old, and before the peer
// can use it (a response leaves once its OnChildSA returned; the Delete
// of the old one too; a new Child SA of the peer's rekey says
// HoldOutbound). The data plane asks
// for an early rekey with RequestRekey. The Delete of the Child SA a
// rekey replaced waits Config.RekeyDeleteDelay, so that ESP sealed under
// it before the data plane's switch reaches the peer before the peer
// drops it. A peer not heard from for Peer.DPDDelay gets an empty
// INFORMATIONAL; a dead one's restart (Peer.DPDAction) makes its IKE SA
// and the additional Child SAs the dead one carried. SetPeers changes the
// configured peers in place: a reload touches only the peers it changes
// (a peer that differs only in its pre-shared key or its CRLs keeps its
// SAs). A responder that sees
// INITIAL_CONTACT in IKE_AUTH drops the IKE SAs it still holds for that
// peer's identity (section 2.4). An IKE SA behind a NAT sends
// NAT-keepalives when idle (Config.KeepAlive, keepalive.go), and a
// liveness check when its mapping may have been lost; one not behind a
// NAT follows the peer's NAT to a new address or port on an
// authenticated, new message (section 2.23, natupdate.go).
//
// A hot standby continues an Endpoint's IKE SAs (snapshot.go): the
// Endpoint reports each established IKE SA's state (keys, message IDs,
// the last response, the outstanding request, Child SAs, timers) through
// Config.OnSnapshot before any of its messages leaves, and another
// Endpoint with the same peers takes it over with Adopt, with the same
// SPIs and the next message IDs, without a new negotiation; the virtual
// IPs it holds are leased again in the adopter's pools, and MOBIKE and
// the additional key exchanges of its suite go with it.
//
// The result of a negotiation is a ChildSA: SPIs, keys in the form
// sluice's configuration takes (an AEAD key followed by its salt), the ESP
// suite's keyword, ESN, the narrowed traffic selectors and whether ESP
// goes in UDP.
//
// One Child SA of several goes on its own with Endpoint.DeleteChild (an
// INFORMATIONAL with its D(ESP) alone, section 1.4.1; deletechild.go;
// Controller.TerminateChild and the byte/packet life limits use it). An
// IKE SA is reauthenticated at Peer.ReauthTime less a tenth at most
// (section 2.8.3, reauth.go): make-before-break, a new IKE SA with a
// full IKE_SA_INIT and IKE_AUTH (without INITIAL_CONTACT) and its
// children made again under the same names, then the old one deleted.
//
// Not yet: a lock per IKE SA (one Endpoint mutex guards every IKE SA;
// the slow work runs off it), the key pairs of our own CREATE_CHILD_SA
// requests and the Diffie-Hellman of the peer's IKE SA rekey made
// outside that lock, sluice as an EAP client (as the
// initiator it authenticates with a PSK or a certificate), OCSP (CRLs
// only, from files), and IKE_FOLLOWUP_KE (an IKE SA rekey makes no
// additional key exchanges: the new IKE SA has the proposal's DH alone).
package ike
