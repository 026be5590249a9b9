//go:build openssl

#include "ossl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

// Contexts are not safe for concurrent use, and a key is: each key keeps a
// few slots of contexts, made on first use, and an op claims one with an
// atomic exchange. A run of ops on the same key keeps its slot. When every
// slot is taken, the op makes temporary contexts (slow, never wrong).
#define SL_SLOTS 16

static EVP_CIPHER *ciphers[SL_NSUITES];
static EVP_MAC *hmac;
static const char *digest_names[] = {NULL, "SHA2-256", "SHA2-384", "SHA2-512"};
static const char *cipher_names[SL_NSUITES] = {
	NULL, "AES-128-GCM", "AES-192-GCM", "AES-256-GCM", "ChaCha20-Poly1305",
	"AES-128-CBC", "AES-256-CBC", NULL,
};

int sl_init(void) {
	for (int s = 1; s < SL_NSUITES; s++) {
		if (cipher_names[s] == NULL)
			continue;
		ciphers[s] = EVP_CIPHER_fetch(NULL, cipher_names[s], NULL);
		if (ciphers[s] == NULL)
			return 0;
	}
	hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	return hmac != NULL;
}

// ---- symmetric ----

struct sl_slot {
	atomic_int busy;
	EVP_CIPHER_CTX *enc, *dec; // cipher contexts keyed for each direction
	EVP_MAC_CTX *mac;          // HMAC keyed with the auth key
};

struct sl_symkey {
	int suite, aead;
	size_t icvlen;
	uint8_t key[32];
	size_t keylen;
	uint8_t salt[4];
	uint8_t auth[64];
	size_t authlen;
	int mac;
	struct sl_slot slots[SL_SLOTS];
};

static void slot_clear(struct sl_slot *s) {
	EVP_CIPHER_CTX_free(s->enc); // the provider clears its key schedule
	EVP_CIPHER_CTX_free(s->dec);
	EVP_MAC_CTX_free(s->mac);
	s->enc = s->dec = NULL;
	s->mac = NULL;
}

// slot_ready makes the slot's contexts if it has none yet.
static int slot_ready(struct sl_symkey *k, struct sl_slot *s) {
	if (s->enc != NULL || s->mac != NULL)
		return 1;
	EVP_CIPHER *c = ciphers[k->suite];
	if (c != NULL) {
		s->enc = EVP_CIPHER_CTX_new();
		s->dec = EVP_CIPHER_CTX_new();
		if (s->enc == NULL || s->dec == NULL ||
		    !EVP_CipherInit_ex2(s->enc, c, k->key, NULL, 1, NULL) ||
		    !EVP_CipherInit_ex2(s->dec, c, k->key, NULL, 0, NULL))
			goto fail;
		if (!k->aead && (!EVP_CIPHER_CTX_set_padding(s->enc, 0) || !EVP_CIPHER_CTX_set_padding(s->dec, 0)))
			goto fail;
	}
	if (!k->aead) {
		OSSL_PARAM p[2] = {
			OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest_names[k->mac], 0),
			OSSL_PARAM_construct_end(),
		};
		s->mac = EVP_MAC_CTX_new(hmac);
		if (s->mac == NULL || !EVP_MAC_init(s->mac, k->auth, k->authlen, p))
			goto fail;
	}
	return 1;
fail:
	slot_clear(s);
	return 0;
}

static struct sl_slot *slot_get(struct sl_symkey *k, struct sl_slot *tmp) {
	static _Thread_local unsigned hint;
	for (unsigned i = 0; i < SL_SLOTS; i++) {
		struct sl_slot *s = &k->slots[(hint + i) % SL_SLOTS];
		if (atomic_load_explicit(&s->busy, memory_order_relaxed) == 0 &&
		    atomic_exchange_explicit(&s->busy, 1, memory_order_acquire) == 0) {
			hint = (hint + i) % SL_SLOTS;
			if (slot_ready(k, s))
				return s;
			atomic_store_explicit(&s->busy, 0, memory_order_release);
			return NULL;
		}
	}
	memset(tmp, 0, sizeof *tmp);
	return slot_ready(k, tmp) ? tmp : NULL;
}

