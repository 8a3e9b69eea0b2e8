# SPDX-License-Identifier: MIT
# cusnap — build, test and demo. See README.md.
#   make demo       install what it needs, build, provision CRIU, run `cusnap demo`
#   make            build every artifact into $(BUILD)/
#   make test       install what the suite needs, run it, then again under ASan+UBSan and TSan
#   make SANITIZE=address,undefined BUILD=build-asan   a sanitizer build
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
# Compile jobs for `make test`'s three builds (the machine's cores).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CC ?= gcc
SANITIZE ?=

CUDA_H := $(CUDA_HOME)/include/cuda.h
ifeq ($(wildcard $(CUDA_H)),)
$(error cuda.h not found at $(CUDA_H): set CUDA_HOME to the CUDA toolkit whose include/cuda.h cusnap must be compiled against)
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
ifneq ($(CI),)
WARN += -Werror
endif
# A sanitizer build at -O1 (their documented level for usable speed): it
# compiles in about 60 % of the CPU time of -O2, which the suite's two
# sanitizer builds feel; the plain build keeps -O2 and its warnings.
ifneq ($(SANITIZE),)
CFLAGS ?= -O1 -g
endif
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c17 -D_GNU_SOURCE -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) -Iinclude -I$(CUDA_HOME)/include
LDLIBS := -lpthread
# jansson, linked statically into the tools and tests (never the shim or cuemu).
JSON_LIBS := -l:libjansson.a
ifneq ($(SANITIZE),)
ALL_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

