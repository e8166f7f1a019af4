# Chorus build. `make` builds the libraries and tools; `make bench` runs chorus-bench
# allreduce on 4 local ranks; `make test` runs the quick tier of the tests (about 3 minutes),
# `make test-full` every test of the groups, `make check` everything (README, "Tests"). BUILD=dir builds elsewhere
# (several builds can share one tree); SAN=1 builds with ASan+UBSan (`make asan`).

# Every core by default: `make bench` on a fresh 2-core machine builds in half the time. A
# -j on the command line wins (`make -j1` for one job at a time); a make started by another
# make shares its parent's job slots instead.
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc
OPT     ?= -O2
SAN     ?=


CPPFLAGS += -Iinclude -Ilib -Ikernels -D_GNU_SOURCE
CFLAGS   += -std=c11 $(OPT) -g -fPIC -pthread -Wall -Wextra -Werror -Wshadow \
            -Wstrict-prototypes -Wmissing-prototypes -fno-strict-aliasing
# Paths in debug information and __FILE__ relative to the tree, so that two clones of one
# commit build the same bytes (reproducible builds; .ci/run relies on it to run each test
# once per job: tests/run_tests.sh, build_id).
CFLAGS   += -ffile-prefix-map=$(CURDIR)=.
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif

# What the build is made of (issue 16) is decided before anything compiles: configure
# installs missing packages (CHORUS_DEPS=all, min or none), detects the optional libraries
# (ucx, libibverbs, hwloc; nvcc under CUDA_HOME) and writes $(BUILD)/config.mk, rewritten
# only when its content changes. Make remakes it on every run and restarts when it
# changed; every object and program depends on it, so installing or removing a package
# rebuilds what it affects. The code that needs an absent library compiles to a stub that
# says so (CHORUS_ERR_UNSUPPORTED), and configure's summary names each one.
CUDA_HOME ?= /usr/local/cuda
CONFIG    := $(BUILD)/config.mk
# The record's rule below is the first in this file; a plain `make` must still build all.
.DEFAULT_GOAL := all
CHORUS_VERSION   := unconfigured
CHORUS_SOVERSION := unconfigured-so
ifneq ($(filter-out clean format,$(or $(MAKECMDGOALS),all)),)
include $(CONFIG)
endif
# The summary is printed once per make: not again when make restarts after writing the
# record, nor in the sub-makes of this Makefile's own recipes (CHORUS_QUIET_CONFIG=1); a
# make started from another project's make prints it like any other.
$(CONFIG): FORCE
	@BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) \
	    SUMMARY=$(if $(MAKE_RESTARTS)$(CHORUS_QUIET_CONFIG),0,1) sh tools/configure.sh
FORCE:

CPPFLAGS += $(CONFIG_CPPFLAGS)
LDLIBS   += $(CONFIG_LIBS) -lpthread -lm -lrt -ldl

