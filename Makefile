# Chorus build. `make` builds the libraries and tools; `make test` runs every test;
# `make bench` runs chorus-bench allreduce on 4 local ranks. BUILD=dir builds elsewhere
# (several builds can share one tree); SAN=1 builds with ASan+UBSan (`make asan`).

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc
OPT     ?= -O2
SAN     ?=


CPPFLAGS += -Iinclude -Ilib -Ikernels -D_GNU_SOURCE
CFLAGS   += -std=c11 $(OPT) -g -fPIC -pthread -Wall -Wextra -Werror -Wshadow \
            -Wstrict-prototypes -Wmissing-prototypes -fno-strict-aliasing
LDLIBS   += -lcrypto -lpthread -lm -lrt
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif

LIB_SRCS  := $(sort $(wildcard kernels/*.c lib/*/*.c lib/transport/*/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
TOOL_NAMES:= chorusrun
BENCH_NAMES := chorus-bench tcp-ceiling
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
MP_SRCS   := $(sort $(wildcard tests/mp/*.c))
MP_BINS   := $(MP_SRCS:tests/mp/%.c=$(BUILD)/tests/mp_%)
EX_SRCS   := $(sort $(wildcard examples/*.c))
EX_BINS   := $(EX_SRCS:examples/%.c=$(BUILD)/examples/%)

STATIC_LIB := $(BUILD)/lib/libchorus.a
SHARED_LIB := $(BUILD)/lib/libchorus.so
BINS := $(TOOL_NAMES:%=$(BUILD)/bin/%) $(BENCH_NAMES:%=$(BUILD)/bin/%)

.PHONY: all deps test test-full unit-test bench asan valgrind install clean format
all: $(STATIC_LIB) $(SHARED_LIB) $(BINS) $(EX_BINS) $(BUILD)/lib/pkgconfig/chorus.pc

deps:
	@sh tools/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(STATIC_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SHARED_LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libchorus.so.0 -o $@ $^ $(LDLIBS)

$(BUILD)/lib/pkgconfig/chorus.pc: tools/chorus.pc.in
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' $< > $@

# Each tool is the .c files of its folder, linked statically against libchorus.
$(BUILD)/bin/chorusrun: $(wildcard tools/chorusrun/*.c) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) $(LDLIBS)

$(BUILD)/bin/chorus-bench: $(wildcard bench/chorus-bench/*.c bench/chorus-bench/*.h) $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^) $(STATIC_LIB) -ljansson $(LDLIBS)

$(BUILD)/tests/test_%: tests/unit/test_%.c $(STATIC_LIB) $(wildcard tests/unit/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) -lcmocka $(LDLIBS)

$(BUILD)/tests/mp_%: tests/mp/%.c $(STATIC_LIB) $(wildcard tests/mp/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(STATIC_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC_LIB) $(LDLIBS)

test: deps all $(UNIT_BINS) $(MP_BINS)
	@BUILD=$(BUILD) sh tests/run_tests.sh

test-full: deps all $(UNIT_BINS) $(MP_BINS)
	@ALGO_TEST_BIG=all BUILD=$(BUILD) sh tests/run_tests.sh

unit-test: all $(UNIT_BINS)
	@BUILD=$(BUILD) sh tests/run_tests.sh unit

bench: deps all
	$(BUILD)/bin/chorusrun -n 4 -- $(BUILD)/bin/chorus-bench allreduce -b 8 -e 64M -f 2 -c 1

# Allreduce (ring and tree) on emulated clusters of 2, 4 and 8 hosts, links capped at
# 200 Mbit/s: needs root and network namespaces (tests/cluster/cluster_bench.sh --help).
.PHONY: cluster-bench
cluster-bench: all
	BUILD=$(BUILD) sh tests/cluster/cluster_bench.sh $(CLUSTER_BENCH_ARGS)

# bench/compare.sh sets Chorus next to Open MPI and Gloo. Their benchmarks (bench/mpi,
# bench/gloo) are built only where those libraries are installed, and plain `make` never
# needs them; `make compare-peers` says what it skipped and why.
MPICC          ?= mpicc.openmpi
PEER_CXXFLAGS  ?= -std=c++17 $(OPT) -g -Wall -Wextra -Werror -pthread
.PHONY: compare-peers bench-compare
compare-peers:
	@if command -v $(MPICC) >/dev/null 2>&1; then $(MAKE) --no-print-directory $(BUILD)/bin/ompi-bench; \
	else echo "ompi-bench: skipped: $(MPICC) not found (apt-get install libopenmpi-dev)"; fi
	@if [ ! -f /usr/include/gloo/allreduce.h ]; then \
	    echo "gloo-bench: skipped: /usr/include/gloo not found (apt-get install libgloo-dev)"; \
	elif ! command -v $(CXX) >/dev/null 2>&1; then \
	    echo "gloo-bench: skipped: no C++ compiler $(CXX) (apt-get install g++)"; \
	else $(MAKE) --no-print-directory $(BUILD)/bin/gloo-bench; fi

$(BUILD)/bin/ompi-bench: bench/mpi/ompi-bench.c bench/mpi/peer.h
	@mkdir -p $(dir $@)
	$(MPICC) -D_GNU_SOURCE $(CFLAGS) $(LDFLAGS) -o $@ $<

$(BUILD)/bin/gloo-bench: bench/gloo/gloo-bench.cc bench/mpi/peer.h
	@mkdir -p $(dir $@)
	$(CXX) -Ibench/mpi $(PEER_CXXFLAGS) $(LDFLAGS) -o $@ $< -lgloo -pthread

# The raw loopback tcp ceiling of compare.sh -t tcp: plain sockets, no libchorus on purpose.
$(BUILD)/bin/tcp-ceiling: $(wildcard bench/ceiling/*.c)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c,$^)

bench-compare: all compare-peers
	BUILD=$(BUILD) sh bench/compare.sh

asan:
	$(MAKE) BUILD=build-asan SAN=1 OPT=-O1 test

valgrind: all $(BUILD)/tests/mp_coll_matrix
	@BUILD=$(BUILD) sh tests/valgrind.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/chorus.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(STATIC_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SHARED_LIB) $(DESTDIR)$(PREFIX)/lib/libchorus.so.0
	ln -sf libchorus.so.0 $(DESTDIR)$(PREFIX)/lib/libchorus.so
	sed -e 's|@PREFIX@|$(PREFIX)|' tools/chorus.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/chorus.pc
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build build-*

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

-include $(LIB_OBJS:.o=.d)
