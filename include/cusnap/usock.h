/* SPDX-License-Identifier: MIT */
/* Unix stream sockets at paths of any length. sun_path holds 107 bytes; longer
 * paths are reached through an O_PATH descriptor of their directory
 * ("/proc/self/fd/N/name"), so deep control directories and
 * /proc/PID/root/... paths still work. Every descriptor is close-on-exec. */
#ifndef CUSNAP_USOCK_H
#define CUSNAP_USOCK_H

/* Bind and listen at path, replacing a stale socket file there. Returns the
 * listening fd or -errno. */
int usock_listen(const char *path, int backlog);
/* The same, then the socket file gets mode (e.g. 0600). */
int usock_listen_mode(const char *path, int backlog, unsigned mode);
/* Connect to path. Returns the connected fd or -errno. */
int usock_connect(const char *path);

#endif
