/* SPDX-License-Identifier: MIT */
/*
 * The little of etcd's v3 API the election needs, over its JSON gateway
 * (etcd 3.4: POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, ...; keys and
 * values base64, int64 as strings), with libcurl and json-c: Debian has no
 * C etcd client. Blocking: only the election's thread calls it.
 *
 * Every answer is hostile input: a body over ETCD_BODY_MAX, a status other
 * than 200, JSON that does not parse or an "error" member is a failure
 * (counted in errors or bad), and the next endpoint is tried on the next
 * call.
 */
#ifndef LEASELINE_COORD_ETCD_H
#define LEASELINE_COORD_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_BODY_MAX	   (64 * 1024)
#define ETCD_VALUE_MAX	   512 /* a value the election reads, decoded */

struct etcd {
	void *curl; /* CURL *, one handle reused */
	char ep[ETCD_MAX_ENDPOINTS][136];
	unsigned n, cur;
	long timeout_ms;
	uint64_t errors; /* no answer, or not 200 */
	uint64_t bad;	 /* an answer that is not what etcd sends */
	char *body;	 /* the answer being read, ETCD_BODY_MAX + 1 */
	size_t len;
	bool over; /* the answer was cut at ETCD_BODY_MAX */
	bool tls;  /* etcd_tls: https only, certificates checked both ways */
	char *pem[3];	   /* etcd_tls: the CA, this replica's certificate, its key */
	size_t pem_len[3];
	char err[256];	   /* curl's reason for the last failed request */
	bool err_told;	   /* that reason is logged: once until a request succeeds */
};

int etcd_init(struct etcd *e, const char (*endpoints)[136], unsigned n, long timeout_ms);
/* Mutual TLS to etcd (https:// endpoints only from now on): ca signs etcd's
 * certificates, cert and key are this replica's (PEM files). They are read
 * now, into the handle: the daemon may no longer be able to read them once
 * it runs as its user. 0, or a negative errno (-EINVAL: a file empty or
 * above 64 KiB; -errno of open or read).
 */
int etcd_tls(struct etcd *e, const char *ca, const char *cert, const char *key);
void etcd_free(struct etcd *e);

/* POST body (taken: put by the call) to path; the parsed answer (the
 * caller puts it), or NULL (counted). On NULL the next endpoint is tried
 * next time.
 */
struct json_object *etcd_call(struct etcd *e, const char *path, struct json_object *body);

/* base64 of n bytes, as a new json string. */
struct json_object *etcd_b64(const void *data, size_t n);
/* Decode member key of o (a base64 string) into out (NUL-terminated, at
 * most cap - 1 bytes): its length, 0 if absent, -1 if malformed or too long.
 */
int etcd_unb64(struct json_object *o, const char *key, char *out, size_t cap);
/* An int64 member (a string of digits, as the gateway writes them, or a
 * number): 0 and *v; absent is 0 and *v = 0; -1 malformed or negative.
 */
int etcd_u64(struct json_object *o, const char *key, uint64_t *v);

#endif /* LEASELINE_COORD_ETCD_H */
