// SPDX-License-Identifier: MIT
/* Prometheus exposition helpers (see prom.h). */
#include <math.h>

#include "prom.h"

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
