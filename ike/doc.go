// Package ike implements IKEv2 (RFC 7296) for sluice: it negotiates the
// ESP Child SAs that the data plane (esp, sad) runs, authenticated with a
// pre-shared key or certificates, and rekeys them, against peers such as
// strongSwan.
//
// # Exchanges
//
// An IKE SA starts with two exchanges of one request and one response
// each (section 1.2). HDR is the IKE header, SK{...} the Encrypted payload,
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
//
//	  both: SKEYSEED = prf(Ni | Nr, g^ir),
//	        SK_d, SK_ai, SK_ar, SK_ei, SK_er, SK_pi, SK_pr =
//	          prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)           (2.14)
//	  a NAT on the path (or a forced encapsulation) moves both to
//	  port 4500 with the non-ESP marker                      (2.23)
//
//	IKE_AUTH (message ID 1)
//	HDR, SK{IDi, [IDr,] AUTH,
//	  N(INITIAL_CONTACT), SAi2, TSi, TSr} -->
//	                                   <--  HDR, SK{IDr, AUTH, SAr2, TSi, TSr}
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
//	INFORMATIONAL (either side, next message ID)
//	HDR, SK{D(IKE) | D(ESP, SPIs) | }  -->
//	                                   <--  HDR, SK{[D(ESP, SPIs)]}
//
// # Shape
//
// wire.go and payload.go are the wire format: ParseMessage and
// Message.Encode with one struct per payload, every length checked
// (FuzzParseMessage). transform.go parses strongSwan's proposal keywords
// and selects proposals; keys.go, dh.go and sk.go are the keying, the
// Diffie-Hellman groups (14, 19, 20, 31) and the SK payload's protection
// (AES-GCM-16, ChaCha20-Poly1305, AES-CBC with HMAC-SHA-2); auth.go the
// signatures and certificates. endpoint.go, exchange.go and rekey.go are
// the state machine: an Endpoint owns every IKE SA of a
// set of peers, behind one mutex; it learns datagrams through Receive and
// sends through a Transport, so it runs over plain UDP sockets
// (UDPTransport) or behind the gateway's ESP-in-UDP link.
//
// Each side has at most one request outstanding (window size 1, section
// 2.3); a request is retransmitted with doubling timeouts and the SA is
// given up after Config.RetransmitTries. A retransmitted request from the
// peer is answered from a cache of the last response. Whatever cannot be
// processed (malformed, unknown SPI, outside the message ID window, failing
// its integrity check) is dropped and counted in Stats, never answered
// with state changes. Half-open SAs are bounded (Config.MaxHalfOpen), and
// cookies are demanded beyond Config.CookieThreshold.
//
// The result of a negotiation is a ChildSA: SPIs, keys in the form
// sluice's configuration takes (an AEAD key followed by its salt), the ESP
// suite's keyword, ESN, the narrowed traffic selectors and whether ESP
// goes in UDP.
//
// Not yet: rekeying the IKE SA itself (refused with NO_PROPOSAL_CHOSEN),
// resolving simultaneous rekeys (section 2.8.1), Child SAs beyond the one of
// IKE_AUTH other than rekeys (refused with NO_ADDITIONAL_SAS), lifetimes
// that trigger rekeys on their own, dead peer detection, EAP, IKE
// fragmentation (RFC 7383), MOBIKE, configuration payloads, CRL/OCSP checks,
// and signing outside Endpoint's lock.
package ike
