//go:build ipsecmb

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "smb.h"

IMB_MGR *smb_mgr_new(int *arch, uint64_t *features)
{
	IMB_MGR *m = alloc_mb_mgr(0);
	IMB_ARCH a = IMB_ARCH_NONE;

	if (m == NULL)
		return NULL;
	init_mb_mgr_auto(m, &a);
	if (imb_get_errno(m) != 0) {
		free_mb_mgr(m);
		return NULL;
	}
	*arch = (int)a;
	*features = m->features;
	return m;
}

void smb_mgr_free(IMB_MGR *m)
{
	free_mb_mgr(m);
}

/* hmac_pads hashes one block of key ^ ipad and key ^ opad into k. */
static void hmac_pads(IMB_MGR *m, smb_key *k, const uint8_t *auth, int len, int hash)
{
	uint8_t ib[128], ob[128];
	int bs = hash == IMB_AUTH_HMAC_SHA_256 ? 64 : 128;

	memset(ib, 0x36, bs);
	memset(ob, 0x5c, bs);
	for (int i = 0; i < len; i++) {
		ib[i] ^= auth[i];
		ob[i] ^= auth[i];
	}
	switch (hash) {
	case IMB_AUTH_HMAC_SHA_256:
		IMB_SHA256_ONE_BLOCK(m, ib, k->ipad);
		IMB_SHA256_ONE_BLOCK(m, ob, k->opad);
		break;
	case IMB_AUTH_HMAC_SHA_384:
		IMB_SHA384_ONE_BLOCK(m, ib, k->ipad);
		IMB_SHA384_ONE_BLOCK(m, ob, k->opad);
		break;
	default:
		IMB_SHA512_ONE_BLOCK(m, ib, k->ipad);
		IMB_SHA512_ONE_BLOCK(m, ob, k->opad);
	}
	explicit_bzero(ib, sizeof(ib));
	explicit_bzero(ob, sizeof(ob));
}

/* smb_key_new expands a key (the caller has checked the lengths). */
smb_key *smb_key_new(IMB_MGR *m, int kind, const uint8_t *key, int key_len,
		     const uint8_t *auth, int auth_len, int hash, int tag_len)
{
	smb_key *k;

	if (posix_memalign((void **)&k, 64, sizeof(*k)) != 0)
		return NULL;
	memset(k, 0, sizeof(*k));
	k->kind = kind;
	k->key_len = key_len;
	k->tag_len = tag_len;
	k->hash_alg = hash;
	switch (kind) {
	case SMB_GCM:
		if (key_len == 16)
			IMB_AES128_GCM_PRE(m, key, &k->gcm);
		else if (key_len == 24)
			IMB_AES192_GCM_PRE(m, key, &k->gcm);
		else
			IMB_AES256_GCM_PRE(m, key, &k->gcm);
		break;
	case SMB_CHACHA:
		memcpy(k->raw, key, 32);
		break;
	case SMB_CBC_HMAC:
		if (key_len == 16)
			IMB_AES_KEYEXP_128(m, key, k->enc, k->dec);
		else
			IMB_AES_KEYEXP_256(m, key, k->enc, k->dec);
		/* fallthrough */
	case SMB_NULL_HMAC:
		hmac_pads(m, k, auth, auth_len, hash);
		break;
	}
	return k;
}

/* smb_key_free zeroes the key material and frees it. */
void smb_key_free(smb_key *k)
{
	explicit_bzero(k, sizeof(*k));
	free(k);
}

/* fill sets up job for op. */
static void fill(IMB_JOB *job, smb_op *op)
{
	const smb_key *k = (const smb_key *)op->key;
	int enc = op->dir == 0;

	job->cipher_direction = enc ? IMB_DIR_ENCRYPT : IMB_DIR_DECRYPT;
	job->chain_order = enc ? IMB_ORDER_CIPHER_HASH : IMB_ORDER_HASH_CIPHER;
	job->dst = (uint8_t *)op->dst;
	job->msg_len_to_cipher_in_bytes = op->len;
	job->auth_tag_output = enc ? (uint8_t *)op->tag : op->tag_out;
	job->auth_tag_output_len_in_bytes = k->tag_len;
	job->user_data = op;
	switch (k->kind) {
	case SMB_GCM:
	case SMB_CHACHA:
		job->src = (const uint8_t *)op->src;
		job->cipher_start_src_offset_in_bytes = 0;
		job->hash_start_src_offset_in_bytes = 0;
		job->msg_len_to_hash_in_bytes = op->len;
		job->iv = op->iv;
		job->iv_len_in_bytes = 12;
		job->key_len_in_bytes = k->key_len;
		if (k->kind == SMB_GCM) {
			job->cipher_mode = IMB_CIPHER_GCM;
			job->hash_alg = IMB_AUTH_AES_GMAC;
			job->enc_keys = job->dec_keys = &k->gcm;
			job->u.GCM.aad = op->aad;
			job->u.GCM.aad_len_in_bytes = op->aad_len;
		} else {
			job->cipher_mode = IMB_CIPHER_CHACHA20_POLY1305;
			job->hash_alg = IMB_AUTH_CHACHA20_POLY1305;
			job->enc_keys = job->dec_keys = k->raw;
			job->u.CHACHA20_POLY1305.aad = op->aad;
			job->u.CHACHA20_POLY1305.aad_len_in_bytes = op->aad_len;
		}
		break;
	default:
		/* AAD || IV || data, hashed from packet memory; the cipher
		 * starts after the AAD and the IV. */
		job->src = (const uint8_t *)op->hash;
		job->cipher_start_src_offset_in_bytes = op->hash_len - op->len;
		job->hash_start_src_offset_in_bytes = 0;
		job->msg_len_to_hash_in_bytes = op->hash_len;
		job->hash_alg = k->hash_alg;
		job->u.HMAC._hashed_auth_key_xor_ipad = k->ipad;
		job->u.HMAC._hashed_auth_key_xor_opad = k->opad;
		if (k->kind == SMB_CBC_HMAC && op->len > 0) {
			job->cipher_mode = IMB_CIPHER_CBC;
			job->enc_keys = k->enc;
			job->dec_keys = k->dec;
			job->key_len_in_bytes = k->key_len;
			job->iv = op->iv;
			job->iv_len_in_bytes = 16;
		} else {
			/* NULL encryption (and CBC of nothing): copy. */
			if (op->dst != op->src && op->len > 0)
				memmove((void *)op->dst, (const void *)op->src, op->len);
			job->cipher_mode = IMB_CIPHER_NULL;
			job->key_len_in_bytes = 0;
			job->iv_len_in_bytes = 0;
		}
	}
}

