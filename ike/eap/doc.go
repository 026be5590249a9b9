// Package eap is an EAP server (RFC 3748) for IKEv2's EAP authentication
// (RFC 7296 section 2.16): the packet codec, a session that asks for the
// peer's identity and then runs one method to Success or Failure, and two
// methods, EAP-MSCHAPv2 and EAP-TLS. It imports nothing from package ike;
// the IKE_AUTH task carries its packets in EAP payloads and, after
// Success, uses the method's MSK as the shared secret of the AUTH payloads.
//
// A session is driven by its caller, one packet at a time:
//
//  1. Start: the first Request (EAP-Identity, or the method's first
//     Request when the identity is configured).
//  2. Process, once per Response: the next Request, or Success with the
//     MSK, or Failure. Bad input (a truncated packet, a wrong identifier,
//     an unexpected type, an oversized TLS message, too many rounds) ends
//     the session with Failure and an error saying why; it never panics.
//  3. Close: releases the method (EAP-TLS runs crypto/tls in a goroutine
//     that waits for input; Close ends it).
//
// EAP-MSCHAPv2 (draft-kamath-pppext-eap-mschapv2 framing, RFC 2759
// computations, RFC 3079 section 3 keys) needs MD4 and DES. DES comes
// from crypto/des. MD4 comes from golang.org/x/crypto/md4: the module is
// already a dependency of sluice, and although the package is deprecated
// (MD4 is broken as a general hash) the protocol fixes the algorithm, the
// code is small and stable, and writing our own would add code to review
// for no gain.
//
// EAP-TLS (RFC 5216; RFC 9190 for TLS 1.3) runs crypto/tls as the server
// and requires a client certificate that chains to the configured CAs.
package eap
