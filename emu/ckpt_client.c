/* SPDX-License-Identifier: MIT */
/* The caller side of cuCheckpointProcess*: find the target's checkpoint
 * endpoint from its observed PID alone and run one request against it. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_wire.h"
#include "cusnap/paths.h"
#include "cusnap/proc.h"
#include "cusnap/usock.h"
#include "cusnap/log.h"
#include "emu.h"

/* The id of task tid of process pid in its innermost PID namespace (the last
 * NSpid field), or -1. */
static int ns_tid(int pid, int tid)
{
	char status[96], line[256];
	snprintf(status, sizeof(status), "/proc/%d/task/%d/status", pid, tid);
	FILE *f = fopen(status, "re");
	int v = -1;
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		const char *last = strrchr(line, '\t');
		v = last ? atoi(last + 1) : -1;
		break;
	}
	if (f)
		fclose(f);
	return v;
}

/* Where pid's checkpoint server binds its socket (ckpt_server.c's
 * socket_path), as seen from here through /proc/PID/root: its CUEMU_RUN_DIR
 * or /tmp/cuemu-UID, its PID namespace's inode and its PID there. */
static int conventional_endpoint(int pid, char *out, size_t outlen)
{
	char path[64], dir[4096] = "";
	long uid = proc_status_field("/proc", pid, "Uid");
	if (!proc_environ_get(pid, "CUEMU_RUN_DIR", dir, sizeof(dir)) || !dir[0])
		snprintf(dir, sizeof(dir), "/tmp/cuemu-%ld", uid);
	struct stat ns;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", pid);
	int nspid = ns_tid(pid, pid);
	if (uid < 0 || nspid <= 0 || stat(path, &ns) < 0)
		return -ENOENT;
	int w = snprintf(out, outlen, "/proc/%d/root%s/" CKPT_SOCKET_TAG "%lu-%d.sock", pid, dir,
			 (unsigned long)ns.st_ino, nspid);
	return w > 0 && (size_t)w < outlen ? 0 : -ENAMETOOLONG;
}

/* The listening socket among inodes[0..n) whose bound name carries the cuemu
 * tag, in pid's /proc/PID/net/unix: 0 with its path in out, or -ENOENT. The
 * table is read whole, in as few read() calls as fit. */
static int listed_endpoint(int pid, const unsigned long *inodes, size_t n, char *out, size_t outlen)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/net/unix", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t cap = 1 << 16, len = 0;
	char *text = malloc(cap + 1);
	for (ssize_t got = 1; text && got > 0;) {
		if (len == cap) {
			char *grown = realloc(text, 2 * cap + 1);
			if (!grown)
				break;
			text = grown;
			cap *= 2;
		}
		got = read(fd, text + len, cap - len);
		len += got > 0 ? (size_t)got : 0;
	}
	close(fd);
	if (!text)
		return -ENOMEM;
	text[len] = '\0';
	int rc = -ENOENT;
	for (char *line = text, *next; rc == -ENOENT && line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		unsigned long flags, ino;
		char name[4200];
		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*x %*x %lx %*x %*x %lu %4199s", &flags, &ino, name) != 3)
			continue;
		if (!(flags & 0x10000) || name[0] != '/' || !strstr(name, "/" CKPT_SOCKET_TAG))
			continue; /* 0x10000: listening */
		for (size_t i = 0; i < n; i++) {
			if (inodes[i] != ino)
				continue;
			int w = snprintf(out, outlen, "/proc/%d/root%s", pid, name);
			rc = w > 0 && (size_t)w < outlen ? 0 : -ENAMETOOLONG;
			break;
		}
	}
	free(text);
	return rc;
}

/* The path, as seen from here, of pid's listening checkpoint socket: a socket
 * among pid's descriptors whose bound name carries the cuemu tag.
 *
 * /proc/PID/net/unix is a walk over the kernel's socket table that other
 * processes change while it is read: on a busy machine a socket can be
 * missing from one reading (a process holding a CUDA context then looked
 * like one without, once in a few thousand queries under the test suite's
 * load). A process with sockets whose endpoint is not listed is read again,
 * up to three times in all. */
