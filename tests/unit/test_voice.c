/* SPDX-License-Identifier: MIT */
/* The node library's voice (src/node/report.c): by default lines on stderr
 * after "cusnap: "; a caller's sink gets each line whole with its level and
 * the caller's prefix (the CRIU plugin's way into CRIU's log); --quiet keeps
 * errors and warnings only; fail() keeps its error. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/node/node.h"
#include "../harness/test.h"

static char heard[8][512];
static enum voice_level levels[8];
static atomic_int nheard; /* (the ticker's thread speaks too) */

static void sink(enum voice_level level, const char *line)
{
	int n = atomic_load(&nheard);
	if (n < 8) {
		levels[n] = level;
		snprintf(heard[n], sizeof(heard[0]), "%s", line);
		atomic_store(&nheard, n + 1);
	}
}

static void sinks(void)
{
	nheard = 0;
	voice_set(sink, "plug: ");
	progress("native checkpoint", 12.5, "%d processes", 2);
	voice(VOICE_WARN, "cannot write %s", "x");
	CHECK_EQ(fail(7, "refused: %s", "why"), 7);
	CHECK_EQ(nheard, 3);
	CHECK_EQ(levels[0], VOICE_INFO);
	CHECK_CONTAINS(heard[0], "plug: native checkpoint");
	CHECK_CONTAINS(heard[0], "12.5 ms  2 processes");
	CHECK_EQ(levels[1], VOICE_WARN);
	CHECK_STR(heard[1], "plug: warning: cannot write x");
	CHECK_EQ(levels[2], VOICE_ERROR);
	CHECK_STR(heard[2], "plug: refused: why");
	CHECK_STR(report_error(), "refused: why");
	progress_quiet(true);
	voice(VOICE_INFO, "not said");
	voice(VOICE_WARN, "said");
	progress_quiet(false);
	CHECK_EQ(nheard, 4);
	CHECK_STR(heard[3], "plug: warning: said");
	/* A ticker speaks in plain lines to a sink (no terminal rewriting). */
	struct ticker *k = ticker_start("criu dump", 0, NULL, NULL);
	for (int i = 0; i < 300 && atomic_load(&nheard) < 5; i++)
		usleep(100000); /* (a line a second: the first after one) */
	ticker_stop(k);
	CHECK(nheard >= 5);
	CHECK_CONTAINS(heard[4], "plug: criu dump");
	CHECK(strchr(heard[4], '\r') == NULL);
	voice_set(NULL, NULL);
}

int main(void)
{
	test_run("a caller's sink hears every line with its level and prefix; quiet keeps errors and warnings", sinks);
	return test_done();
}
