/* The C half of package ipsecmb: keys expanded once in C memory, and one
 * call that runs a batch of op descriptors through a multi-buffer manager.
 * Descriptors are C memory filled from Go; the data they point to is
 * pinned Go memory (package packet's arenas, or a runtime.Pinner). */
#ifndef SLUICE_SMB_H
#define SLUICE_SMB_H

#include <stdint.h>
#include <intel-ipsec-mb.h>

/* Statuses, equal to cryptodev.Status. */
enum { SMB_OK = 1, SMB_AUTH_FAILED = 2, SMB_INVALID = 3 };

/* Kinds of key. */
enum { SMB_GCM = 1, SMB_CHACHA = 2, SMB_CBC_HMAC = 3, SMB_NULL_HMAC = 4 };

typedef struct smb_key {
	struct gcm_key_data gcm;             /* GCM: expanded key and hash keys */
	uint8_t enc[16 * 15] __attribute__((aligned(16))); /* CBC round keys */
	uint8_t dec[16 * 15] __attribute__((aligned(16)));
	uint8_t ipad[64] __attribute__((aligned(16))); /* HMAC inner state */
	uint8_t opad[64] __attribute__((aligned(16))); /* HMAC outer state */
	uint8_t raw[32];  /* ChaCha20 key */
	uint32_t kind, key_len, tag_len, hash_alg;
} __attribute__((aligned(64))) smb_key;

/* One op. No field is pointer-typed, the key included: Go writes these
 * descriptors into C memory that it reuses (and realloc grows), and a
 * pointer-typed field would make Go's write barrier look at whatever stale
 * value the slot held, which the garbage collector then takes for a Go
 * pointer ("found bad pointer in Go heap"). src, dst, tag and hash are
 * addresses in pinned Go memory; key is an smb_key in C memory.
 * aad, iv and tag_in are copies. For the chained suites hash is the
 * address of the AAD in packet memory, followed there by the IV and src
 * (len bytes): hash_len covers them all. */
typedef struct smb_op {
	uintptr_t key;       /* const smb_key * */
	uintptr_t src;
	uintptr_t dst;
	uintptr_t tag;       /* encrypt: where the ICV goes */
	uintptr_t hash;      /* chained suites: start of AAD || IV || data */
	uint32_t len, hash_len;
	uint8_t dir;         /* 0 encrypt, 1 decrypt */
	uint8_t aad_len;
	uint8_t status;
	uint8_t pad_;
	uint8_t aad[16];
	uint8_t iv[16];      /* GCM, ChaCha20: salt || IV (12 bytes); CBC: 16 */
	uint8_t tag_in[32];  /* decrypt: the ICV received */
	uint8_t tag_out[64]; /* decrypt: the ICV computed */
} smb_op;

IMB_MGR *smb_mgr_new(int *arch, uint64_t *features);
void smb_mgr_free(IMB_MGR *m);
smb_key *smb_key_new(IMB_MGR *m, int kind, const uint8_t *key, int key_len,
		     const uint8_t *auth, int auth_len, int hash, int tag_len);
void smb_key_free(smb_key *k);
void smb_run(IMB_MGR *m, smb_op *ops, int n);
double smb_bench_gcm(IMB_MGR *m, smb_key *k, uint8_t *arena, int slot_len,
		     int size, int batch, long iters);

#endif
