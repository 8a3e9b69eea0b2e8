/* SPDX-License-Identifier: MIT */
/* The CRIU plugin's configuration file (src/criu/plugin_conf.c): what each
 * line sets, comments and blanks, and the lines refused (naming the line);
 * the file refused when others may write it or it is not a regular file; the
 * environment over the file. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/criu/plugin.h"
#include "../../src/node/group.h"
#include "../harness/test.h"
#include "cusnap/json.h"
#include "cusnap/request.h"

static void lines(void)
{
	struct plugin_conf c = {.s = settings_default()};
	char why[1024] = "";
	CHECK_EQ(plugin_conf_parse(&c, "f",
				   "# cusnap\n\n  content = native  # saved by the driver\ntimeout_ms=2500\n"
				   "control_dir = /snapshot-control\r\nlibcuda = /usr/lib/libcuda.so.1\n"
				   "cuda.device-map = 0=1,1=0\n",
				   why, sizeof(why)),
		 0);
	CHECK_EQ(c.s.content, PROTO_CONTENT_NATIVE);
	CHECK_EQ(c.s.timeout_ms, 2500);
	CHECK_STR(c.s.control_dir, "/snapshot-control");
	CHECK_STR(c.s.libcuda, "/usr/lib/libcuda.so.1");
	CHECK_STR(c.s.device_map, "0=1,1=0"); /* (CRIU's plugin option spelling) */
	CHECK_EQ(plugin_conf_parse(&c, "f", "device_map=auto", why, sizeof(why)), 0);
	CHECK_STR(c.s.device_map, "auto");
	/* A group's settings under the tool's option names (DESIGN.md §16). */
	CHECK_EQ(plugin_conf_parse(&c, "f",
				   "group = tp16\nmembers = node-b,node-a\nmember = node-a\n"
				   "etcd = https://etcd:2379\netcd-cacert = /etc/cusnap/ca.crt\n"
				   "etcd-user = node\netcd-password-file = /etc/cusnap/etcd.pw\ngroup-timeout = "
				   "60000\n",
				   why, sizeof(why)),
		 0);
	CHECK_STR(c.s.group, "tp16");
	CHECK_STR(c.s.etcd_cacert, "/etc/cusnap/ca.crt");
	CHECK_EQ(c.s.group_timeout_ms, 60000);
	struct group_spec spec;
	CHECK_EQ(group_spec_from(&c.s, 42, NULL, &spec, why, sizeof(why)), 1);
	CHECK_STR(spec.member_names, "node-a,node-b"); /* (one job in any order) */
	CHECK_EQ(spec.members, 2);
	CHECK_STR(spec.auth.password_file, "/etc/cusnap/etcd.pw");
	CHECK(spec.auth.cert == NULL);
	struct settings bare = settings_default();
	snprintf(bare.etcd, sizeof(bare.etcd), "http://e:2379");
	CHECK_EQ(group_spec_from(&bare, 42, NULL, &spec, why, sizeof(why)), -1); /* (etcd without a group) */
	CHECK_CONTAINS(why, "go with a group");
	snprintf(bare.group, sizeof(bare.group), "g");
	snprintf(bare.members, sizeof(bare.members), "a,,b");
	CHECK_EQ(group_spec_from(&bare, 42, NULL, &spec, why, sizeof(why)), -1);
	CHECK_CONTAINS(why, "members a,,b");

	static const struct {
		const char *text, *says;
	} bad[] = {
		{"content = gpu\n", "f: line 1: content = gpu: use host, file or native"},
		{"\n# x\ntimeout_ms = 0\n", "f: line 3: timeout_ms = 0"},
		{"timeout_ms = 12s\n", "f: line 1: timeout_ms = 12s"},
		{"control_dir = relative/dir\n", "f: line 1: control_dir = relative/dir: use an absolute path"},
		{"content host\n", "f: line 1: \"content host\" is not key = value"},
		{"device_map = everything\n", "f: line 1: device_map = everything: use auto, or OLD=NEW pairs"},
		{"devices = auto\n", "f: line 1: unknown setting \"devices\""},
		{"content = host\n# later\ncontent = native\n", "f: line 3: content is set again (first on line 1)"},
		{"device_map = auto\ncuda.device-map = 0=1\n",
		 "f: line 2: cuda.device-map is set again (first on line 1)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct plugin_conf b = {.s = settings_default()};
		CHECK_EQ(plugin_conf_parse(&b, "f", bad[i].text, why, sizeof(why)), -1);
		CHECK_CONTAINS(why, bad[i].says);
	}
}

