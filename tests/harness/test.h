/* SPDX-License-Identifier: MIT */
/* The in-tree test harness: checks that print both operands, named sub-tests,
 * skip = exit 77, and helpers for multi-process tests. */
#ifndef CUSNAP_TESTS_HARNESS_TEST_H
#define CUSNAP_TESTS_HARNESS_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

extern int test_failures;
extern const char *test_current;

void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Called after each failure is printed (the e2e tests show the last command run). */
extern void (*test_fail_hook)(void);

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond))                                                        \
			test_fail(__FILE__, __LINE__, "CHECK(%s) is false", #cond); \
	} while (0)

#define CHECK_EQ(a, b)                                                                                           \
	do {                                                                                                     \
		long long a_ = (long long)(a), b_ = (long long)(b);                                              \
		if (a_ != b_)                                                                                    \
			test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld (%#llx != %#llx)", #a, #b, a_, b_, \
				  (unsigned long long)a_, (unsigned long long)b_);                               \
	} while (0)

#define CHECK_STR(a, b)                                                                                         \
	do {                                                                                                    \
		const char *a_ = (a), *b_ = (b);                                                                \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                          \
			test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", \
				  b_ ? b_ : "(null)");                                                          \
	} while (0)

/* text (NULL: none) holds needle. */
#define CHECK_CONTAINS(text, needle)                                                                 \
	do {                                                                                         \
		const char *t_ = (text), *n_ = (needle);                                             \
		if (!t_ || !strstr(t_, n_))                                                          \
			test_fail(__FILE__, __LINE__, "output lacks \"%s\":\n%s", n_, t_ ? t_ : ""); \
	} while (0)

/* call, which leaves what it printed in out, returns code and printed needle;
 * out is freed and NULL. */
#define CHECK_SAYS(out, call, code, needle)      \
	do {                                     \
		CHECK_EQ((call), (code));        \
		CHECK_CONTAINS((out), (needle)); \
		free(out);                       \
		(out) = NULL;                    \
	} while (0)

/* CUresult checks print the result's name (needs the driver's cuGetErrorName). */
const char *test_cu_name(int result);
#define CHECK_CU_EQ(expr, want)                                                                                   \
	do {                                                                                                      \
		int got_ = (int)(expr), want_ = (int)(want);                                                      \
		if (got_ != want_)                                                                                \
			test_fail(__FILE__, __LINE__, "%s: got %s (%d), want %s (%d)", #expr, test_cu_name(got_), \
				  got_, test_cu_name(want_), want_);                                              \
	} while (0)
#define CHECK_CU(expr) CHECK_CU_EQ(expr, 0)

/* Stop this test executable, counted as skipped. */
#define SKIP(...)                             \
	do {                                  \
		printf("SKIP: " __VA_ARGS__); \
		printf("\n");                 \
		exit(77);                     \
	} while (0)

/* Run fn as a named sub-test; prints ok/FAIL. */
void test_run(const char *name, void (*fn)(void));
/* Exit status for main. */
int test_done(void);

/* ---- helpers ---- */
/* Directory of this executable (for finding sibling helpers). */
const char *test_exe_dir(void);
/* A fresh empty directory under $TMPDIR or /tmp; removed by the caller if wanted. */
char *test_tempdir(const char *tag);
/* Read a whole file (NUL-terminated, malloc'ed) or NULL. */
char *test_read_file(const char *path);
/* Write a file atomically (tmp + rename). Returns 0 or -1. */
int test_write_file(const char *path, const char *text);
/* Wait up to timeout_ms for path to exist. */
bool test_wait_file(const char *path, int timeout_ms);
/* Count the lines of /proc/PID/maps containing needle. */
int test_count_maps(pid_t pid, const char *needle);
/* Count this process's open file descriptors. */
int test_count_fds(void);
/* Send/receive one FD over a Unix socket with SCM_RIGHTS. */
int test_send_fd(int sock, int fd);
int test_recv_fd(int sock);
/* waitpid with a timeout; returns the raw status, -2 when it timed out (the
 * child then killed) or -1 when it cannot be waited for. */
int test_wait_child(pid_t pid, int timeout_ms);
/* fn(arg) run in a child forked now, with CUEMU_FAULT=fault (NULL: as it is);
 * its failures are its own. Did it pass (within 30 s)? */
bool test_child_passes(const char *fault, void (*fn)(void *arg), void *arg);
/* What a status of test_wait_child means, in words ("exited 2", "was killed by
 * signal 9 (Killed)", "did not finish within 120000 ms and was killed"). */
void test_describe_status(int status, int timeout_ms, char *out, size_t len);
/* Run argv (NULL-terminated), wait up to timeout_ms, return its exit status or
 * -1; a failure (not exit 0) is described on stdout. */
int test_run_cmd(char *const argv[], const char *log_path, int timeout_ms);

/* The criu the tests use: $CRIU, else what `make test` provisioned
 * (BUILD/criu-path, else BUILD/criu/criu). Returns 0 when it is executable. */
int test_find_criu(char *out, size_t len);
/* The older CRIU make test provisions beside it (BUILD/criu-old-path, written
 * by scripts/setup-criu.sh --suite trixie): 0 with its path, or -1. */
int test_find_criu_old(char *out, size_t len);
/* The version CRIU at path prints (4.2.1 as 4002001), or -1. */
long test_criu_version(const char *criu);
/* A loop over cases that repeat one kind of check (a fault at each phase
 * boundary, at each call): is case index this pass's? The plain pass runs
 * every case, the ASan pass the even ones and the TSan pass the odd ones, so
 * that each case runs under one sanitizer per suite; CUSNAP_SWEEP_ALL=1 runs
 * every case in every pass (make sweep). The pass is tests/run.sh's TEST_PASS. */
bool test_share(size_t index);
/* A loop over n variants of one check too slow to run every time (NCCL's 8
 * ranks in each mode): is variant index this run's? One variant per run,
 * drawn at random and printed (CUSNAP_SWEEP_OFFSET=k replays the k-th), so
 * that successive runs cover them all; CUSNAP_SWEEP_ALL=1 runs every one
 * (make sweep). what names the loop in the line printed. */
bool test_picked(const char *what, size_t index, size_t n);
/* For a test that dumps and restores with CRIU: skip it under a sanitizer,
 * without root or without CRIU; otherwise the criu into out, and this process
 * made the subreaper of the trees CRIU restores (so that it can reap them). */
void test_require_criu(char *out, size_t len);
/* Start argv[0] (a path) with extra "K=V" environment entries, in a new session,
 * stdin from /dev/null and stdout/stderr appended to log. Returns the pid. */
pid_t test_spawn(char *const argv[], char *const env[], const char *log);
/* The same, killed when this process ends however it ends (a server the
 * test runs, with no timeout of its own). */
pid_t test_spawn_tied(char *const argv[], char *const env[], const char *log);
/* Write DIR/NAME.cmd and wait for DIR/NAME.out; returns its text (malloc'ed,
 * trailing newline removed) or NULL on timeout. */
char *test_command(const char *dir, const char *name, const char *cmd, int timeout_ms);
/* Wait for DIR/NAME.ready and parse "nspid va size". Returns 0 or -1. */
int test_wait_ready(const char *dir, const char *name, int timeout_ms, int *nspid, unsigned long long *va);

#endif