static int find_endpoint(int pid, char *out, size_t outlen)
{
	char path[64];
	unsigned long inodes[256];
	size_t ninodes = 0;
	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d)) && ninodes < 256) {
		char link[320], target[64];
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(link, sizeof(link), "/proc/%d/fd/%s", pid, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		unsigned long ino;
		if (sscanf(target, "socket:[%lu]", &ino) == 1)
			inodes[ninodes++] = ino;
	}
	closedir(d);
	int rc = -ENOENT;
	for (int attempt = 0; rc == -ENOENT && ninodes && attempt < 3; attempt++)
		rc = listed_endpoint(pid, inodes, ninodes, out, outlen);
	return rc;
}

/* A connection to pid's checkpoint endpoint where its server binds it
 * (conventional_endpoint), if the socket listening there is pid's own (its
 * peer credentials): the descriptor, or -1. One lookup, where find_endpoint
 * reads every descriptor pid holds (4,096 imports are 4,096 links to read),
 * which remains for a server bound elsewhere (its CUEMU_RUN_DIR set after
 * exec) or a PID namespace this process cannot see into. */
static int connect_conventional(int pid)
{
	char path[4400];
	if (conventional_endpoint(pid, path, sizeof(path)) < 0)
		return -1;
	int fd = usock_connect(path);
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (fd >= 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid != pid)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* A connection to the endpoint find_endpoint finds: the descriptor, or -1
 * (none: pid has no CUDA context; any other failure is logged). */
static int connect_found(int pid)
{
	char path[4400];
	int found = find_endpoint(pid, path, sizeof(path));
	if (found == -ENOENT)
		return -1;
	if (found < 0) {
		LOG_AT(LOG_WARN, "process %d: cannot look for its checkpoint endpoint: %s", pid, strerror(-found));
		return -1;
	}
	int fd = usock_connect(path);
	if (fd < 0)
		LOG_AT(LOG_WARN, "process %d: cannot reach its checkpoint endpoint %s: %s", pid, path, strerror(-fd));
	return fd < 0 ? -1 : fd;
}

/* The observed TID of the thread whose innermost-namespace TID is nstid. */
static int observed_tid(int pid, int nstid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return nstid;
	int found = nstid;
	struct dirent *e;
	while ((e = readdir(d)))
		if (isdigit((unsigned char)e->d_name[0]) && ns_tid(pid, atoi(e->d_name)) == nstid)
			found = atoi(e->d_name);
	closedir(d);
	return found;
}

static int io_full(int fd, uint8_t *buf, size_t len, bool out, int timeout_ms)
{
	size_t done = 0;
	while (done < len) {
		struct pollfd p = {.fd = fd, .events = out ? POLLOUT : POLLIN};
		int r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -ETIMEDOUT;
		ssize_t n = out ? send(fd, buf + done, len - done, MSG_NOSIGNAL) : recv(fd, buf + done, len - done, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EPIPE;
		done += (size_t)n;
	}
	return 0;
}

static CUresult ckpt_call(int pid, enum ckpt_op op, unsigned timeout_ms, const CUcheckpointGpuPair *pairs,
			  unsigned npairs, int *value)
{
	if (pid <= 0 || npairs > CKPT_MAX_PAIRS || (npairs && !pairs))
		return CUDA_ERROR_INVALID_VALUE;
	if (!proc_is_process("/proc", pid))
		return CUDA_ERROR_INVALID_VALUE;
	int fd = connect_conventional(pid);
	if (fd < 0)
		fd = connect_found(pid);
	if (fd < 0)
		return CUDA_ERROR_NOT_INITIALIZED; /* (no CUDA context in that process, or named why) */
	struct ckpt_request r = {.op = op, .timeout_ms = timeout_ms, .npairs = npairs, .job = emu_job_caller_key()};
	for (unsigned i = 0; i < npairs; i++) {
		memcpy(r.pairs[i], pairs[i].oldUuid.bytes, 16);
		memcpy(r.pairs[i] + 16, pairs[i].newUuid.bytes, 16);
	}
	uint8_t req[CKPT_REQ_LEN + CKPT_MAX_PAIRS * CKPT_PAIR_LEN], reply[CKPT_REPLY_LEN];
	size_t len = ckpt_request_encode(&r, req);
	struct ckpt_reply got;
	/* A lock without timeout may wait as long as the target's work takes;
	 * everything else is bounded so that a stuck target cannot hang us. */
	int wait_ms = op == CKPT_OP_LOCK ? (timeout_ms ? (int)timeout_ms + 30000 : -1) : 600000;
	CUresult rc = CUDA_ERROR_OPERATING_SYSTEM;
	if (io_full(fd, req, len, true, 30000) == 0 && io_full(fd, reply, sizeof(reply), false, wait_ms) == 0 &&
	    ckpt_reply_decode(reply, &got) == 0) {
		rc = (CUresult)got.result;
		if (value)
			*value = got.value;
		/* The call returns once the target's thread is done with the request
		 * (its end closed): a checkpointer stops that thread again as soon as
		 * the call returns, and must not find it holding a connection CRIU
		 * has not seen (it refuses to dump an unknown socket). */
		uint8_t more;
		if (io_full(fd, &more, 1, false, 5000) != -EPIPE)
			LOG_AT(LOG_WARN, "process %d: its checkpoint endpoint kept request %d's connection open", pid,
			       (int)op);
	} else {
		LOG_AT(LOG_WARN, "process %d: its checkpoint endpoint did not answer request %d", pid, (int)op);
	}
	close(fd);
	return rc;
}

/* A query (the restore thread, the state): its answer in *out. */
static CUresult query(int pid, enum ckpt_op op, int *out)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	int v;
	CUresult rc = ckpt_call(pid, op, 0, NULL, 0, &v);
	if (rc == CUDA_SUCCESS)
		*out = op == CKPT_OP_TID ? observed_tid(pid, v) : v;
	return rc;
}

EMU_API CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	EMU_CALL(cuCheckpointProcessGetRestoreThreadId, query(pid, CKPT_OP_TID, tid));
}