static void slot_put(struct sl_slot *s, struct sl_slot *tmp) {
	if (s == tmp)
		slot_clear(tmp);
	else
		atomic_store_explicit(&s->busy, 0, memory_order_release);
}

struct sl_symkey *sl_symkey_new(int suite, const uint8_t *enc, size_t enclen,
                                int mac, const uint8_t *auth, size_t authlen,
                                size_t icvlen) {
	if (suite <= 0 || suite >= SL_NSUITES || authlen > 64 || mac < 0 || mac > SL_SHA512)
		return NULL;
	struct sl_symkey *k = calloc(1, sizeof *k);
	if (k == NULL)
		return NULL;
	k->suite = suite;
	k->aead = suite <= SL_CHACHAPOLY;
	k->icvlen = icvlen;
	k->mac = mac;
	size_t keylen = enclen;
	if (k->aead) {
		if (enclen < 4)
			goto fail;
		keylen = enclen - 4;
		memcpy(k->salt, enc + keylen, 4);
	}
	if (keylen > sizeof k->key)
		goto fail;
	memcpy(k->key, enc, keylen);
	k->keylen = keylen;
	memcpy(k->auth, auth, authlen);
	k->authlen = authlen;
	// The first slot now, so that a key that libcrypto refuses fails here.
	if (!slot_ready(k, &k->slots[0]))
		goto fail;
	return k;
fail:
	sl_symkey_free(k);
	return NULL;
}

void sl_symkey_free(struct sl_symkey *k) {
	if (k == NULL)
		return;
	for (int i = 0; i < SL_SLOTS; i++)
		slot_clear(&k->slots[i]);
	OPENSSL_cleanse(k, sizeof *k);
	free(k);
}

static uint8_t sl_status_aead(struct sl_symkey *k, struct sl_slot *s, sl_op *op) {
	uint8_t nonce[12];
	int outl;
	memcpy(nonce, k->salt, 4);
	memcpy(nonce + 4, (const void *)op->iv, 8);
	EVP_CIPHER_CTX *c = op->dir == 0 ? s->enc : s->dec;
	if (!EVP_CipherInit_ex2(c, NULL, NULL, nonce, -1, NULL))
		return SL_INVALID;
	if (op->dir == 1 && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, (int)k->icvlen, (void *)op->tag))
		return SL_INVALID;
	if (op->aadlen > 0 && !EVP_CipherUpdate(c, NULL, &outl, (const void *)op->aad, (int)op->aadlen))
		return SL_INVALID;
	if (op->len > 0 && !EVP_CipherUpdate(c, (void *)op->dst, &outl, (const void *)op->src, (int)op->len))
		return SL_INVALID;
	uint8_t last[16];
	if (EVP_CipherFinal_ex(c, last, &outl) <= 0)
		return op->dir == 1 ? SL_AUTHFAILED : SL_INVALID;
	if (op->dir == 0 && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, (int)k->icvlen, (void *)op->tag))
		return SL_INVALID;
	return SL_OK;
}

// chain_icv computes the truncated HMAC over AAD || IV || ciphertext ||
// trailer (RFC 4303 section 3.3.2.1, RFC 4868 section 2.3).
static int chain_icv(struct sl_symkey *k, struct sl_slot *s, sl_op *op, const uint8_t *ct, uint8_t *icv) {
	uint8_t full[EVP_MAX_MD_SIZE];
	size_t n;
	size_t ivlen = k->suite == SL_NULLCIPHER ? 0 : 16;
	if (!EVP_MAC_init(s->mac, NULL, 0, NULL) ||
	    !EVP_MAC_update(s->mac, (const void *)op->aad, op->aadlen) ||
	    !EVP_MAC_update(s->mac, (const void *)op->iv, ivlen) ||
	    !EVP_MAC_update(s->mac, ct, op->len) ||
	    !EVP_MAC_update(s->mac, (const void *)op->trailer, op->trailerlen) ||
	    !EVP_MAC_final(s->mac, full, &n, sizeof full) || n < k->icvlen)
		return 0;
	memcpy(icv, full, k->icvlen);
	OPENSSL_cleanse(full, sizeof full);
	return 1;
}