static void files(void)
{
	char dir[] = "/tmp/cusnap-conf-XXXXXX", path[64], why[1024];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/cusnap.conf", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(fd >= 0 && write(fd, "content = native\n", 17) == 17);
	close(fd);
	unsetenv("CUSNAP_PLUGIN_CONFIG");
	unsetenv("CUSNAP_TIMEOUT_MS");
	unsetenv("CUSNAP_CONTROL_DIR");
	unsetenv("CUSNAP_LIBCUDA");
	setenv("CUSNAP_CONTENT", "host", 1);
	struct plugin_conf c;
	CHECK_EQ(plugin_conf_load(&c, dir, why, sizeof(why)), 0);
	CHECK_STR(c.path, path);
	CHECK_EQ(c.s.content, PROTO_CONTENT_HOST); /* the environment over the file */
	unsetenv("CUSNAP_CONTENT");
	CHECK_EQ(plugin_conf_load(&c, dir, why, sizeof(why)), 0);
	CHECK_EQ(c.s.content, PROTO_CONTENT_NATIVE);

	CHECK_EQ(chmod(path, 0664), 0);
	CHECK_EQ(plugin_conf_load(&c, dir, why, sizeof(why)), -1);
	CHECK_CONTAINS(why, "writable by no one else");
	CHECK_EQ(c.s.content, 0); /* nothing of it is used: the default, not its native */
	CHECK_EQ(settings_content(&c.s, true), PROTO_CONTENT_FILE);  /* (a checkpoint's default) */
	CHECK_EQ(settings_content(&c.s, false), PROTO_CONTENT_HOST); /* (a suspend's) */
	CHECK_EQ(chmod(path, 0644), 0);

	char link[80];
	snprintf(link, sizeof(link), "%s/link.conf", dir);
	CHECK_EQ(symlink(path, link), 0);
	setenv("CUSNAP_PLUGIN_CONFIG", link, 1);
	CHECK_EQ(plugin_conf_load(&c, NULL, why, sizeof(why)), -1); /* never through a symlink */
	setenv("CUSNAP_PLUGIN_CONFIG", "/nonexistent/cusnap.conf", 1);
	CHECK_EQ(plugin_conf_load(&c, NULL, why, sizeof(why)), -1); /* one named must be there */
	CHECK_CONTAINS(why, "no such file");
	unsetenv("CUSNAP_PLUGIN_CONFIG");
	setenv("CUSNAP_TIMEOUT_MS", "-4", 1);
	CHECK_EQ(plugin_conf_load(&c, dir, why, sizeof(why)), -1);
	CHECK_CONTAINS(why, "CUSNAP_TIMEOUT_MS");
	unsetenv("CUSNAP_TIMEOUT_MS");
	unlink(link);
	unlink(path);
	rmdir(dir);
}

/* The rows of settings.def reach the file and the environment alike: every
 * bound, its limits, flags, byte suffixes; an environment given as an array
 * (the node library reads none itself); the help names each key. */