_Static_assert(sizeof(CUprocessState) == sizeof(int), "CUprocessState is an int-sized enum");

EMU_API CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
	EMU_CALL(cuCheckpointProcessGetState, query(pid, CKPT_OP_STATE, (int *)state));
}

static bool zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

static CUresult lock(int pid, CUcheckpointLockArgs *args)
{
	if (args && (args->reserved0 || !zero(args->reserved1, sizeof(args->reserved1))))
		return CUDA_ERROR_INVALID_VALUE;
	return ckpt_call(pid, CKPT_OP_LOCK, args ? args->timeoutMs : 0, NULL, 0, NULL);
}

EMU_API CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	EMU_CALL(cuCheckpointProcessLock, lock(pid, args));
}

/* Checkpoint and unlock: arguments that are all reserved (zero). */
static CUresult reserved_args_call(int pid, const void *args, size_t size, enum ckpt_op op)
{
	if (args && !zero(args, size))
		return CUDA_ERROR_INVALID_VALUE;
	return ckpt_call(pid, op, 0, NULL, 0, NULL);
}

EMU_API CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	EMU_CALL(cuCheckpointProcessCheckpoint, reserved_args_call(pid, args, sizeof(*args), CKPT_OP_CHECKPOINT));
}

static CUresult restore(int pid, CUcheckpointRestoreArgs *args)
{
	if (args && (!zero(args->reserved, sizeof(args->reserved)) || args->reserved1))
		return CUDA_ERROR_INVALID_VALUE;
	return ckpt_call(pid, CKPT_OP_RESTORE, 0, args ? args->gpuPairs : NULL, args ? args->gpuPairsCount : 0, NULL);
}

EMU_API CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	EMU_CALL(cuCheckpointProcessRestore, restore(pid, args));
}

EMU_API CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	EMU_CALL(cuCheckpointProcessUnlock, reserved_args_call(pid, args, sizeof(*args), CKPT_OP_UNLOCK));
}