static int chain_cipher(struct sl_symkey *k, EVP_CIPHER_CTX *c, sl_op *op) {
	int outl;
	if (k->suite == SL_NULLCIPHER) {
		if (op->dst != op->src)
			memcpy((void *)op->dst, (const void *)op->src, op->len);
		return 1;
	}
	return EVP_CipherInit_ex2(c, NULL, NULL, (const void *)op->iv, -1, NULL) &&
	       (op->len == 0 || EVP_CipherUpdate(c, (void *)op->dst, &outl, (const void *)op->src, (int)op->len));
}

static uint8_t sl_status_chain(struct sl_symkey *k, struct sl_slot *s, sl_op *op) {
	uint8_t icv[64];
	if (op->dir == 0) {
		if (!chain_cipher(k, s->enc, op) || !chain_icv(k, s, op, (const void *)op->dst, icv))
			return SL_INVALID;
		memcpy((void *)op->tag, icv, k->icvlen);
		return SL_OK;
	}
	if (!chain_icv(k, s, op, (const void *)op->src, icv))
		return SL_INVALID;
	if (CRYPTO_memcmp(icv, (const void *)op->tag, k->icvlen) != 0)
		return SL_AUTHFAILED;
	return chain_cipher(k, s->dec, op) ? SL_OK : SL_INVALID;
}

void sl_sym_run(sl_op *ops, int n) {
	struct sl_slot tmp;
	struct sl_symkey *held = NULL;
	struct sl_slot *s = NULL;
	for (int i = 0; i < n; i++) {
		sl_op *op = &ops[i];
		if ((struct sl_symkey *)op->key != held) {
			if (s != NULL)
				slot_put(s, &tmp);
			held = (struct sl_symkey *)op->key;
			s = slot_get(held, &tmp);
		}
		if (s == NULL) {
			op->status = SL_INVALID;
			continue;
		}
		op->status = held->aead ? sl_status_aead(held, s, op) : sl_status_chain(held, s, op);
		if (op->status == SL_INVALID)
			ERR_clear_error();
	}
	if (s != NULL)
		slot_put(s, &tmp);
}

// ---- asymmetric ----

// A signing key keeps, like a symmetric key, a few slots of contexts
// initialised for signing, so that a signature costs libcrypto's
// EVP_PKEY_sign alone; a slot remembers the hash and padding it was last
// set to.
struct sl_signslot {
	atomic_int busy;
	EVP_PKEY_CTX *ctx;
	int hash, pss;
};

struct sl_pkey {
	int kind;
	EVP_PKEY *pkey;
	struct sl_signslot slots[SL_SLOTS];
};

struct sl_pkey *sl_pkey_new(int kind, const uint8_t *der, size_t derlen) {
	const uint8_t *p = der;
	EVP_PKEY *pk = d2i_AutoPrivateKey(NULL, &p, (long)derlen);
	if (pk == NULL) {
		ERR_clear_error();
		return NULL;
	}
	struct sl_pkey *k = calloc(1, sizeof *k);
	if (k == NULL) {
		EVP_PKEY_free(pk);
		return NULL;
	}
	k->kind = kind;
	k->pkey = pk;
	return k;
}

void sl_pkey_free(struct sl_pkey *k) {
	if (k == NULL)
		return;
	for (int i = 0; i < SL_SLOTS; i++)
		EVP_PKEY_CTX_free(k->slots[i].ctx);
	EVP_PKEY_free(k->pkey); // libcrypto clears the private parts it frees
	free(k);
}

static const EVP_MD *sl_md(int hash) {
	switch (hash) {
	case SL_SHA256:
		return EVP_sha256();
	case SL_SHA384:
		return EVP_sha384();
	case SL_SHA512:
		return EVP_sha512();
	}
	return NULL;
}

