# SPDX-License-Identifier: MIT
# leaseline build. Everything goes under build/; quiet by default, V=1 shows
# the full commands. `make demo` and `make check` install missing Debian
# build dependencies first (scripts/install-deps.sh, idempotent).

BUILD     ?= build
CC        ?= gcc
CLANG     ?= clang
BPFTOOL   ?= bpftool
PREFIX    ?= /usr/local

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

ARCH_INC  := /usr/include/$(shell $(CC) -dumpmachine 2>/dev/null)
CFLAGS    ?= -O2 -g
CFLAGS    += -std=gnu11 -Wall -Wextra -Werror -Iinclude -Iuser -I$(BUILD) -D_GNU_SOURCE
BPF_CFLAGS := -O2 -g -target bpf -Wall -Werror -Iinclude -I$(ARCH_INC) -D__TARGET_ARCH_x86
LDLIBS    := -lbpf -lelf -lz -lyaml -lpthread

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))
BPF_HDRS  := $(wildcard bpf/*.h) $(wildcard include/*.h)

LIB_SRCS  := $(filter-out user/main.c,$(wildcard user/*.c))
LIB_OBJS  := $(patsubst user/%.c,$(BUILD)/user/%.o,$(LIB_SRCS))
USER_HDRS := $(wildcard user/*.h) $(wildcard include/*.h)

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
BPFT_SRCS := $(wildcard tests/bpf/test_*.c)
BPFT_BINS := $(patsubst tests/bpf/%.c,$(BUILD)/tests/%,$(BPFT_SRCS))
BENCH_SRCS := $(wildcard bench/bench_*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

.PHONY: all deps check check-unit check-bpf check-net bench bench-live bench-global demo install clean format
.DELETE_ON_ERROR:
.SECONDARY:

all: $(BUILD)/leaseline $(UNIT_BINS) $(BPFT_BINS) $(BENCH_BINS)

deps:
	$(Q)scripts/install-deps.sh

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< > $@

$(BUILD)/user/%.o: user/%.c $(USER_HDRS) $(SKELS) | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libleaseline.a: $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/leaseline: $(BUILD)/user/main.o $(BUILD)/libleaseline.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libleaseline.a $(USER_HDRS) $(wildcard tests/unit/*.h) | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -Itests $< $(BUILD)/libleaseline.a -o $@ $(LDLIBS) -lcmocka

$(BUILD)/tests/%: tests/bpf/%.c $(wildcard tests/bpf/*.h) $(BUILD)/libleaseline.a $(SKELS) $(USER_HDRS) | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -Itests $< $(BUILD)/libleaseline.a -o $@ $(LDLIBS) -lcmocka

$(BUILD)/bench/%: bench/%.c $(BUILD)/libleaseline.a $(SKELS) $(USER_HDRS) $(wildcard bench/*.h) | $(BUILD)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -Itests $< $(BUILD)/libleaseline.a -o $@ $(LDLIBS)

$(BUILD):
	$(Q)mkdir -p $(BUILD)/user $(BUILD)/tests $(BUILD)/bench

# Tests: unit (no root), BPF through bpf_prog_test_run_opts, then namespaces.
check: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/run-tests.sh $(BUILD)

check-unit: all
	$(Q)scripts/run-tests.sh $(BUILD) unit

check-bpf: all
	$(Q)scripts/run-tests.sh $(BUILD) bpf

check-net: all
	$(Q)scripts/run-tests.sh $(BUILD) net

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)for b in $(BENCH_BINS); do $$b || exit 1; done

# Live traffic on veth against hashlimit and nft (docs/benchmarks-live.md; ~10 min).
bench-live: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/bench-live.sh $(BUILD)

# The multi-gateway figures of docs/global.md (long: several minutes).
bench-global: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/bench-global.sh $(BUILD)

# One gateway's per-client limits, then one contract across gateways
# (independent buckets overshoot; leaseline holds; a gateway cut off), with a
# picture in build/demo-global.svg.
demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/demo.sh $(BUILD)
	$(Q)scripts/demo-global.sh $(BUILD)

install: $(BUILD)/leaseline
	install -D -m 0755 $(BUILD)/leaseline $(DESTDIR)$(PREFIX)/sbin/leaseline

format:
	clang-format -i bpf/*.c bpf/*.h include/*.h user/*.c user/*.h tests/*/*.c bench/*.c

clean:
	rm -rf $(BUILD)
