// SPDX-License-Identifier: MIT
/* Prometheus exposition helpers (see prom.h). */
#include <math.h>

#include "lib/prom.h"
#include "lib/version.h"

void prom_value(FILE *f, double v)
{
	if (v == floor(v) && fabs(v) < 9007199254740992.0)
		fprintf(f, " %.0f\n", v);
	else
		fprintf(f, " %.9g\n", v);
}

void prom_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_build_info(FILE *f)
{
	prom_family(f, "leaseline_build_info", "gauge",
		    "Always 1; the version of the running binary is in the label.");
	fputs("leaseline_build_info{version=\"", f);
	/* A label value: backslash, quote and newline escaped. */
	for (const char *p = LL_VERSION; *p; p++) {
		if (*p == '\\' || *p == '"')
			fputc('\\', f);
		if (*p == '\n')
			fputs("\\n", f);
		else
			fputc(*p, f);
	}
	fputs("\"} 1\n", f);
}
