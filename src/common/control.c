/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "cusnap/control.h"

const char *control_dir_named(const char *current, const char *deprecated)
{
	if (current && current[0] == '/')
		return current;
	if (deprecated && deprecated[0] == '/')
		return deprecated;
	return CONTROL_DIR_DEFAULT;
}

const char *control_dir_from_env(void)
{
	return control_dir_named(getenv(CONTROL_DIR_VAR), getenv(CONTROL_DIR_VAR_DEPRECATED));
}
