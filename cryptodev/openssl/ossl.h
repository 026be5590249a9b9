// The C half of the openssl engine: keys as libcrypto objects, a batch of
// symmetric ops run in one call, and one call per asymmetric op.
//
// Ownership: every object here is made and freed by the Go half through
// these functions. Nothing keeps a pointer to Go memory after a call
// returns.

#ifndef SLUICE_OSSL_H
#define SLUICE_OSSL_H

#include <stddef.h>
#include <stdint.h>

// Symmetric suites, in the order the Go half numbers them.
enum {
	SL_AES128GCM = 1,
	SL_AES192GCM,
	SL_AES256GCM,
	SL_CHACHAPOLY,
	SL_AES128CBC,
	SL_AES256CBC,
	SL_NULLCIPHER,
	SL_NSUITES
};

// Digests (HMAC of chained suites, hash of RSA and ECDSA signatures).
enum { SL_SHA256 = 1, SL_SHA384, SL_SHA512 };

// Statuses, the values of cryptodev.Status.
enum { SL_OK = 1, SL_AUTHFAILED = 2, SL_INVALID = 3 };

// sl_op is one symmetric op, filled by the Go half after checking every
// length. Addresses point into the caller's buffers, which the Go half
// keeps alive for the call; C reads src, iv, aad, trailer (and tag on
// decryption) and writes dst (and tag on encryption).
typedef struct {
	uintptr_t key; // struct sl_symkey *
	uintptr_t src, dst, iv, aad, trailer, tag;
	uint32_t len, aadlen, trailerlen;
	uint8_t dir; // 0 encrypt, 1 decrypt
	uint8_t status;
	uint8_t pad[2];
} sl_op;

// Returns 1 when every cipher, digest and MAC is available.
int sl_init(void);

struct sl_symkey *sl_symkey_new(int suite, const uint8_t *enc, size_t enclen,
                                int mac, const uint8_t *auth, size_t authlen,
                                size_t icvlen);
void sl_symkey_free(struct sl_symkey *k);

// sl_symkey_hold takes (busy 1) or frees every slot of k, for tests.
void sl_symkey_hold(struct sl_symkey *k, int busy);

// sl_sym_run runs n ops and sets each status.
void sl_sym_run(sl_op *ops, int n);

// Asymmetric keys.
enum { SL_RSA = 1, SL_ECDSA, SL_ED25519, SL_X25519, SL_ECDH };

struct sl_pkey *sl_pkey_new(int kind, const uint8_t *der, size_t derlen);
void sl_pkey_free(struct sl_pkey *k);

// sl_sign signs in (a digest of hash, or the message for Ed25519) into
// out; *outlen is out's capacity on entry and the signature's length on
// return. Returns 1 on success.
int sl_sign(struct sl_pkey *k, int hash, int pss, const uint8_t *in, size_t inlen,
            uint8_t *out, size_t *outlen);

// sl_derive computes the shared secret with the peer's public key.
int sl_derive(struct sl_pkey *k, const uint8_t *peer, size_t peerlen,
              uint8_t *out, size_t *outlen);

#endif
