// SPDX-License-Identifier: MIT
/*
 * The usage ledger's PostgreSQL engine (usage_db.h) on libpq: the ledger
 * that a coordinator's replicas share, so that a new leader counts on from
 * where the old one stopped and nothing is counted twice.
 *
 * - Statements: ?N becomes $N; each is prepared on the server at its first
 *   step, with the types of that step's parameters (int8, text, bytea; an
 *   unbound one is left to the server), and again if they change or the
 *   connection was made anew. Parameters and results travel in binary.
 * - A writer's statement runs to completion at its first step (its rows
 *   kept), so statements may interleave as SQLite's do; a reader's
 *   (readonly) arrives a row at a time, one statement at a time.
 * - Transactions are the caller's (BEGIN ISOLATION LEVEL SERIALIZABLE, in
 *   usage_ledger.c): two leaders that overlap cannot both move one mark;
 *   the loser's commit fails with 40001, -EBUSY, and nothing of it is
 *   written, so its agent sends the report again.
 * - A lost connection is made again at the next statement; what was in
 *   flight fails (-EIO) and is sent again by its agent.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "coord/usage_db.h"
#include "coord/usage_db_pg.h"

/* PostgreSQL's type OIDs (fixed since its first release). */
#define OID_BOOL 16
#define OID_BYTEA 17
#define OID_NAME 19
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_TEXT 25

#define SESSION_SQL "SET TIME ZONE 'UTC'; SET client_min_messages = warning"

struct udb_pg {
	PGconn *conn;
	bool readonly;
	unsigned gen;	  /* connections made: statements prepared in an older one are gone */
	unsigned next_id; /* statement names */
	long changes;
	bool no_table;
	char err[256];
};

struct udb_pg_stmt {
	struct udb_pg *db;
	char *sql;	/* with $N */
	char name[24];
	unsigned gen;	/* the connection it was prepared in; 0 not yet */
	int nparams;	/* the highest $N: the arrays' length */
	Oid *prepared, *type;
	const char **val;
	int *len, *fmt;
	uint64_t *be; /* int8 parameters, big-endian */
	PGresult *res;
	int row, nrows;
	bool active; /* a reader's statement with rows still to come */
};

/* The error of res (or of the connection) into db: a negative errno. */
static int pg_fail(struct udb_pg *db, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(db->conn);
	size_t n;

	/* Its first line: a log line is one line (libpq adds hints below). */
	snprintf(db->err, sizeof(db->err), "%s", msg && *msg ? msg : "PostgreSQL failed");
	db->err[strcspn(db->err, "\n")] = '\0';
	n = strlen(db->err);
	while (n && db->err[n - 1] == ' ')
		db->err[--n] = '\0';
	db->no_table = state && !strcmp(state, "42P01");
	if (!state)
		return -EIO;
	if (!strcmp(state, "40001") || !strcmp(state, "40P01") || !strcmp(state, "55P03"))
		return -EBUSY; /* serialization, deadlock, lock not available */
	if (!strcmp(state, "53100"))
		return -ENOSPC;
	if (!strcmp(state, "53200"))
		return -ENOMEM;
	if (db->no_table)
		return -ENOENT;
	if (!strcmp(state, "42501") || !strcmp(state, "25006"))
		return -EACCES;
	return -EIO;
}

/* The connection usable, made again if it was lost: 0 or -EIO. */
static int pg_alive(struct udb_pg *db)
{
	if (PQstatus(db->conn) == CONNECTION_OK)
		return 0;
	PQreset(db->conn);
	if (PQstatus(db->conn) != CONNECTION_OK)
		return pg_fail(db, NULL);
	db->gen++;
	PQclear(PQexec(db->conn, db->readonly ? "SET default_transaction_read_only = on; " SESSION_SQL
					      : SESSION_SQL));
	return 0;
}

int udb_pg_open(struct udb_pg **out, const char *uri, bool readonly, char *err, size_t err_len)
{
	/* The URI's own settings win: it is expanded last. */
	static const char *const keys[] = {"connect_timeout", "application_name", "dbname", NULL};
	const char *vals[] = {"5", "leaseline", uri, NULL};
	struct udb_pg *db = calloc(1, sizeof(*db));
	PGresult *r;

	*out = NULL;
	if (!db) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	db->readonly = readonly;
	db->gen = 1;
	db->conn = PQconnectdbParams(keys, vals, 1);
	if (!db->conn || PQstatus(db->conn) != CONNECTION_OK) {
		const char *m = db->conn ? PQerrorMessage(db->conn) : "out of memory";

		snprintf(err, err_len, "%.*s", (int)strcspn(m, "\n"), m);
		PQfinish(db->conn);
		free(db);
		return -ECONNREFUSED;
	}
	/* Nothing depends on the session's time zone, a reader cannot
	 * write, and the schema's "already exists" notices stay unsaid.
	 */
	r = PQexec(db->conn, readonly ? "SET default_transaction_read_only = on; " SESSION_SQL
				      : SESSION_SQL);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		snprintf(err, err_len, "%s", PQresultErrorMessage(r));
		PQclear(r);
		PQfinish(db->conn);
		free(db);
		return -EIO;
	}
	PQclear(r);
	*out = db;
	return 0;
}

