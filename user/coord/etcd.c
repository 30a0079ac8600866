// SPDX-License-Identifier: MIT
/*
 * etcd's v3 JSON gateway through libcurl and json-c (etcd.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "coord/etcd.h"
#include "lib/log.h"

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct etcd *e = arg;
	size_t n = size * nmemb;

	if (e->len + n > ETCD_BODY_MAX) {
		e->over = true;
		return 0; /* curl stops: CURLE_WRITE_ERROR */
	}
	memcpy(e->body + e->len, p, n);
	e->len += n;
	return n;
}

int etcd_init(struct etcd *e, const char (*endpoints)[136], unsigned n, long timeout_ms)
{
	memset(e, 0, sizeof(*e));
	if (!n || n > ETCD_MAX_ENDPOINTS)
		return -EINVAL;
	memcpy(e->ep, endpoints, n * sizeof(e->ep[0]));
	e->n = n;
	e->timeout_ms = timeout_ms;
	e->body = malloc(ETCD_BODY_MAX + 1);
	e->curl = curl_easy_init();
	if (!e->body || !e->curl) {
		etcd_free(e);
		return -ENOMEM;
	}
	return 0;
}

/* A PEM file of at most 64 KiB, whole, into *buf (malloc'd). */
static int read_pem(const char *path, char **buf, size_t *len)
{
	enum { PEM_MAX = 64 * 1024 };
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), err;
	ssize_t n;

	*buf = NULL;
	if (fd < 0)
		return -errno;
	*buf = malloc(PEM_MAX + 1);
	n = *buf ? read(fd, *buf, PEM_MAX + 1) : -1;
	err = !*buf ? -ENOMEM : n < 0 ? -errno : n == 0 || n > PEM_MAX ? -EINVAL : 0;
	close(fd);
	if (err) {
		free(*buf);
		*buf = NULL;
		return err;
	}
	*len = (size_t)n;
	return 0;
}

int etcd_tls(struct etcd *e, const char *ca, const char *cert, const char *key)
{
	const char *path[3] = {ca, cert, key};

	for (int i = 0; i < 3; i++) {
		int err = read_pem(path[i], &e->pem[i], &e->pem_len[i]);

		if (err)
			return err;
	}
	e->tls = true;
	return 0;
}

/* The TLS options of every request (curl_easy_reset clears them). */
static void tls_opts(struct etcd *e, CURL *h)
{
	const CURLoption opt[3] = {CURLOPT_CAINFO_BLOB, CURLOPT_SSLCERT_BLOB, CURLOPT_SSLKEY_BLOB};

	for (int i = 0; i < 3; i++) {
		struct curl_blob b = {.data = e->pem[i], .len = e->pem_len[i], .flags = CURL_BLOB_NOCOPY};

		curl_easy_setopt(h, opt[i], &b);
	}
	curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
	curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
}

void etcd_free(struct etcd *e)
{
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (int i = 0; i < 3; i++) {
		if (e->pem[i])
			explicit_bzero(e->pem[i], e->pem_len[i]);
		free(e->pem[i]);
		e->pem[i] = NULL;
	}
	free(e->body);
	e->curl = NULL;
	e->body = NULL;
}

struct json_object *etcd_call(struct etcd *e, const char *path, struct json_object *body)
{
	const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	struct json_object *ans = NULL, *err = NULL;
	char url[192];
	long status = 0;
	CURLcode rc;
	CURL *h = e->curl;

	snprintf(url, sizeof(url), "%s%s", e->ep[e->cur], path);
	e->len = 0;
	e->over = false;
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, e->tls ? "https" : "http");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, e->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, e->timeout_ms);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, e);
	e->err[0] = '\0';
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, e->err);
	if (e->tls)
		tls_opts(e, h);
	rc = curl_easy_perform(h);
	curl_slist_free_all(hdr);
	json_object_put(body);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (rc != CURLE_OK || status != 200) {
		if (e->over)
			e->bad++;
		else
			e->errors++;
		/* Why, once until a request succeeds (a TLS mistake is otherwise
		 * only a count).
		 */
		if (!e->err_told && !e->over)
			pr_warn("etcd %s: %s\n", e->ep[e->cur],
				e->err[0] ? e->err
				: rc == CURLE_OK ? "an answer that is not 200"
						 : curl_easy_strerror(rc));
		e->err_told = true;
		e->cur = (e->cur + 1) % e->n;
		return NULL;
	}
	e->err_told = false;
	e->body[e->len] = '\0';
	ans = strlen(e->body) == e->len ? json_tokener_parse(e->body) : NULL;
	if (!ans || !json_object_is_type(ans, json_type_object) ||
	    json_object_object_get_ex(ans, "error", &err)) {
		e->bad++;
		json_object_put(ans);
		e->cur = (e->cur + 1) % e->n;
		return NULL;
	}
	return ans;
}

struct json_object *etcd_b64(const void *data, size_t n)
{
	unsigned char out[4 * ((ETCD_VALUE_MAX + 2) / 3) + 1];

	if (n > ETCD_VALUE_MAX)
		n = ETCD_VALUE_MAX; /* callers encode their own short keys and values */
	EVP_EncodeBlock(out, data, (int)n);
	return json_object_new_string((const char *)out);
}

int etcd_unb64(struct json_object *o, const char *key, char *out, size_t cap)
{
	unsigned char buf[ETCD_VALUE_MAX + 3];
	struct json_object *v;
	const char *s;
	size_t len;
	int n;

	if (!o || !json_object_object_get_ex(o, key, &v)) {
		out[0] = '\0';
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -1;
	s = json_object_get_string(v);
	len = strlen(s);
	if (len % 4 || len > 4 * (ETCD_VALUE_MAX / 3))
		return -1;
	n = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)len);
	if (n < 0)
		return -1;
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	for (size_t i = len; i > 0 && s[i - 1] == '=' && n > 0; i--)
		n--;
	if ((size_t)n >= cap || memchr(buf, '\0', (size_t)n))
		return -1;
	memcpy(out, buf, (size_t)n);
	out[n] = '\0';
	return n;
}

int etcd_u64(struct json_object *o, const char *key, uint64_t *v)
{
	struct json_object *x;
	const char *s;
	char *end;

	*v = 0;
	if (!o || !json_object_object_get_ex(o, key, &x))
		return 0;
	if (json_object_is_type(x, json_type_int)) {
		int64_t i = json_object_get_int64(x);

		if (i < 0)
			return -1;
		*v = (uint64_t)i;
		return 0;
	}
	if (!json_object_is_type(x, json_type_string))
		return -1;
	s = json_object_get_string(x);
	if (!*s || *s < '0' || *s > '9' || strlen(s) > 19)
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end || *v > INT64_MAX ? -1 : 0;
}
