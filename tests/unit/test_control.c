/* SPDX-License-Identifier: MIT */
/* The one rule for a workload's control directory (src/common/control.c),
 * the same for the shim, the tool and the CRIU plugin: SNAPSHOT_CONTROL_DIR,
 * else the deprecated DYN_SNAPSHOT_CONTROL_DIR, else /snapshot-control, a
 * value that is not an absolute path counting as unset. */
#include <stdlib.h>

#include "cusnap/control.h"
#include "../harness/test.h"

static void the_rule(void)
{
	CHECK_STR(control_dir_named("/a", "/b"), "/a");
	CHECK_STR(control_dir_named(NULL, "/b"), "/b");
	CHECK_STR(control_dir_named("", "/b"), "/b");
	CHECK_STR(control_dir_named("relative", "/b"), "/b");
	CHECK_STR(control_dir_named("relative", "also/relative"), CONTROL_DIR_DEFAULT);
	CHECK_STR(control_dir_named(NULL, NULL), CONTROL_DIR_DEFAULT);
}

static void from_the_environment(void)
{
	unsetenv(CONTROL_DIR_VAR);
	unsetenv(CONTROL_DIR_VAR_DEPRECATED);
	CHECK_STR(control_dir_from_env(), CONTROL_DIR_DEFAULT);
	setenv(CONTROL_DIR_VAR_DEPRECATED, "/old", 1);
	CHECK_STR(control_dir_from_env(), "/old");
	setenv(CONTROL_DIR_VAR, "/new", 1);
	CHECK_STR(control_dir_from_env(), "/new");
	setenv(CONTROL_DIR_VAR, "new", 1);
	CHECK_STR(control_dir_from_env(), "/old");
}

int main(void)
{
	test_run("the rule over two values", the_rule);
	test_run("the rule over this process's environment", from_the_environment);
	return test_done();
}