static void rows(void)
{
	struct plugin_conf c = {.s = settings_default()};
	char why[1024] = "";
	CHECK_EQ(c.s.native_timeout_ms, 300000);
	CHECK_EQ(c.s.criu_log_max, 1LL << 30);
	CHECK_EQ(plugin_conf_parse(&c, "f",
				   "native_timeout_ms = 600\nnative_parallel = 1\ncriu_timeout_ms = 0\n"
				   "criu_log_max = 8M\nrequire_interposer = yes\njob_file = /run/job\n",
				   why, sizeof(why)),
		 0);
	CHECK_EQ(c.s.native_timeout_ms, 600);
	CHECK_EQ(c.s.native_parallel, 1);
	CHECK_EQ(c.s.criu_log_max, 8LL << 20);
	CHECK(c.s.require_interposer);
	CHECK_STR(c.s.job_file, "/run/job");
	static const char *const bad[][2] = {
		{"native_parallel = 5000\n", "use a whole number, 0 to 4096"},
		{"criu_log_max = 1024\n", "use bytes (K, M, G suffixes), 4096 to"},
		{"criu_log_max = 2048G\n", "use bytes"},
		{"require_interposer = maybe\n", "use yes or no"},
		{"criu = /usr/sbin/criu\n", "unknown setting \"criu\""}, /* (an option and a variable only) */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct plugin_conf b = {.s = settings_default()};
		CHECK_EQ(plugin_conf_parse(&b, "f", bad[i][0], why, sizeof(why)), -1);
		CHECK_CONTAINS(why, bad[i][1]);
	}
	struct settings s = settings_default();
	char *env[] = {"CRIU=/opt/criu", "CUSNAP_NATIVE_PARALLEL=3", "CUSNAP_CONTENT=", "PATH=/bin", NULL};
	CHECK_EQ(settings_environment(&s, env, why, sizeof(why)), 0);
	CHECK_STR(s.criu, "/opt/criu");
	CHECK_EQ(s.native_parallel, 3);
	CHECK_EQ(s.content, 0); /* (empty: not set) */
	char *wrong[] = {"CUSNAP_CRIU_TIMEOUT_MS=soon", NULL};
	CHECK_EQ(settings_environment(&s, wrong, why, sizeof(why)), -1);
	CHECK_CONTAINS(why, "CUSNAP_CRIU_TIMEOUT_MS=soon: use milliseconds");
	char *help = NULL;
	size_t hlen = 0;
	FILE *f = open_memstream(&help, &hlen);
	settings_help(f);
	fclose(f);
	CHECK_CONTAINS(help, "plugin: native_timeout_ms = MS  env: CUSNAP_NATIVE_TIMEOUT_MS");
	CHECK_CONTAINS(help, "--timeout MS  plugin: timeout_ms = MS");
	free(help);
}

/* The plugin's image: written and read back whole; none there; refused when
 * it is not this plugin's form or lacks what a restore needs. */
static void image(void)
{
	char dir[] = "/tmp/cusnap-image-XXXXXX", why[1024] = "", path[64];
	CHECK(mkdtemp(dir) != NULL);
	struct plugin_image im = {.content = PROTO_CONTENT_NATIVE,
				  .vmm = true,
				  .control_dir = "/snapshot-control",
				  .control_dir_here = "/run/ctl",
				  .cuda_processes = 3,
				  .gpus = json_pack("[s]", "GPU-00000000-0000-0000-0000-000000000001")},
			    back;
	CHECK_EQ(plugin_image_read(dir, &back, why, sizeof(why)), 0);
	CHECK_EQ(plugin_image_write(dir, &im, why, sizeof(why)), 0);
	CHECK_EQ(plugin_image_read(dir, &back, why, sizeof(why)), 1);
	CHECK_EQ(back.content, PROTO_CONTENT_NATIVE);
	CHECK(back.vmm);
	CHECK_STR(back.control_dir, "/snapshot-control");
	CHECK_STR(back.control_dir_here, "/run/ctl");
	CHECK_EQ(back.cuda_processes, 3);
	CHECK(json_equal(back.gpus, im.gpus));
	plugin_image_free(&back);
	plugin_image_free(&im);
	snprintf(path, sizeof(path), "%s/" PLUGIN_IMAGE, dir);
	static const char *const bad[][2] = {
		{"{\"cusnap_plugin\": 2, \"content\": \"host\", \"control_dir\": \"/c\", \"gpus\": []}", "form"},
		{"{\"cusnap_plugin\": 1, \"content\": \"host\", \"gpus\": []}", "control_dir"},
		{"{\"cusnap_plugin\": 1, \"content\": \"warm\", \"control_dir\": \"/c\", \"gpus\": []}", "content"},
		{"{\"cusnap_plugin\": 1, \"content\": \"host\", \"control_dir\": \"/c\"}", "GPU"},
		{"{\"cusnap_plugin\": 1,", PLUGIN_IMAGE},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f = fopen(path, "w");
		CHECK(f != NULL);
		if (f) {
			fputs(bad[i][0], f);
			fclose(f);
		}
		CHECK_EQ(plugin_image_read(dir, &back, why, sizeof(why)), -1);
		CHECK_CONTAINS(why, bad[i][1]);
	}
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_run("plugin configuration: each setting, comments, lines refused by number", lines);
	test_run("plugin configuration file: trusted files only, the environment over it", files);
	test_run("settings.def's rows: every bound from the file, an environment array, the help", rows);
	test_run("the plugin's image: written and read back, other forms refused", image);
	return test_done();
}