void udb_pg_close(struct udb_pg *db)
{
	PQfinish(db->conn);
	free(db);
}

int udb_pg_exec(struct udb_pg *db, const char *sql)
{
	PGresult *r;
	int rc = pg_alive(db);

	if (rc)
		return rc;
	r = PQexec(db->conn, sql);
	switch (PQresultStatus(r)) {
	case PGRES_COMMAND_OK:
	case PGRES_TUPLES_OK:
		db->changes = atol(PQcmdTuples(r));
		break;
	default:
		rc = pg_fail(db, r);
	}
	PQclear(r);
	return rc;
}

/* sql with ?N as $N (outside quotes); *nparams: the highest N. */
static char *dollar_params(const char *sql, int *nparams)
{
	char *out = strdup(sql), quote = 0;

	*nparams = 0;
	if (!out)
		return NULL;
	for (char *p = out; *p; p++) {
		if (quote) {
			quote = *p == quote ? 0 : quote;
		} else if (*p == '\'' || *p == '"') {
			quote = *p;
		} else if (*p == '?' && p[1] >= '1' && p[1] <= '9') {
			int n = (int)strtol(p + 1, NULL, 10);

			*p = '$';
			if (n > *nparams)
				*nparams = n;
		}
	}
	return out;
}

int udb_pg_prepare(struct udb_pg *db, const char *sql, struct udb_pg_stmt **out)
{
	struct udb_pg_stmt *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->db = db;
	s->sql = dollar_params(sql, &s->nparams);
	if (!s->sql || s->nparams > UDB_MAX_PARAMS) {
		int rc = s->sql ? -EINVAL : -ENOMEM;

		snprintf(db->err, sizeof(db->err), "a statement with more than %d parameters",
			 UDB_MAX_PARAMS);
		free(s->sql);
		free(s);
		return rc;
	}
	{
		size_t n = (size_t)s->nparams + 1;

		s->prepared = calloc(n, sizeof(*s->prepared));
		s->type = calloc(n, sizeof(*s->type));
		s->val = calloc(n, sizeof(*s->val));
		s->len = calloc(n, sizeof(*s->len));
		s->fmt = calloc(n, sizeof(*s->fmt));
		s->be = calloc(n, sizeof(*s->be));
		if (!s->prepared || !s->type || !s->val || !s->len || !s->fmt || !s->be) {
			udb_pg_finalize(s);
			return -ENOMEM;
		}
	}
	snprintf(s->name, sizeof(s->name), "ll%u", ++db->next_id);
	*out = s;
	return 0;
}

static void drain(struct udb_pg_stmt *s)
{
	PGresult *r;

	PQclear(s->res);
	s->res = NULL;
	s->row = s->nrows = 0;
	if (!s->active)
		return;
	while ((r = PQgetResult(s->db->conn)))
		PQclear(r);
	s->active = false;
}

void udb_pg_finalize(struct udb_pg_stmt *s)
{
	drain(s);
	if (s->gen == s->db->gen && PQstatus(s->db->conn) == CONNECTION_OK) {
		char sql[48];
		PGresult *r;

		snprintf(sql, sizeof(sql), "DEALLOCATE %s", s->name);
		r = PQexec(s->db->conn, sql);
		PQclear(r);
	}
	free(s->sql);
	free(s->prepared);
	free(s->type);
	free(s->val);
	free(s->len);
	free(s->fmt);
	free(s->be);
	free(s);
}

void udb_pg_reset(struct udb_pg_stmt *s)
{
	drain(s);
}

void udb_pg_clear(struct udb_pg_stmt *s)
{
	for (int i = 0; i < s->nparams; i++) {
		s->type[i] = 0;
		s->val[i] = NULL;
	}
}

void udb_pg_bind(struct udb_pg_stmt *s, int i, enum udb_pg_type t, const void *v, size_t len)
{
	if (i < 1 || i > s->nparams)
		return;
	i--;
	switch (t) {
	case UDB_PG_INT8: {
		int64_t x;

		memcpy(&x, v, sizeof(x));
		s->be[i] = htobe64((uint64_t)x);
		s->val[i] = (const char *)&s->be[i];
		s->len[i] = 8;
		s->fmt[i] = 1;
		s->type[i] = OID_INT8;
		break;
	}
	case UDB_PG_TEXT:
		s->val[i] = v;
		s->len[i] = (int)len;
		s->fmt[i] = 1; /* text's binary form is its bytes */
		s->type[i] = OID_TEXT;
		break;
	case UDB_PG_BYTEA:
		s->val[i] = len ? v : ""; /* empty, not NULL */
		s->len[i] = (int)len;
		s->fmt[i] = 1;
		s->type[i] = OID_BYTEA;
		break;
	default:
		s->val[i] = NULL;
		s->type[i] = 0;
	}
}