LIB_SRCS  := $(sort $(wildcard kernels/*.c lib/*/*.c lib/transport/*/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
TOOL_NAMES:= chorusrun chorus-sim chorus-trace
BENCH_NAMES := chorus-bench chorus-fabric tcp-ceiling shm-floor
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
MP_SRCS   := $(sort $(wildcard tests/mp/*.c))
MP_BINS   := $(MP_SRCS:tests/mp/%.c=$(BUILD)/tests/mp_%)
EX_SRCS   := $(sort $(wildcard examples/*.c))
EX_BINS   := $(EX_SRCS:examples/%.c=$(BUILD)/examples/%)

# The shared library the usual way: libchorus.so -> libchorus.so.0 (the SONAME, the ABI's
# major version) -> libchorus.so.0.MINOR.PATCH, the version in include/chorus.h.
STATIC_LIB := $(BUILD)/lib/libchorus.a
SONAME     := libchorus.so.$(CHORUS_SOVERSION)
SHARED_REAL:= libchorus.so.$(CHORUS_VERSION)
SHARED_LIB := $(BUILD)/lib/$(SHARED_REAL)
SHARED_LINKS := $(BUILD)/lib/$(SONAME) $(BUILD)/lib/libchorus.so
BINS := $(TOOL_NAMES:%=$(BUILD)/bin/%) $(BENCH_NAMES:%=$(BUILD)/bin/%)
# pkg-config and CMake files that point into the build tree (PKG_CONFIG_PATH=build/lib/pkgconfig,
# -DChorus_DIR=build/lib/cmake/Chorus); `make install` writes the installed ones.
TREE_PC    := $(BUILD)/lib/pkgconfig/chorus.pc
TREE_CMAKE := $(BUILD)/lib/cmake/Chorus/ChorusConfig.cmake

.PHONY: all deps test test-full check unit-test bench asan valgrind install clean format
all: $(STATIC_LIB) $(SHARED_LIB) $(SHARED_LINKS) $(BINS) $(EX_BINS) $(TREE_PC) $(TREE_CMAKE)

# Installs every package (configure does so on each make too, as CHORUS_DEPS says).
deps:
	@sh tools/install-deps.sh

$(BUILD)/obj/%.o: %.c $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) -o $@ $^ $(LDLIBS)

$(SHARED_LINKS): $(SHARED_LIB)
	ln -sf $(if $(filter %/$(SONAME),$@),$(SHARED_REAL),$(SONAME)) $@

# pc and cmake files for a prefix: tools/write-pkg-files.sh DIR PREFIX LIBDIR INCLUDEDIR.
PKG_FILES_ENV = VERSION=$(CHORUS_VERSION) SOVERSION=$(CHORUS_SOVERSION) \
    REQUIRES="$(PC_REQUIRES_PRIVATE)" LIBS="$(CONFIG_LIBS) -lpthread -lm -lrt -ldl"
$(TREE_PC) $(TREE_CMAKE) &: tools/write-pkg-files.sh tools/chorus.pc.in \
        tools/ChorusConfig.cmake.in tools/ChorusConfigVersion.cmake.in $(CONFIG)
	$(PKG_FILES_ENV) sh tools/write-pkg-files.sh $(BUILD)/lib "$(abspath $(BUILD))" \
	    "$(abspath $(BUILD))/lib" "$(abspath include)"

# Each tool is the .c files of its folder, linked statically against libchorus.
$(BUILD)/bin/chorusrun: $(wildcard tools/chorusrun/*.c) $(STATIC_LIB) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

$(BUILD)/bin/chorus-sim: $(wildcard tools/chorus-sim/*.c) $(STATIC_LIB) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

$(BUILD)/bin/chorus-trace: $(wildcard tools/chorus-trace/*.c) $(STATIC_LIB) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

$(BUILD)/bin/chorus-bench: $(wildcard bench/chorus-bench/*.c bench/chorus-bench/*.h) $(STATIC_LIB) \
        $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

# chorus-fabric (issue 8); its unit tests link every part of it but main.c.
FABRIC_SRCS := $(sort $(wildcard bench/fabric/*.c))
FABRIC_PARTS := $(filter-out bench/fabric/main.c,$(FABRIC_SRCS))
$(BUILD)/bin/chorus-fabric: $(FABRIC_SRCS) $(wildcard bench/fabric/*.h) $(STATIC_LIB) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

$(BUILD)/tests/test_fabric_%: tests/unit/test_fabric_%.c $(FABRIC_PARTS) $(STATIC_LIB) \
		$(wildcard bench/fabric/*.h tests/unit/*.h) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests -Ibench/fabric $(CFLAGS) $(LDFLAGS) -o $@ $< $(FABRIC_PARTS) \
	    $(STATIC_LIB) -lcmocka $(LDLIBS)

$(BUILD)/tests/test_%: tests/unit/test_%.c $(STATIC_LIB) $(wildcard tests/unit/*.h) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) -lcmocka $(LDLIBS)

$(BUILD)/tests/mp_%: tests/mp/%.c $(STATIC_LIB) $(wildcard tests/mp/*.h) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(STATIC_LIB) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

# The tiers of tests/run_tests.sh: quick (make test), all + algo-big (make test-full), and
# check: all of it, then the big algorithm cases, full leak counts, every fault script,
# fuzzing, Slurm and mpirun on emulated hosts, installing as a user on a fresh machine, and
# the mutation check. Each ends on "N passed, N failed, N skipped".
test: all $(UNIT_BINS) $(MP_BINS)
	+@BUILD=$(BUILD) sh tests/run_tests.sh quick

test-full: all $(UNIT_BINS) $(MP_BINS)
	+@BUILD=$(BUILD) sh tests/run_tests.sh all algo-big

check: all $(UNIT_BINS) $(MP_BINS)
	+@BUILD=$(BUILD) sh tests/run_tests.sh check

unit-test: all $(UNIT_BINS)
	@BUILD=$(BUILD) sh tests/run_tests.sh unit

bench: all
	$(BUILD)/bin/chorusrun -n 4 -- $(BUILD)/bin/chorus-bench allreduce -b 8 -e 64M -f 2 -c 1

# Allreduce (ring, tree, hier) on emulated clusters of 2, 4, 8 and 16 hosts, links capped at
# 100 Mbit/s: needs root and network namespaces (tests/cluster/cluster_bench.sh --help).
.PHONY: cluster-bench
cluster-bench: all
	BUILD=$(BUILD) sh tests/cluster/cluster_bench.sh $(CLUSTER_BENCH_ARGS)

# A real Slurm (munged, slurmctld, a slurmd per host) and Open MPI's mpirun on emulated
# hosts, jobs launched with no CHORUS_* or MASTER_* variable (1 to 3 minutes): needs root,
# network namespaces and slurmd slurmctld slurm-client munge openmpi-bin; each script skips
# (77) without them. tests/cluster/slurm_test.sh --help, tests/cluster/mpirun_test.sh --help.
.PHONY: cluster-test
cluster-test: all
	@BUILD=$(BUILD) sh tests/run_tests.sh cluster

# bench/compare.sh sets Chorus next to Open MPI and Gloo. Their benchmarks (bench/mpi,
# bench/gloo) are built only where those libraries are installed, and plain `make` never
# needs them; `make compare-peers` says what it skipped and why.
MPICC          ?= mpicc.openmpi
PEER_CXXFLAGS  ?= -std=c++17 $(OPT) -g -Wall -Wextra -Werror -pthread
.PHONY: compare-peers bench-compare
compare-peers:
	@if command -v $(MPICC) >/dev/null 2>&1; then $(MAKE) --no-print-directory CHORUS_QUIET_CONFIG=1 $(BUILD)/bin/ompi-bench; \
	else echo "ompi-bench: skipped: $(MPICC) not found (apt-get install libopenmpi-dev)"; fi
	@if [ ! -f /usr/include/gloo/allreduce.h ]; then \
	    echo "gloo-bench: skipped: /usr/include/gloo not found (apt-get install libgloo-dev)"; \
	elif ! command -v $(CXX) >/dev/null 2>&1; then \
	    echo "gloo-bench: skipped: no C++ compiler $(CXX) (apt-get install g++)"; \
	else $(MAKE) --no-print-directory CHORUS_QUIET_CONFIG=1 $(BUILD)/bin/gloo-bench; fi

$(BUILD)/bin/ompi-bench: bench/mpi/ompi-bench.c bench/mpi/peer.h
	@mkdir -p $(dir $@)
	$(MPICC) -D_GNU_SOURCE $(CFLAGS) $(LDFLAGS) -o $@ $<

$(BUILD)/bin/gloo-bench: bench/gloo/gloo-bench.cc bench/mpi/peer.h
	@mkdir -p $(dir $@)
	$(CXX) -Ibench/mpi $(PEER_CXXFLAGS) $(LDFLAGS) -o $@ $< -lgloo -pthread

# The raw loopback tcp ceiling of compare.sh -t tcp: plain sockets, no libchorus on purpose.
$(BUILD)/bin/tcp-ceiling: $(wildcard bench/ceiling/*.c) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^)

# The shared-memory round-trip floor of two processes (no libchorus on purpose).
$(BUILD)/bin/shm-floor: $(wildcard bench/floor/*.c) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^)

bench-compare: all compare-peers
	BUILD=$(BUILD) sh bench/compare.sh

asan:
	CHORUS_TEST_UNIT_TIMEOUT=600 $(MAKE) BUILD=build-asan SAN=1 OPT=-O1 test

valgrind: all $(BUILD)/tests/mp_coll_matrix
	@BUILD=$(BUILD) sh tests/valgrind.sh

# No growth of fds, threads, memory or shm segments over 100,000 small allreduces and
# 1,000 communicator create/destroy cycles, on 2 and 4 ranks over shm and tcp (`make
# test-full` runs a fifth of it, `make check` all of it).
.PHONY: leak-test
leak-test: all $(BUILD)/tests/mp_leak_cycles $(BUILD)/tests/mp_nonblocking
	@BUILD=$(BUILD) sh tests/leak_cycles.sh full

# Fault injection (issue 5, tests/fault): kill -9 over shm and over tcp on 4 emulated
# hosts, a host's link taken down, a rank that never calls; and recovery (issue 18): the
# survivors shrink and go on, SHRINK_RUNS times per scenario (default 10, ~8 min). The netns
# ones need root and say "skipped: <reason>" without it; `make test` runs the shm kill.
.PHONY: fault-test
fault-test: all $(BUILD)/tests/mp_fault_loop
	@SHRINK_RUNS=$${SHRINK_RUNS:-10} SHRINK_COUNT=$${SHRINK_COUNT:-4194304} BUILD=$(BUILD) \
	    sh tests/run_tests.sh fault

# libFuzzer targets for the parsers of untrusted input (tests/fuzz/fuzz_*.c, run by
# tests/fuzz/fuzz.sh for FUZZ_SECONDS each; needs clang and libclang-rt-14-dev, else skips).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := $(sort $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_CFLAGS  := $(filter-out -O%,$(CFLAGS)) -O1 -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined
# Only the modules the targets reach, to keep the sanitized build short (CI).
FUZZ_SRCS    := $(filter kernels/% lib/algo/% lib/util/% lib/tune/% lib/bootstrap/id.c \
                         lib/bootstrap/root.c lib/transport/tcp/% \
                         lib/transport/shm/shm_ring.c lib/topo/order.c,$(LIB_SRCS))
FUZZ_OBJS    := $(FUZZ_SRCS:%.c=$(BUILD)/fuzz/obj/%.o)
.PHONY: fuzz
fuzz:
	@FUZZ_CC=$(FUZZ_CC) sh tests/fuzz/fuzz.sh --check; rc=$$?; \
	if [ $$rc -eq 77 ]; then exit 0; elif [ $$rc -ne 0 ]; then exit 1; fi; \
	$(MAKE) --no-print-directory CHORUS_QUIET_CONFIG=1 $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%) && \
	BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/fuzz.sh $(FUZZ_NAMES)

$(BUILD)/fuzz/obj/%.o: %.c $(CONFIG)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(BUILD)/fuzz/libchorus.a: $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/no_dns.c tests/fuzz/fuzz_common.h \
                      $(BUILD)/fuzz/libchorus.a
	$(FUZZ_CC) $(CPPFLAGS) -Itests $(FUZZ_CFLAGS) -fsanitize=fuzzer -Wl,--wrap=getaddrinfo \
	    -o $@ $(filter %.c,$^) $(BUILD)/fuzz/libchorus.a $(LDLIBS)

# ---- GPU (issue 6; lib/gpu/gpu.h says why the GPU is a plugin) ----
# libchorus-cuda.so holds every CUDA call and the CUDA kernels (kernels/*.cu, for sm_80,
# sm_90 and PTX); it is built only where nvcc is found under CUDA_HOME, and libchorus loads
# it at run time, so one libchorus runs with and without CUDA. libchorus-cuda-fake.so
# implements the same table on host memory (tests/gpu/fake): `make test` runs the device
# path on it everywhere.
NVCC        := $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
NVCCFLAGS   ?= -O3 -std=c++17 --threads 0 $(CUDA_ARCHS) -Werror all-warnings \
               -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-fvisibility=hidden
CUDA_PLUGIN := $(BUILD)/lib/libchorus-cuda.so
FAKE_PLUGIN := $(BUILD)/lib/libchorus-cuda-fake.so
CU_SRCS     := $(sort $(wildcard kernels/*.cu))
CU_OBJS     := $(CU_SRCS:%.cu=$(BUILD)/obj/%.cu.o)
PLUGIN_SRCS := $(sort $(wildcard lib/gpu/plugin/*.c))
PLUGIN_OBJS := $(PLUGIN_SRCS:%.c=$(BUILD)/obj/%.o)
FAKE_SRCS   := $(sort $(wildcard tests/gpu/fake/*.c))
FAKE_OBJS   := $(FAKE_SRCS:%.c=$(BUILD)/obj/%.o)
KERNEL_OBJS := $(filter $(BUILD)/obj/kernels/%,$(LIB_OBJS))
GPU_TEST_SRCS := $(sort $(wildcard tests/gpu/*.c))
GPU_TEST_BINS := $(GPU_TEST_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu_%)
ifeq ($(HAVE_NVCC),1)
all: $(CUDA_PLUGIN)
endif
all: $(FAKE_PLUGIN)
test test-full check unit-test: $(GPU_TEST_BINS)

$(BUILD)/obj/%.cu.o: %.cu $(wildcard kernels/*.cuh kernels/*.h) lib/gpu/gpu.h $(CONFIG)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Ilib -Ikernels -c $< -o $@

$(PLUGIN_OBJS): CPPFLAGS += -I$(CUDA_HOME)/include
# Only chorus_gpu_plugin leaves the plugin: the helpers its files share stay inside.
$(PLUGIN_OBJS): CFLAGS += -fvisibility=hidden

# cudart is linked statically (as NCCL does) and the driver API is reached through
# cudaGetDriverEntryPointByVersion, so the plugin loads even where there is no driver.
$(CUDA_PLUGIN): $(PLUGIN_OBJS) $(CU_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) -shared -Wl,-Bsymbolic -o $@ $(filter %.o,$^) -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt \
	    -lpthread

$(FAKE_PLUGIN): $(FAKE_OBJS) $(KERNEL_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-Bsymbolic $(LDFLAGS) -o $@ $^ -lpthread -lrt -lm

# Plugins broken on purpose (tests/gpu/broken): the loader must call each broken, and the
# GPU tests fail on it instead of skipping (test_gpu_loader, tests/run_tests.sh gpu).
BROKEN_KINDS   := nosym abi abitable init undef
BROKEN_PLUGINS := $(BROKEN_KINDS:%=$(BUILD)/tests/broken/libchorus-cuda-%.so) \
                  $(BUILD)/tests/broken/libchorus-cuda-notelf.so
test test-full check unit-test $(BUILD)/tests/test_gpu_loader: $(BROKEN_PLUGINS)
$(BUILD)/tests/test_gpu_loader: tests/gpu/gpu_gate.h

$(BUILD)/tests/broken/libchorus-cuda-notelf.so:
	@mkdir -p $(dir $@)
	echo 'This text file is not a shared object: a GPU plugin broken on purpose.' >$@

$(BUILD)/tests/broken/libchorus-cuda-%.so: tests/gpu/broken/broken_plugin.c lib/gpu/gpu.h $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DBROKEN_$* -shared -o $@ $<

# gpu_coll_matrix includes the host matrix (tests/mp/coll_matrix.c) and runs it on devices.
$(BUILD)/tests/gpu_coll_matrix: tests/mp/coll_matrix.c
$(BUILD)/tests/gpu_%: tests/gpu/%.c $(STATIC_LIB) $(wildcard tests/gpu/*.h tests/mp/*.h) $(CONFIG)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

# DESTDIR stages (make deb); LIBDIR and INCLUDEDIR default under PREFIX. The Python package
# goes to PYTHONDIR (Debian's dist-packages under PREFIX: PYTHONPATH=$PREFIX/lib/python3/
# dist-packages for another prefix); INSTALL_PYTHON=0 leaves it out (make deb does).
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
PYTHONDIR  ?= $(PREFIX)/lib/python3/dist-packages
INSTALL_PYTHON ?= 1
# ---- Python (issue 17): the chorus package and its torch.distributed backend ----
# $(BUILD)/python holds the package as it runs from the build tree (PYTHONPATH=build/python):
# python/chorus copied, _libpath.py naming this build's libchorus, and chorus/_torch_ext
# (python/csrc, built with torch.utils.cpp_extension against Debian's libtorch-dev) where
# configure found torch. Debian's interpreter, PYTHON (/usr/bin/python3), builds and runs it.
PY_BUILD := $(BUILD)/python
PY_SRCS  := $(sort $(wildcard python/chorus/*.py))
PY_STAMP := $(PY_BUILD)/.built
PY_EXT_DEPS := python/setup.py $(wildcard python/csrc/*.cpp python/csrc/*.h) include/chorus.h \
        $(CONFIG)
all: $(PY_STAMP)
# The extension links libchorus.so by its soname, so a rebuilt library does not relink it
# (order-only); it is rebuilt when its sources, chorus.h or the configuration change.
# build_ext --force: setuptools compares the .cpp with its object only, so a changed header
# (python/csrc/*.h) would otherwise leave the old object in place.
$(PY_BUILD)/.ext: $(PY_EXT_DEPS) | $(SHARED_LIB) $(SHARED_LINKS)
	@mkdir -p $(PY_BUILD)/chorus
ifeq ($(HAVE_TORCH),1)
	cd python && CHORUS_INCLUDE_DIR=$(abspath include) CHORUS_LIBRARY_DIR=$(abspath $(BUILD))/lib \
	    $(PYTHON) setup.py -q build_ext --force --build-lib $(abspath $(PY_BUILD)) \
	    --build-temp $(abspath $(BUILD))/python-tmp
endif
	touch $@
$(PY_STAMP): $(PY_SRCS) $(PY_BUILD)/.ext $(SHARED_LIB) $(SHARED_LINKS)
	@mkdir -p $(PY_BUILD)/chorus
	cp $(PY_SRCS) $(PY_BUILD)/chorus/
	echo 'LIBRARY = "$(abspath $(BUILD))/lib/$(SONAME)"' > $(PY_BUILD)/chorus/_libpath.py
	touch $@

# The same package for torch 2.x from pip (configure's PIP_PYTHON, HAVE_PIP_TORCH), in a
# directory of its own: PYTHONPATH=build/python-pip with that interpreter.
PY_PIP_BUILD := $(BUILD)/python-pip
PY_PIP_STAMP := $(PY_PIP_BUILD)/.built
ifeq ($(HAVE_PIP_TORCH),1)
all: $(PY_PIP_STAMP)
endif
$(PY_PIP_BUILD)/.ext: $(PY_EXT_DEPS) | $(SHARED_LIB) $(SHARED_LINKS)
	@mkdir -p $(PY_PIP_BUILD)/chorus
	cd python && CHORUS_INCLUDE_DIR=$(abspath include) CHORUS_LIBRARY_DIR=$(abspath $(BUILD))/lib \
	    $(PIP_PYTHON) setup.py -q build_ext --force --build-lib $(abspath $(PY_PIP_BUILD)) \
	    --build-temp $(abspath $(BUILD))/python-pip-tmp
	touch $@
$(PY_PIP_STAMP): $(PY_SRCS) $(PY_PIP_BUILD)/.ext $(SHARED_LIB) $(SHARED_LINKS)
	@mkdir -p $(PY_PIP_BUILD)/chorus
	cp $(PY_SRCS) $(PY_PIP_BUILD)/chorus/
	echo 'LIBRARY = "$(abspath $(BUILD))/lib/$(SONAME)"' > $(PY_PIP_BUILD)/chorus/_libpath.py
	touch $@

# The Python package with the library and launcher it runs on, and nothing else: what the
# asan group of tests/run_tests.sh builds with SAN=1 (a third less than `all`).
.PHONY: python-package
python-package: $(BUILD)/bin/chorusrun $(PY_STAMP)
ifeq ($(HAVE_PIP_TORCH),1)
python-package: $(PY_PIP_STAMP)
endif

install: all
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR)
	install -m 644 include/chorus.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SHARED_REAL) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libchorus.so
	$(PKG_FILES_ENV) sh tools/write-pkg-files.sh $(DESTDIR)$(LIBDIR) $(PREFIX) $(LIBDIR) \
	    $(INCLUDEDIR)
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	if [ -f $(CUDA_PLUGIN) ]; then install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(LIBDIR)/; fi
ifeq ($(INSTALL_PYTHON),1)
	install -d $(DESTDIR)$(PYTHONDIR)/chorus
	install -m 644 $(PY_SRCS) $(DESTDIR)$(PYTHONDIR)/chorus/
	if ls $(PY_BUILD)/chorus/*.so >/dev/null 2>&1; then \
	    install -m 755 $(PY_BUILD)/chorus/*.so $(DESTDIR)$(PYTHONDIR)/chorus/; fi
	echo 'LIBRARY = "$(LIBDIR)/$(SONAME)"' > $(DESTDIR)$(PYTHONDIR)/chorus/_libpath.py
endif

# A Debian package of all of the above under /usr (tools/make-deb.sh): $(BUILD)/chorus_VERSION_ARCH.deb.
.PHONY: deb
deb: all
	BUILD=$(BUILD) VERSION=$(CHORUS_VERSION) sh tools/make-deb.sh

# What a new user does (tests/install, tests/readme; issue 16): install and build the
# examples through pkg-config and CMake, the Debian package, the README's commands from a
# fresh clone, and fresh machines without the optional packages in both orders (long:
# two clean builds and test runs; it removes and reinstalls packages, so root only).
.PHONY: test-install
test-install: all
	+@BUILD=$(BUILD) sh tests/install/run.sh $(TEST_INSTALL_ARGS)

clean:
	rm -rf build build-*

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

-include $(LIB_OBJS:.o=.d) $(FUZZ_OBJS:.o=.d) $(PLUGIN_OBJS:.o=.d) $(FAKE_OBJS:.o=.d)

# The mutation check (issue 36, tests/mutation/run.sh): the faults of
# tests/mutation/mutants.txt, one at a time in a scratch copy of the tree, each run against
# the tests expected to catch it and then the quick tier; prints killed/total and the
# survivors, and fails below 90%. MUTATION_ARGS: --only ID,... --list --keep --dir DIR.
.PHONY: mutation
mutation:
	@sh tests/mutation/run.sh $(MUTATION_ARGS)
