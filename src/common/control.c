/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "cusnap/control.h"

const char *control_dir_from_env(void)
{
	const char *d = getenv("SNAPSHOT_CONTROL_DIR");
	if (!d || !*d)
		d = getenv("DYN_SNAPSHOT_CONTROL_DIR"); /* deprecated name, still honoured */
	return d && *d ? d : CONTROL_DIR_DEFAULT;
}
