/* SPDX-License-Identifier: MIT */
/* The group tests' helpers (tests/harness/group_util.c): DESIGN.md §16. */
#ifndef CUSNAP_TESTS_E2E_GROUP_UTIL_H
#define CUSNAP_TESTS_E2E_GROUP_UTIL_H

#include "e2e_util.h"

/* The etcd the members meet in (http://127.0.0.1:PORT), cusnap's extra etcd
 * flags for every member (certificates, a user; NULL-ended), its server's PID. */
extern char etcd_url[64];
extern const char *etcd_extra[12];
extern pid_t etcd_pid;
/* The address etcd_launch's etcd serves clients on (127.0.0.1 unless a test
 * names another: a bridge its simulated nodes reach). */
extern const char *etcd_host;

/* After e2e_init: where cusnap is. */
void group_util_init(void);
/* A port nothing listens on now (the kernel's pick). */
int free_port(void);
/* etcd_pid's server killed. */
void etcd_stop(void);
/* The etcd server to run (build/etcd-path, else PATH) into out; skips without one. */
void etcd_binary(char out[PATH_MAX]);
/* etcd NAME on the loopback (scheme http or https; extra: more of its flags,
 * NULL-ended), its client URL into url, started tied to this test; once
 * `cusnap inspect --group` with probe (cusnap's etcd flags) answers. */
pid_t etcd_launch(const char *name, const char *scheme, const char *const *extra, const char *const *probe,
		  char url[64]);

/* One member's command. */
struct member {
	pid_t pid;
	char log[PATH_MAX + 32];
};
/* cusnap args... --group NAME --members N --etcd URL --member NAME [etcd_extra], started. */
void member_start(struct member *m, const char *group, int members, const char *name, char *const env[],
		  const char *const args[]);
/* Its exit code (-1: did not end within 90 s); *out: what it printed (malloc'ed). */
int member_wait(struct member *m, char **out);
#define MEMBER_OK(m)                                                                                   \
	do {                                                                                           \
		char *out_;                                                                            \
		int rc_ = member_wait((m), &out_);                                                     \
		if (rc_ != 0)                                                                          \
			test_fail(__FILE__, __LINE__, "member exited %d:\n%s", rc_, out_ ? out_ : ""); \
		free(out_);                                                                            \
	} while (0)
/* cmd's arguments for g's tree (its PID, state directory, control directory). */
void tree_args(const struct group *g, const char *cmd, char pid[16], char dir[PATH_MAX + 16], const char *argv[12]);
/* cmd on g's tree in place as member name of a group of members (timeout: --group-timeout, or NULL). */
void in_place(struct member *m, const struct group *g, const char *cmd, const char *group, int members,
	      const char *name, char *const env[], const char *timeout);
/* Every CUDA process of g running and every participant active (a failure otherwise). */
void untouched(struct group *g);
/* Does pid no longer run (none, or a zombie)? */
bool gone(pid_t pid);
/* restore-complete in g's control directory. */
void restore_complete(struct group *g);
/* Trees g[0..n) as they were, let go (restore-complete), each passing its own check. */
void trees_pass(struct group *g, int n);
/* Run cmd on trees g[0..n) as one group at once (members m0, m1, ...; env[i]
 * for member i, NULL: none): exit codes into rc[], what each printed into out[]. */
void group_cmd(struct group *g, int n, const char *cmd, const char *group, char *const *env[], const char *timeout,
	       int rc[], char *out[]);
void free_all(char *out[], int n);
/* The same, each member's command to exit 0 (a failure naming it otherwise). */
void group_cmd_ok(struct group *g, int n, const char *cmd, const char *group);
/* n trees of one worker each, named TAG0, TAG1, ... */
void trees_start(struct group *g, int n, const char *tag);

/* Two simulated nodes (tests/harness/nodes_util.c): their addresses on the
 * bridge (198.18.0.1) and nsenter's option entering each one's network. */
extern const char *const node_ip[2];
extern const char *const node_ns[2];
/* The bridge (198.18.0.1) and the two nodes on it, in network and mount
 * namespaces of this test's own (the nodes' names in a /run/netns of its own),
 * etcd NAME on the bridge (etcd_url), this test the subreaper of what it
 * starts; skips where they cannot be made. */
void nodes_up(const char *name);
/* cusnap ARGS... on node i as member n<i> of group NAME (its etcd on the
 * bridge, etcd_url), started; what it prints into log. */
pid_t on_node(int i, const char *group, const char *const *args, char log[PATH_MAX + 32]);
/* Its exit code (-1: did not end within 150 s); *out: what it printed (malloc'ed). */
int node_wait(pid_t pid, const char *log, char **out);
/* Plain criu dump of the tree at pid (restore: criu restore -d) with cusnap's
 * plugin on node i, --tcp-established (CRIU's nftables lock), as member n<i> of group NAME (its
 * settings in CRIU's environment, content: CUSNAP_CONTENT), its images in
 * images (made; a restore's root PID into images/restore.pid, as cusnap's:
 * restored_root), started. */
pid_t criu_on_node(int i, bool restore, const char *criu, const char *group, pid_t pid, const char *images,
		   const char *content, char log[PATH_MAX + 32]);
/* The trees g[0] on node a and g[1] on node b dumped so as one group NAME,
 * then restored (restored_root(images[i]): node i's root). */
void criu_across_nodes(struct group g[2], const char *criu, const char *group, const char *content,
		       char images[2][PATH_MAX + 32]);
#define NODE_OK(pid, log)                                                                                  \
	do {                                                                                               \
		char *o_;                                                                                  \
		int rc_ = node_wait((pid), (log), &o_);                                                    \
		if (rc_ != 0)                                                                              \
			test_fail(__FILE__, __LINE__, "node's command exited %d:\n%s", rc_, o_ ? o_ : ""); \
		free(o_);                                                                                  \
	} while (0)

#endif