/* verdict records an op's status: invalid if the library refused it (not
 * ok), else ok for a seal and, for an open, the constant-time comparison
 * of the ICV computed with the one received. */
static void verdict(smb_op *op, int ok)
{
	if (!ok) {
		op->status = SMB_INVALID;
		return;
	}
	if (op->dir == 0) {
		op->status = SMB_OK;
		return;
	}
	uint8_t d = 0;
	for (uint32_t i = 0; i < ((const smb_key *)op->key)->tag_len; i++)
		d |= op->tag_out[i] ^ op->tag_in[i];
	op->status = d == 0 ? SMB_OK : SMB_AUTH_FAILED;
}

/* done records a completed job's status in its op. */
static void done(IMB_JOB *job)
{
	smb_op *op = job->user_data;

	verdict(op, job->status == IMB_STATUS_COMPLETED);
}

/* gcm runs an AES-GCM op through the library's direct single-buffer
 * functions, which the job manager itself calls for GCM (it has no
 * multi-buffer lanes for it): skipping the job (its fill, the manager's
 * checks and queue, and the copies it makes) is most of the library's cost
 * for a small packet. */
static void gcm(IMB_MGR *m, smb_op *op)
{
	const smb_key *k = (const smb_key *)op->key;
	struct gcm_context_data ctx;
	aes_gcm_enc_dec_t f;

	if (op->dir == 0)
		f = k->key_len == 16 ? m->gcm128_enc : k->key_len == 24 ? m->gcm192_enc : m->gcm256_enc;
	else
		f = k->key_len == 16 ? m->gcm128_dec : k->key_len == 24 ? m->gcm192_dec : m->gcm256_dec;
	/* The functions check their arguments and report through the
	 * library's global errno, which a call without error clears; but
	 * imb_get_errno reads the manager's own first, which only jobs set:
	 * one refused job would fail every GCM op after it. Clear it. Go has
	 * checked the lengths already: this is the job API's status, kept. */
	m->imb_errno = 0;
	f(&k->gcm, &ctx, (uint8_t *)op->dst, (const uint8_t *)op->src, op->len, op->iv,
	  op->aad, op->aad_len, op->dir == 0 ? (uint8_t *)op->tag : op->tag_out, k->tag_len);
	verdict(op, imb_get_errno(m) == 0);
}

/* smb_run runs n ops through m and sets each op's status: AES-GCM through
 * the direct functions, the other suites as jobs. */
void smb_run(IMB_MGR *m, smb_op *ops, int n)
{
	IMB_JOB *job;

	for (int i = 0; i < n; i++) {
		if (((const smb_key *)ops[i].key)->kind == SMB_GCM) {
			gcm(m, &ops[i]);
			continue;
		}
		job = IMB_GET_NEXT_JOB(m);
		fill(job, &ops[i]);
		job = IMB_SUBMIT_JOB(m);
		while (job != NULL) {
			done(job);
			job = IMB_GET_COMPLETED_JOB(m);
		}
	}
	while ((job = IMB_FLUSH_JOB(m)) != NULL)
		done(job);
}

/* smb_bench_gcm is the C baseline of sluice bench crypto: iters rounds of
 * batch AES-GCM seals of size bytes in place over arena (slots of slot_len
 * bytes laid out as bench lays them out: data, tag, IV at +size+32 and AAD
 * at +size+48), through the same direct GCM functions the engine calls
 * (see gcm), with a fresh IV per op. It returns the seconds taken. */
double smb_bench_gcm(IMB_MGR *m, smb_key *k, uint8_t *arena, int slot_len,
		     int size, int batch, long iters)
{
	struct timespec t0, t1;
	struct gcm_context_data ctx;
	uint8_t iv[12] = {0};
	uint64_t ctr = 0;
	aes_gcm_enc_dec_t f = k->key_len == 16 ? m->gcm128_enc : k->key_len == 24 ? m->gcm192_enc : m->gcm256_enc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long it = 0; it < iters; it++) {
		for (int i = 0; i < batch; i++) {
			uint8_t *slot = arena + (size_t)i * slot_len;
			ctr++;
			memcpy(iv + 4, &ctr, 8);
			f(&k->gcm, &ctx, slot, slot, size, iv, slot + size + 48, 8, slot + size, 16);
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}