/* Prepared in this connection with these parameter types, else now. */
static int pg_ready(struct udb_pg_stmt *s)
{
	struct udb_pg *db = s->db;
	char sql[48];
	PGresult *r;
	int rc = pg_alive(db);

	if (rc)
		return rc;
	if (s->gen == db->gen) {
		bool same = true;

		for (int i = 0; i < s->nparams && same; i++)
			same = !s->type[i] || s->type[i] == s->prepared[i];
		if (same)
			return 0;
		snprintf(sql, sizeof(sql), "DEALLOCATE %s", s->name);
		PQclear(PQexec(db->conn, sql));
	}
	memcpy(s->prepared, s->type, (size_t)s->nparams * sizeof(*s->prepared));
	r = PQprepare(db->conn, s->name, s->sql, s->nparams, s->prepared);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		rc = pg_fail(db, r);
		s->gen = 0;
	} else {
		s->gen = db->gen;
	}
	PQclear(r);
	return rc;
}

/* A result that ended a statement: 0 (rows kept in s->res), or its error. */
static int pg_result(struct udb_pg_stmt *s, PGresult *r)
{
	switch (PQresultStatus(r)) {
	case PGRES_TUPLES_OK:
	case PGRES_SINGLE_TUPLE:
		s->res = r;
		s->nrows = PQntuples(r);
		s->row = 0;
		s->db->changes = s->nrows;
		return 0;
	case PGRES_COMMAND_OK:
		s->db->changes = atol(PQcmdTuples(r));
		PQclear(r);
		return 0;
	default: {
		int rc = pg_fail(s->db, r);

		PQclear(r);
		if (PQstatus(s->db->conn) != CONNECTION_OK)
			rc = -EIO;
		return rc;
	}
	}
}

int udb_pg_step(struct udb_pg_stmt *s)
{
	struct udb_pg *db = s->db;
	int rc;

	if (s->res && s->row + 1 < s->nrows) {
		s->row++;
		return UDB_ROW;
	}
	if (s->res || s->active) {
		PQclear(s->res);
		s->res = NULL;
		if (!s->active)
			return UDB_DONE; /* a writer's rows, all returned */
		rc = pg_result(s, PQgetResult(db->conn));
		if (rc || !s->res || !s->nrows) {
			drain(s);
			return rc ? rc : UDB_DONE;
		}
		return UDB_ROW;
	}
	if ((rc = pg_ready(s)))
		return rc;
	if (db->readonly) {
		if (!PQsendQueryPrepared(db->conn, s->name, s->nparams, s->val, s->len, s->fmt, 1))
			return pg_fail(db, NULL);
		s->active = true;
		PQsetSingleRowMode(db->conn);
		rc = pg_result(s, PQgetResult(db->conn));
	} else {
		rc = pg_result(s, PQexecPrepared(db->conn, s->name, s->nparams, s->val, s->len,
						 s->fmt, 1));
	}
	if (rc || !s->res || !s->nrows) {
		drain(s);
		return rc ? rc : UDB_DONE;
	}
	return UDB_ROW;
}

static const char *cell(struct udb_pg_stmt *s, int col, int *len, Oid *type)
{
	if (!s->res || col < 0 || col >= PQnfields(s->res) || PQgetisnull(s->res, s->row, col))
		return NULL;
	*len = PQgetlength(s->res, s->row, col);
	*type = PQftype(s->res, col);
	return PQgetvalue(s->res, s->row, col);
}

int64_t udb_pg_col_i64(struct udb_pg_stmt *s, int col)
{
	int len = 0;
	Oid type = 0;
	const char *v = cell(s, col, &len, &type);
	uint64_t x = 0;

	if (!v)
		return 0;
	switch (type) {
	case OID_INT8:
	case OID_INT4:
	case OID_INT2:
	case OID_BOOL:
		for (int i = 0; i < len && i < 8; i++)
			x = x << 8 | (uint8_t)v[i];
		/* sign-extend the shorter ones */
		if (len < 8 && len > 0 && (v[0] & 0x80))
			x |= ~UINT64_C(0) << (8 * len);
		return (int64_t)x;
	case OID_TEXT:
	case OID_NAME:
		return strtoll(v, NULL, 10); /* libpq ends every value with a 0 */
	default:
		return 0;
	}
}

const char *udb_pg_col_text(struct udb_pg_stmt *s, int col)
{
	int len = 0;
	Oid type = 0;
	const char *v = cell(s, col, &len, &type);

	return v && (type == OID_TEXT || type == OID_NAME) ? v : NULL;
}

const void *udb_pg_col_blob(struct udb_pg_stmt *s, int col, size_t *blen)
{
	int len = 0;
	Oid type = 0;
	const char *v = cell(s, col, &len, &type);

	*blen = v ? (size_t)len : 0;
	return v;
}

long udb_pg_changes(struct udb_pg *db)
{
	return db->changes;
}

bool udb_pg_in_txn(struct udb_pg *db)
{
	PGTransactionStatusType t = PQtransactionStatus(db->conn);

	return t == PQTRANS_INTRANS || t == PQTRANS_INERROR || t == PQTRANS_ACTIVE;
}

const char *udb_pg_errmsg(struct udb_pg *db)
{
	return db->err[0] ? db->err : "no error";
}

bool udb_pg_no_table(struct udb_pg *db)
{
	return db->no_table;
}