COMMON_SRC := $(wildcard src/common/*.c)
EMU_SRC := $(wildcard emu/*.c)
EMU := $(BUILD)/emu/libcuda.so.1
SHIM_SRC := $(wildcard src/shim/*.c)
SHIM := $(BUILD)/lib/libsnapshot_cuda_vmm.so
LAUNCH := $(BUILD)/bin/snapshot-cuda-vmm-launch
COORD_LIB_SRC := $(filter-out src/coordinator/main.c,$(wildcard src/coordinator/*.c))
COORD := $(BUILD)/bin/snapshot-cuda-vmm
CUSNAP := $(BUILD)/bin/cusnap
# The project's CUDA runtime (DESIGN.md §15): what clients' host code calls, over the driver.
CUDART_SRC := $(wildcard src/cudart/*.c)
CUDART := $(BUILD)/lib/libcudart.so.13
# NCCL on cuemu (DESIGN.md §15): the NVML subset NCCL calls, and cuemu's topology for NCCL.
NVML := $(BUILD)/lib/libnvidia-ml.so.1
TOPO := $(BUILD)/bin/cuemu-topo
# NCCL 2.28.9 from its source, for the emulator (scripts/build-nccl.sh; built
# once, kept while its stamp holds), and the NCCL workload of the e2e tests.
NCCL_STAMP := $(BUILD)/nccl/.stamp
NCCL_GROUP := $(BUILD)/examples/nccl_group
# The node library (src/node/node.h): a tree on this node, the native steps,
# freeze and recovery, jobs, control files, CRIU. Linked by cusnap and the plugin.
NODE_SRC := $(wildcard src/node/*.c)
NODE_LIB = $(BUILD)/lib/libcusnap-node.a
# The CRIU plugin: the node library under CRIU's hooks.
PLUGIN := $(BUILD)/lib/criu/cusnap_plugin.so
PLUGIN_SRC := $(wildcard src/criu/*.c)
# src/common as a static library: each binary links only the objects it uses
# (the shim carries none of the tools' JSON, state-file or manifest code).
COMMON_LIB = $(BUILD)/lib/libcusnap-common.a

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(wildcard tests/unit/*.c))
EMU_TESTS := $(patsubst tests/emu/%.c,$(BUILD)/tests/emu/%,$(filter-out tests/emu/fake_runtime.c,$(wildcard tests/emu/*.c)))
SHIM_TESTS := $(patsubst tests/shim/%.c,$(BUILD)/tests/shim/%,$(wildcard tests/shim/*.c))
E2E_TESTS := $(patsubst tests/e2e/%.c,$(BUILD)/tests/e2e/%,$(wildcard tests/e2e/*.c))
CUDART_TESTS := $(patsubst tests/cudart/%.c,$(BUILD)/tests/cudart/%,$(wildcard tests/cudart/*.c)) \
	$(patsubst tests/cudart/%.cu,$(BUILD)/tests/cudart/test_%,$(wildcard tests/cudart/*.cu))
SHIM_TEST_EXTRA := $(BUILD)/tests/emu/fake_runtime/libcudart.so.13 $(BUILD)/tests/criu/cuda_plugin.so $(BUILD)/tests/criu/check_zdtm $(BUILD)/tests/criu/check_podman $(BUILD)/tests/check_format $(BUILD)/tests/check_fault_names $(BUILD)/tests/check_readme $(BUILD)/tests/shim/check_exports $(BUILD)/tests/shim/check_launcher \
	$(BUILD)/tests/shim/check_resolver_mutation \
	$(BUILD)/tests/gpu/check_gpu_build $(BUILD)/tests/nsrun_helper
# The test harness and the helpers the tests share (tests/harness/*.c), as an
# archive: each test links the objects it uses.
HARNESS := $(BUILD)/lib/libtest-harness.a

.PHONY: all tests test check clean deps criu help bench bench-datapath bench-group bench-two-nodes install demo gpu-build gpu-bundle fuzz sweep nccl zdtm
# Keep objects of chained pattern rules (no needless rebuilds).
.SECONDARY:
.DEFAULT_GOAL := all

EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

all: $(EMU) $(BUILD)/emu/libcuda.so $(SHIM) $(LAUNCH) $(COORD) $(CUSNAP) $(PLUGIN) $(CUDART) $(NVML) $(TOPO) $(EXAMPLES)

help:
	@sed -n '2,7p' Makefile

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/gen/emu_errors.h: $(CUDA_H) emu/errors.awk
	@mkdir -p $(dir $@)
	awk -f emu/errors.awk $(CUDA_H) > $@.tmp && mv $@.tmp $@

# Test code builds paths from directories of unknown length into fixed buffers
# on purpose (a truncated path fails the test visibly).
$(BUILD)/obj/tests/%.o: ALL_CFLAGS += -Wno-format-truncation

$(BUILD)/gen/cudart_errors.h: $(CUDA_HOME)/include/driver_types.h src/cudart/errors.awk
	@mkdir -p $(dir $@)
	awk -f src/cudart/errors.awk $< > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/src/cudart/driver.o: $(BUILD)/gen/cudart_errors.h
$(BUILD)/obj/src/cudart/%.o: ALL_CFLAGS += -I$(BUILD)/gen

# No libcuda at link time: the driver is loaded (dlopen) and resolved by name and version.
$(CUDART): $(CUDART_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libcudart.so.13 -Wl,-z,defs $(LDFLAGS) -o $@ $^ $(LDLIBS) -ldl
	ln -sf libcudart.so.13 $(BUILD)/lib/libcudart.so

# `make nccl`: NCCL (a few minutes the first time) and examples/nccl/nccl_group.
nccl: $(NCCL_GROUP)

$(NCCL_STAMP): $(CUDART) scripts/build-nccl.sh
	@scripts/build-nccl.sh $(BUILD)
	@touch $@

$(NCCL_GROUP): examples/nccl/nccl_group.c $(NCCL_STAMP) $(CUDART) $(NVML) $(TOPO)
	@mkdir -p $(dir $@)
	$(CC) -I$(BUILD)/nccl/include $(ALL_CFLAGS) -Wno-strict-prototypes -o $@ $< -L$(BUILD)/nccl/lib -lnccl -L$(BUILD)/lib -lcudart \
		-Wl,-rpath,'$$ORIGIN/../nccl/lib:$$ORIGIN/../lib' $(LDFLAGS) -ldl

$(NVML): $(BUILD)/obj/src/nvml/nvml.o
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,defs $(LDFLAGS) -o $@ $^

$(TOPO): $(BUILD)/obj/src/tools/cuemu_topo.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

$(BUILD)/obj/emu/init.o: $(BUILD)/gen/emu_errors.h
$(BUILD)/obj/emu/%.o: ALL_CFLAGS += -I$(BUILD)/gen

$(COMMON_LIB): $(COMMON_SRC:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(HARNESS): $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/harness/*.c))
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(NODE_LIB): $(NODE_SRC:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(EMU): $(EMU_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,-z,defs -Wl,-Bsymbolic-functions $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The shim: no libcuda/libcudart at link time; exports exactly wrapped.def + dlsym.
$(BUILD)/gen/exports.map: src/shim/exports.map.in src/shim/wrapped.def
	@mkdir -p $(dir $@)
	$(CC) -E -P -x c -Isrc/shim $< > $@.tmp && mv $@.tmp $@

$(SHIM): $(SHIM_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB) $(BUILD)/gen/exports.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libsnapshot_cuda_vmm.so -Wl,-z,defs -Wl,--version-script=$(BUILD)/gen/exports.map \
		$(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(LDLIBS)

$(LAUNCH): $(BUILD)/obj/src/launch/launch.o $(BUILD)/obj/src/common/paths.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

$(COORD): $(BUILD)/obj/src/coordinator/main.o $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# etcd.c loads libcurl (Debian's) when a group of several nodes first needs it.
$(CUSNAP): $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard src/cusnap/*.c)) $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

# CRIU loads it: every symbol resolved at link time (-z defs) but CRIU's own
# (criu_get_image_dir, print_on_level), which the plugin declares weak; jansson
# dynamically (its static archive is not position-independent).
$(PLUGIN): $(PLUGIN_SRC:%.c=$(BUILD)/obj/%.o) $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,cusnap_plugin.so -Wl,-z,defs $(LDFLAGS) -o $@ $^ -ljansson $(LDLIBS) -ldl

# A libcudart that is not the project's: cuemu refuses cuInit beside it (test_client_api).
$(BUILD)/tests/emu/fake_runtime/libcudart.so.13: $(BUILD)/obj/tests/emu/fake_runtime.o
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libcudart.so.13 $(LDFLAGS) -o $@ $^

# test_criu_plugin's stand-in for CRIU's own CUDA plugin.
$(BUILD)/tests/criu/cuda_plugin.so: $(BUILD)/obj/tests/criu/fake_cuda_plugin.o
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -o $@ $^

# Examples are CUDA programs: linked against libcuda (cuemu in the build tree;
# the driver's own on a GPU node, found first through LD_LIBRARY_PATH or ldconfig).
$(BUILD)/examples/%: $(BUILD)/obj/examples/%.o $(BUILD)/emu/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD)/emu -lcuda $(LDLIBS)

$(BUILD)/emu/libcuda.so: $(EMU)
	ln -sf libcuda.so.1 $@

$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(HARNESS) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# Device maps, parsed alone (devmap.c asks the driver through native.c).
$(BUILD)/tests/unit/test_devmap: $(BUILD)/obj/tests/unit/test_devmap.o $(BUILD)/obj/src/node/devmap.o $(BUILD)/obj/src/node/native.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

# The CRIU plugin's configuration file and its image, alone (the group's
# settings read through the node library).
$(BUILD)/tests/unit/test_plugin_conf: $(BUILD)/obj/tests/unit/test_plugin_conf.o $(BUILD)/obj/src/criu/plugin_conf.o $(BUILD)/obj/src/criu/plugin_image.o $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

# The record of a checkpoint's sockets, through the node library.
$(BUILD)/tests/unit/test_inet_record: $(BUILD)/obj/tests/unit/test_inet_record.o $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

# CRIU's version as cusnap asks it, through the node library.
$(BUILD)/tests/unit/test_criu_version: $(BUILD)/obj/tests/unit/test_criu_version.o $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

# The group's records in etcd, alone.
$(BUILD)/tests/unit/test_group_codec: $(BUILD)/obj/tests/unit/test_group_codec.o $(BUILD)/obj/src/node/group_codec.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# What cusnap sends etcd and reads back, alone.
$(BUILD)/tests/unit/test_etcd_wire: $(BUILD)/obj/tests/unit/test_etcd_wire.o $(BUILD)/obj/src/node/etcd_wire.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# cuemu's checkpoint protocol, alone.
$(BUILD)/tests/unit/test_ckpt_wire: $(BUILD)/obj/tests/unit/test_ckpt_wire.o $(BUILD)/obj/emu/ckpt_wire.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# The node library's sequence of steps, alone (with its voice).
$(BUILD)/tests/unit/test_steps: $(BUILD)/obj/tests/unit/test_steps.o $(BUILD)/obj/src/node/steps.o $(BUILD)/obj/src/node/report.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -lpthread

# The node library's voice, alone.
$(BUILD)/tests/unit/test_voice: $(BUILD)/obj/tests/unit/test_voice.o $(BUILD)/obj/src/node/report.o $(HARNESS) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -lpthread

# Emulator tests link cuemu directly (the only things that link libcuda at build time).
$(BUILD)/tests/emu/%: $(BUILD)/obj/tests/emu/%.o $(HARNESS) $(COMMON_LIB) $(BUILD)/emu/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) -L$(BUILD)/emu -lcuda -Wl,-rpath,'$$ORIGIN/../../emu' $(LDLIBS)

# Shim tests run under the launcher (they re-exec themselves) over cuemu.
$(BUILD)/tests/shim/%: $(BUILD)/obj/tests/shim/%.o $(HARNESS) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB) $(BUILD)/emu/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) -L$(BUILD)/emu -lcuda -Wl,-rpath,'$$ORIGIN/../../emu' $(JSON_LIBS) $(LDLIBS)

# End-to-end tests drive the built tools as a user would; they link no driver.
$(BUILD)/tests/e2e/%: $(BUILD)/obj/tests/e2e/%.o $(HARNESS) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(JSON_LIBS) $(LDLIBS) -ldl

# Runtime tests link the project's runtime (which loads cuemu as libcuda.so.1).
$(BUILD)/tests/cudart/%: $(BUILD)/obj/tests/cudart/%.o $(HARNESS) $(CUDART) $(EMU)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) -L$(BUILD)/lib -lcudart -Wl,-rpath,'$$ORIGIN/../../lib' $(LDLIBS)

# A CUDA program nvcc compiles (its host stubs register and launch through the
# runtime's entry points), linked with the project's runtime, never the toolkit's.
$(BUILD)/tests/cudart/test_%: tests/cudart/%.cu $(CUDART) $(EMU)
	@mkdir -p $(dir $@)
	@if [ -n "$(SANITIZE)" ]; then \
		printf '#!/bin/sh\necho "SKIP: nvcc-built program, not instrumented ($(SANITIZE))"\nexit 77\n' > $@ && chmod +x $@; \
	elif [ -x "$(NVCC)" ]; then \
		echo "$(NVCC) $<"; \
		$(NVCC) -arch=sm_90 -cudart none -o $@ $< -L$(BUILD)/lib -lcudart -Xlinker -rpath='$$ORIGIN/../../lib'; \
	else printf '#!/bin/sh\necho "SKIP: no nvcc at $(NVCC)"\nexit 77\n' > $@ && chmod +x $@; fi

# tests/run.sh runs the CRIU programs in namespaces of their own through it.
$(BUILD)/tests/nsrun_helper: tests/nsrun.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $<

$(BUILD)/tests/check_%: tests/check_%.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

$(BUILD)/tests/gpu/check_%: tests/gpu/check_%.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

$(BUILD)/tests/shim/check_%: tests/shim/check_%.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

$(BUILD)/tests/criu/check_%: tests/criu/check_%.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

# libFuzzer targets (clang only, in the plain build: they carry their own ASan).
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CC ?= clang
ifeq ($(SANITIZE),)
ifneq ($(shell command -v $(FUZZ_CC) 2>/dev/null),)
FUZZ_BINS := $(foreach t,$(FUZZ_TARGETS),$(BUILD)/tests/fuzz/fuzz_$(t)_helper)
endif
FUZZ_SCRIPTS := $(foreach t,$(FUZZ_TARGETS),$(BUILD)/tests/fuzz/test_fuzz_$(t))
endif

$(BUILD)/tests/fuzz/fuzz_%_helper: tests/fuzz/fuzz_%.c $(COMMON_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c17 -D_GNU_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-Iinclude -I$(CUDA_HOME)/include -o $@ $^ $(JSON_LIBS) -lpthread

$(BUILD)/tests/fuzz/test_fuzz_%: tests/fuzz/run_fuzz.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

# Every libFuzzer target for FUZZ_SECONDS seconds each (the suite runs them briefly).
FUZZ_SECONDS ?= 60
fuzz: tests
	@FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh $(BUILD)

# Every countdown fault sweep in full (tests/e2e/sweep.h): each command x content
# mode x role, multicast groups too, CRIU included. `make test` runs a share of
# it, another each run (tests/e2e/sweep.h).
# CRIU's own static tests (zdtm, from the source of the CRIU in use) with
# cusnap's plugin loaded, all 40 (scripts/zdtm.sh; make test runs twelve).
zdtm: deps all
	@scripts/zdtm.sh --all $(BUILD)

sweep: deps
	$(MAKE) tests
	@scripts/setup-criu.sh $(BUILD) > $(BUILD)/criu-path 2> $(BUILD)/criu-setup.log || echo "CRIU unavailable: the checkpoint and restore sweeps will skip"
	@start=$$(date +%s); for t in test_sweep_suspend test_sweep_multicast test_sweep_ipc test_sweep_checkpoint; do \
		log=$(BUILD)/sweep-$$t.log; CUSNAP_SWEEP_ALL=1 TEST_ONLY=countdown $(BUILD)/tests/e2e/$$t >$$log 2>&1; rc=$$?; \
		grep -E '^(ok|FAIL|SKIP)|fault cases' $$log; \
		[ $$rc = 0 ] || [ $$rc = 77 ] || { echo "make sweep: $$t failed (see $$log)"; exit 1; }; \
	done; \
	if $(MAKE) -s nccl >/dev/null 2>&1; then \
		CUSNAP_SWEEP_ALL=1 TESTS_ONLY='^e2e/test_nccl$$' tests/run.sh $(BUILD) nccl-all || exit 1; \
	else echo "make sweep: NCCL not built (make nccl): its variants not run"; fi; \
	echo "make sweep: passed in $$(( $$(date +%s) - start )) s"

# Benchmarks print figures; they are never part of the pass/fail suite.
bench: $(BUILD)/bench/intercept $(BUILD)/bench/lifecycle $(BUILD)/bench/copy $(BUILD)/bench/gate $(BUILD)/bench/lc_worker all
	$(BUILD)/bench/intercept
	$(BUILD)/bench/lifecycle
	$(BUILD)/bench/copy
	$(BUILD)/bench/gate

# The bytes of a checkpoint and a restore, leg by leg, against CRIU's floor
# (root; minutes: BENCH_SIZES, BENCH_PLACES, BENCH_CONTENTS narrow it).
bench-datapath: $(BUILD)/bench/hold all
	@BUILD=$(BUILD) bench/datapath.sh

$(BUILD)/bench/hold: $(BUILD)/obj/bench/hold.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

$(BUILD)/bench/lifecycle: $(BUILD)/obj/bench/lifecycle.o $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS)

# The longest gap of a TCP stream between two simulated nodes across a group
# checkpoint and restore, together and staggered (root; CRIU, etcd).
bench-two-nodes: tests
	@BUILD=$(BUILD) bench/two_nodes.sh

# A group's barrier in etcd, phase by phase, with 2, 4 and 8 members (an etcd
# started for it by bench/group_barrier.sh: scripts/setup-etcd.sh).
bench-group: $(BUILD)/bench/group_barrier
	@BUILD=$(BUILD) bench/group_barrier.sh

$(BUILD)/bench/group_barrier: $(BUILD)/obj/bench/group_barrier.o $(NODE_LIB) $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(JSON_LIBS) $(LDLIBS) -ldl

$(BUILD)/bench/copy: $(BUILD)/obj/bench/copy.o $(COORD_LIB_SRC:%.c=$(BUILD)/obj/%.o) $(COMMON_LIB) $(BUILD)/emu/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter-out %.so,$^) $(JSON_LIBS) -L$(BUILD)/emu -lcuda -Wl,-rpath,'$$ORIGIN/../emu' $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/emu/libcuda.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD)/emu -lcuda -Wl,-rpath,'$$ORIGIN/../emu' $(LDLIBS)

tests: all $(UNIT_TESTS) $(EMU_TESTS) $(SHIM_TESTS) $(E2E_TESTS) $(CUDART_TESTS) $(SHIM_TEST_EXTRA) $(FUZZ_BINS) $(FUZZ_SCRIPTS)

deps:
	@scripts/deps.sh

criu:
	@scripts/setup-criu.sh $(BUILD)

# The main job: the example process group checkpointed with CRIU, killed and
# restored, on cuemu when there is no GPU (DEMO_ARGS, e.g. --in-place, --processes 4).
demo: deps
	$(MAKE) all
	@scripts/setup-criu.sh $(BUILD) >/dev/null || { echo "make demo: no working CRIU (see above)"; exit 69; }
	$(BUILD)/bin/cusnap demo $(DEMO_ARGS)

# The whole suite, then the same suite built with ASan+UBSan (CRIU tests skip there).
test: deps
	@rm -f build/test-results build-asan/test-results build-tsan/test-results
	$(MAKE) -j$(JOBS) tests
	@# NCCL builds (about 380 s of CPU, the first time) in the background, at the
	@# lowest priority, from here on: while CRIU, etcd and zdtm's source are
	@# fetched and while the suite runs; its test runs last (scripts/wait-nccl.sh
	@# gives the build back its normal priority once the passes are done).
	@rm -f build/nccl-status; (nice -n 19 scripts/build-nccl.sh build > build/nccl-make.log 2>&1; \
		echo $$? > build/nccl-status) & echo $$! > build/nccl-pid
	-@scripts/setup-criu.sh build > build/criu-path 2> build/criu-setup.log || { echo "CRIU unavailable (see build/criu-setup.log): CRIU tests will skip"; cat build/criu-setup.log; }
	@# CRIU 4.1.1 beside it: the plugin must load in both (test_criu_plugin).
	-@scripts/setup-criu.sh --suite trixie build > build/criu-old-path 2>> build/criu-setup.log || { echo "Debian trixie's CRIU unavailable: the plugin is checked in one CRIU only"; rm -f build/criu-old-path; }
	-@scripts/setup-etcd.sh build > build/etcd-path 2> build/etcd-setup.log || { echo "etcd unavailable (see build/etcd-setup.log): the group tests will skip"; cat build/etcd-setup.log; }
	-@scripts/setup-node-exporter.sh build > build/node-exporter-path 2> build/node-exporter-setup.log || { echo "node_exporter unavailable (see build/node-exporter-setup.log): the metrics scrape will skip"; cat build/node-exporter-setup.log; }
	@# zdtm runs in a network namespace with the loopback only: its source first.
	-@scripts/zdtm.sh --prepare build > build/zdtm-prepare.log 2>&1 || { echo "zdtm not prepared (see build/zdtm-prepare.log): check_zdtm will say why"; tail -n 3 build/zdtm-prepare.log; }
	TESTS_SKIP='^e2e/test_nccl(_nodes)?$$' tests/run.sh build plain || true
	$(MAKE) -j$(JOBS) tests BUILD=build-asan SANITIZE=address,undefined
	CUSNAP_SANITIZER=1 tests/run.sh build-asan asan || true
	$(MAKE) -j$(JOBS) tests BUILD=build-tsan SANITIZE=thread
	CUSNAP_SANITIZER=1 TSAN_OPTIONS=halt_on_error=1 tests/run.sh build-tsan tsan || true
	@scripts/wait-nccl.sh build && $(MAKE) nccl || echo "NCCL not built (build/nccl-make.log): tests/e2e/test_nccl will say why"
	TESTS_ONLY='^e2e/test_nccl(_nodes)?$$' tests/run.sh build nccl || true
	@tests/summary.sh build/test-results build-asan/test-results build-tsan/test-results

check: test

# What tests/gpu/run.sh needs on a GPU host, built here too (nvcc, no GPU needed):
# the project, the driver probe, the runtime clients, the export helper, a kernel
# workload and the copy baseline, against the real driver (loaded at run time).
NVCC ?= $(CUDA_HOME)/bin/nvcc
GPU_CFLAGS := -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I$(CUDA_HOME)/include
gpu-build: all $(BUILD)/tests/emu/target_helper
	@mkdir -p $(BUILD)/gpu
	$(CC) $(GPU_CFLAGS) -o $(BUILD)/gpu/probe tests/gpu/probe.c -ldl -lpthread
	$(CC) $(GPU_CFLAGS) -o $(BUILD)/gpu/rt_clients tests/gpu/rt_clients.c -ldl
	$(CC) $(GPU_CFLAGS) -o $(BUILD)/gpu/copy_bench tests/gpu/copy_bench.c -L$(CUDA_HOME)/lib64/stubs -lcuda
	$(CC) $(GPU_CFLAGS) -Ibench -o $(BUILD)/gpu/gate bench/gate.c -L$(CUDA_HOME)/lib64/stubs -lcuda
	@if [ -x "$(NVCC)" ]; then \
		echo "$(NVCC) tests/gpu/kernel_share.cu"; \
		$(NVCC) -O2 -std=c++17 -o $(BUILD)/gpu/kernel_share tests/gpu/kernel_share.cu -L$(CUDA_HOME)/lib64/stubs -lcuda; \
		if [ -f $(CUDA_HOME)/include/nccl.h ]; then \
			echo "$(NVCC) tests/gpu/nccl_allreduce.cu (the host's NCCL, for the GPU host only)"; \
			$(NVCC) -O2 -std=c++17 -arch=sm_90 -o $(BUILD)/gpu/nccl_allreduce tests/gpu/nccl_allreduce.cu -lnccl; \
		fi; \
	else echo "gpu-build: no nvcc at $(NVCC): kernel_share not built (run.sh skips the kernel checks)"; fi

# A lean, relocatable set for a GPU host (the device tool carries at most 64 MiB):
# the tools, the shim, the examples, the GPU programs, libcudart, and CRIU with
# its own libc. Then on the GPU host: bash build/gpu-bundle/run.sh
GPU_BUNDLE := $(BUILD)/gpu-bundle
gpu-bundle: gpu-build
	@scripts/setup-criu.sh $(BUILD) >/dev/null || echo "gpu-bundle: no CRIU (the CRIU checks will skip)"
	rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)/tests/emu $(GPU_BUNDLE)/cudart $(GPU_BUNDLE)/gpu
	cp -r $(BUILD)/bin $(BUILD)/lib $(BUILD)/examples $(GPU_BUNDLE)/
	cp $(BUILD)/gpu/probe $(BUILD)/gpu/rt_clients $(BUILD)/gpu/copy_bench $(BUILD)/gpu/gate $(GPU_BUNDLE)/gpu/
	-cp $(BUILD)/gpu/kernel_share $(GPU_BUNDLE)/gpu/ 2>/dev/null
	-cp $(BUILD)/gpu/nccl_allreduce $(GPU_BUNDLE)/gpu/ 2>/dev/null
	cp $(BUILD)/tests/emu/target_helper $(GPU_BUNDLE)/tests/emu/
	-cp -L $(CUDA_HOME)/lib64/libcudart.so.13 $(GPU_BUNDLE)/cudart/ 2>/dev/null
	cp tests/gpu/run.sh $(GPU_BUNDLE)/run.sh
	@if [ -d $(BUILD)/criu/root ]; then \
		mkdir -p $(GPU_BUNDLE)/criu && cp -a $(BUILD)/criu/root $(GPU_BUNDLE)/criu/ && \
		rm -rf $(GPU_BUNDLE)/criu/root/usr/share && \
		sed -e "s|$(abspath $(BUILD))/criu|\$$here|g" -e '2i here=$$(cd "$$(dirname "$$0")" \&\& pwd)' \
			$(BUILD)/criu/criu > $(GPU_BUNDLE)/criu/criu && chmod +x $(GPU_BUNDLE)/criu/criu; \
	fi
	@du -sh $(GPU_BUNDLE) | sed 's/^/gpu-bundle: /'

# The three contract paths of DESIGN.md §2 (PREFIX=/usr/local by default), cusnap,
# and the CRIU plugin in CRIU's own plugin directory (Debian's criu: /usr/lib/criu).
PREFIX ?= /usr/local
CRIU_PLUGIN_DIR ?= /usr/lib/criu
install: $(SHIM) $(LAUNCH) $(COORD) $(CUSNAP) $(PLUGIN)
	install -d $(DESTDIR)$(PREFIX)/lib/snapshot $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(CRIU_PLUGIN_DIR)
	install -m 0755 $(SHIM) $(DESTDIR)$(PREFIX)/lib/snapshot/libsnapshot_cuda_vmm.so
	install -m 0755 $(LAUNCH) $(DESTDIR)$(PREFIX)/bin/snapshot-cuda-vmm-launch
	install -m 0755 $(COORD) $(DESTDIR)$(PREFIX)/bin/snapshot-cuda-vmm
	install -m 0755 $(CUSNAP) $(DESTDIR)$(PREFIX)/bin/cusnap
	install -m 0644 $(PLUGIN) $(DESTDIR)$(CRIU_PLUGIN_DIR)/cusnap_plugin.so

clean:
	rm -rf build build-asan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