int sl_sign(struct sl_pkey *k, int hash, int pss, const uint8_t *in, size_t inlen,
            uint8_t *out, size_t *outlen) {
	int ok = 0;
	if (k->kind == SL_ED25519) {
		EVP_MD_CTX *m = EVP_MD_CTX_new();
		ok = m != NULL && EVP_DigestSignInit_ex(m, NULL, NULL, NULL, NULL, k->pkey, NULL) == 1 &&
		     EVP_DigestSign(m, out, outlen, in, inlen) == 1;
		EVP_MD_CTX_free(m);
		if (!ok)
			ERR_clear_error();
		return ok;
	}
	const EVP_MD *md = sl_md(hash);
	if (md == NULL)
		return 0;
	struct sl_signslot tmp = {0}, *s = &tmp;
	static _Thread_local unsigned hint;
	for (unsigned i = 0; i < SL_SLOTS; i++) {
		struct sl_signslot *t = &k->slots[(hint + i) % SL_SLOTS];
		if (atomic_load_explicit(&t->busy, memory_order_relaxed) == 0 &&
		    atomic_exchange_explicit(&t->busy, 1, memory_order_acquire) == 0) {
			hint = (hint + i) % SL_SLOTS;
			s = t;
			break;
		}
	}
	if (s->ctx == NULL) {
		s->ctx = EVP_PKEY_CTX_new_from_pkey(NULL, k->pkey, NULL);
		s->hash = s->pss = 0;
		if (s->ctx == NULL || EVP_PKEY_sign_init(s->ctx) != 1)
			goto done;
	}
	if (s->hash != hash || s->pss != pss) {
		s->hash = 0; // unknown until every setting below took
		if (k->kind == SL_RSA &&
		    EVP_PKEY_CTX_set_rsa_padding(s->ctx, pss ? RSA_PKCS1_PSS_PADDING : RSA_PKCS1_PADDING) != 1)
			goto done;
		if (EVP_PKEY_CTX_set_signature_md(s->ctx, md) != 1)
			goto done;
		if (pss && EVP_PKEY_CTX_set_rsa_pss_saltlen(s->ctx, RSA_PSS_SALTLEN_DIGEST) != 1)
			goto done;
		s->hash = hash;
		s->pss = pss;
	}
	ok = EVP_PKEY_sign(s->ctx, out, outlen, in, inlen) == 1;
done:
	if (!ok || s == &tmp) {
		// A context that failed is not trusted again.
		EVP_PKEY_CTX_free(s->ctx);
		s->ctx = NULL;
		ERR_clear_error();
	}
	if (s != &tmp)
		atomic_store_explicit(&s->busy, 0, memory_order_release);
	return ok;
}

int sl_derive(struct sl_pkey *k, const uint8_t *peer, size_t peerlen,
              uint8_t *out, size_t *outlen) {
	int ok = 0;
	EVP_PKEY *pp = NULL;
	EVP_PKEY_CTX *c = NULL;
	if (k->kind == SL_X25519) {
		pp = EVP_PKEY_new_raw_public_key_ex(NULL, "X25519", NULL, peer, peerlen);
	} else {
		pp = EVP_PKEY_new();
		if (pp != NULL && (EVP_PKEY_copy_parameters(pp, k->pkey) != 1 ||
		                   EVP_PKEY_set1_encoded_public_key(pp, peer, peerlen) != 1)) {
			EVP_PKEY_free(pp);
			pp = NULL;
		}
	}
	if (pp == NULL) {
		ERR_clear_error();
		return 0;
	}
	c = EVP_PKEY_CTX_new_from_pkey(NULL, k->pkey, NULL);
	// The point was checked to be on the curve when it was decoded, which
	// is all P-256 (cofactor 1) needs; no full public-key check.
	ok = c != NULL && EVP_PKEY_derive_init(c) == 1 && EVP_PKEY_derive_set_peer_ex(c, pp, 0) == 1 &&
	     EVP_PKEY_derive(c, out, outlen) == 1;
	EVP_PKEY_CTX_free(c);
	EVP_PKEY_free(pp);
	if (!ok)
		ERR_clear_error();
	return ok;
}

// sl_symkey_hold marks every slot of k taken (busy 1) or free (busy 0), so
// that a test can drive ops onto the temporary contexts.
void sl_symkey_hold(struct sl_symkey *k, int busy) {
	for (int i = 0; i < SL_SLOTS; i++)
		atomic_store(&k->slots[i].busy, busy);
}
