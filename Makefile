# SPDX-License-Identifier: MIT
# leaseline build. Everything goes under build/; quiet by default, V=1 shows
# the full commands. `make demo` and `make check` install missing Debian
# build dependencies first (scripts/install-deps.sh, idempotent).

# `make` alone builds `all` (the layer rules below come first in the file).
.DEFAULT_GOAL := all

BUILD     ?= build
CC        ?= gcc
CLANG     ?= clang
BPFTOOL   ?= bpftool
PREFIX    ?= /usr/local

# The version every binary reports (user/lib/version.h): from git describe
# at build time, VERSION when the tree has no release tag or no git.
VERSION   := 0.1.0
GIT_DESC  := $(shell git describe --tags --match 'v[0-9]*' --dirty --always --abbrev=12 2>/dev/null)
LL_VERSION ?= $(if $(GIT_DESC),$(if $(filter v%,$(GIT_DESC)),$(patsubst v%,%,$(GIT_DESC)),$(VERSION)+g$(GIT_DESC)),$(VERSION))

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# The BPF programs' target architecture and system headers, as
# libbpf-bootstrap finds them: ARCH from `uname -m` in the kernel's names
# (__TARGET_ARCH_x86, _arm64, ...), and the directories clang itself searches
# for <...> on this host (asm/types.h lives under the multiarch one), added
# with -idirafter so they never shadow include/ or bpf/.
ARCH ?= $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/arm.*/arm/' -e 's/aarch64/arm64/' \
	  -e 's/ppc64le/powerpc/' -e 's/mips.*/mips/' -e 's/riscv64/riscv/' \
	  -e 's/loongarch64/loongarch/' -e 's/s390x/s390/')
CLANG_BPF_SYS_INCLUDES ?= $(shell $(CLANG) -v -E - </dev/null 2>&1 | \
	sed -n '/<...> search starts here:/,/End of search list./{ s| \(/.*\)|-idirafter \1|p }')
# CFLAGS and LDFLAGS are the user's (make CFLAGS='-O1 -fsanitize=address');
# what the project needs is in LL_CFLAGS and is always added.
CFLAGS    ?= -O2 -g
LL_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE $(EXTRA_CFLAGS)
DEP_FLAGS := -MMD -MP
BPF_CFLAGS := -O2 -g -target bpf -Wall -Werror -Iinclude -Ibpf -D__TARGET_ARCH_$(ARCH) \
	      $(CLANG_BPF_SYS_INCLUDES)
# An experiment, not a supported build: buckets with bpf_res_spin_lock
# (include/ll_types.h, LL_BUCKET_LOCK), to price it in `make bench`.
ifeq ($(LL_RES_LOCK),1)
BPF_CFLAGS += -DLL_RES_LOCK
LL_CFLAGS  += -DLL_RES_LOCK
endif
# libpq's header lives in its own directory (Debian: /usr/include/postgresql).
LL_CFLAGS += $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
LDLIBS    := -lxdp -lbpf -lelf -lz -lyaml -lssl -lcrypto -lsqlite3 -lpq -lmicrohttpd -lcurl -ljson-c \
	     -lpthread -lm

# The XDP program the agent embeds, and the benchmark-only programs.
BPF_SRCS  := bpf/leaseline.bpf.c $(wildcard bench/bpf/*.bpf.c)
BPF_HDRS  := $(wildcard bpf/*.h) $(wildcard include/*.h)
SKEL      := $(BUILD)/leaseline.skel.h
BENCH_SKELS := $(patsubst bench/bpf/%.bpf.c,$(BUILD)/%.skel.h,$(wildcard bench/bpf/*.bpf.c))

# Layering (docs/design.md, "Layers"): each folder of user/ compiles with the
# include root of its layer and becomes one archive. A header is included by
# its path from user/ ("lib/monotonic.h"); a layer's root, $(BUILD)/inc/LAYER,
# holds links to the folders it may use and no others. lib/ sees only itself
# and the kernel ABI (include/); agent/ and coord/ see lib/ and themselves,
# never each other; cmd/ (the commands and the command table) sees all
# four. A file that includes a header of a layer it may not use fails to
# compile (tests/build/test_layering.sh proves it).
SEES_lib   := lib
SEES_agent := lib agent
SEES_coord := lib coord
SEES_cmd   := lib agent coord cmd
INC_lib   := -Iinclude -I$(BUILD)/inc/lib
INC_agent := -Iinclude -I$(BUILD)/inc/agent -I$(BUILD)
INC_coord := -Iinclude -I$(BUILD)/inc/coord
INC_cmd   := -Iinclude -I$(BUILD)/inc/cmd -I$(BUILD)
LAYERS    := lib agent coord cmd

define layer
$(1)_SRCS := $$(wildcard user/$(1)/*.c)
$(1)_SRCS := $$(filter-out user/cmd/leaseline.c,$$($(1)_SRCS))
$(1)_OBJS := $$(patsubst user/$(1)/%.c,$(BUILD)/user/$(1)/%.o,$$($(1)_SRCS))
$(BUILD)/user/$(1)/%.o: user/$(1)/%.c | $(BUILD)/user/$(1) $(BUILD)/inc/$(1) $(if $(filter agent cmd,$(1)),$(SKEL))
	$$(call msg,CC,$$@)
	$(Q)$$(CC) $$(LL_CFLAGS) $$(DEP_FLAGS) $$(CFLAGS) $$(INC_$(1)) -c $$< -o $$@
$(BUILD)/libll-$(1).a: $$($(1)_OBJS)
	$$(call msg,AR,$$@)
	$(Q)rm -f $$@ && ar rcs $$@ $$^
$(BUILD)/user/$(1):
	$(Q)mkdir -p $$@
$(BUILD)/inc/$(1):
	$(Q)mkdir -p $$@.new && for l in $(SEES_$(1)); do ln -sfn $(CURDIR)/user/$$$$l $$@.new/$$$$l; done
	$(Q)rm -rf $$@ && mv $$@.new $$@
endef
$(foreach l,$(LAYERS),$(eval $(call layer,$(l))))

# Only version.o sees the version, and is rebuilt only when it changes: the
# stamp is rewritten only when its content differs.
.PHONY: FORCE
FORCE:
$(BUILD)/version.txt: FORCE | $(BUILD)
	$(Q)echo '$(LL_VERSION)' | cmp -s - $@ || echo '$(LL_VERSION)' >$@
$(BUILD)/user/lib/version.o: $(BUILD)/version.txt
$(BUILD)/user/lib/version.o: LL_CFLAGS += -DLL_VERSION_STRING='"$(LL_VERSION)"'

LIB_A     := $(BUILD)/libll-lib.a
AGENT_A   := $(BUILD)/libll-agent.a
COORD_A   := $(BUILD)/libll-coord.a
CMD_A     := $(BUILD)/libll-cmd.a

# Tests and benchmarks, chosen by folder. Each binary goes to
# $(BUILD)/tests/NAME or $(BUILD)/bench/NAME, so a name is unique across
# folders. The coordinator's (tests/coord: its unit tests; tests/integ: a
# real `leaseline coord` driven over loopback; bench/coord) link without the
# agent's archive, so none of them can contain the BPF loader
# (tests/build/test_layering.sh checks them with nm).
UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
COORDT_SRCS := $(wildcard tests/coord/test_*.c)
INTEG_SRCS := $(wildcard tests/integ/test_*.c)
BPFT_SRCS  := $(wildcard tests/bpf/test_*.c)
BENCH_SRCS := $(wildcard bench/bench_*.c)
COORDB_SRCS := $(wildcard bench/coord/bench_*.c)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
COORDT_BINS := $(patsubst tests/coord/%.c,$(BUILD)/tests/%,$(COORDT_SRCS))
INTEG_BINS := $(patsubst tests/integ/%.c,$(BUILD)/tests/%,$(INTEG_SRCS))
BPFT_BINS  := $(patsubst tests/bpf/%.c,$(BUILD)/tests/%,$(BPFT_SRCS))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS)) \
	      $(patsubst bench/coord/%.c,$(BUILD)/bench/%,$(COORDB_SRCS))
TEST_NAMES := $(notdir $(UNIT_SRCS) $(COORDT_SRCS) $(INTEG_SRCS) $(BPFT_SRCS))
ifneq ($(words $(TEST_NAMES)),$(words $(sort $(TEST_NAMES))))
$(error two tests share a name: $(sort $(foreach n,$(TEST_NAMES),$(if $(filter-out 1,$(words $(filter $(n),$(TEST_NAMES)))),$(n)))))
endif
TEST_INC  := $(INC_cmd) -Itests -Ibench
# The BPF tests' harness and packet builder (tests/bpf/harness.c, pkt.c),
# compiled once into an archive every BPF test binary links.
TESTLIB_SRCS := tests/bpf/harness.c tests/bpf/pkt.c
TESTLIB_OBJS := $(patsubst tests/bpf/%.c,$(BUILD)/tests/obj/%.o,$(TESTLIB_SRCS))
TEST_A    := $(BUILD)/libll-test.a
ALL_A     := $(CMD_A) $(AGENT_A) $(COORD_A) $(LIB_A)
COORD_SIDE_A := $(CMD_A) $(COORD_A) $(LIB_A)

.PHONY: FORCE san san-all fuzz all deps check test check-build check-unit check-integ check-bpf check-net check-kernels bench bench-live bench-global demo install uninstall clean format print-flags
.DELETE_ON_ERROR:
.SECONDARY:

all: $(BUILD)/leaseline $(UNIT_BINS) $(COORDT_BINS) $(INTEG_BINS) $(BPFT_BINS) $(BENCH_BINS)


deps:
	$(Q)scripts/install-deps.sh

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(BPF_HDRS) | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.bpf.o: bench/bpf/%.bpf.c $(BPF_HDRS) | $(BUILD)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< > $@

$(BUILD)/leaseline: $(BUILD)/user/cmd/leaseline.o $(CMD_A) $(AGENT_A) $(COORD_A) $(LIB_A)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# Every cmocka binary: LL_TEST_FILTER picks tests by name (tests/cmocka_filter.c).
CMOCKA_FILTER := $(BUILD)/tests/obj/cmocka_filter.o
CMOCKA := $(CMOCKA_FILTER) -Wl,--wrap=_cmocka_run_group_tests -lcmocka

$(CMOCKA_FILTER): tests/cmocka_filter.c | $(BUILD)/tests/obj
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(ALL_A) $(CMOCKA_FILTER) | $(BUILD)/tests $(BUILD)/inc/cmd
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(ALL_A) -o $@ $(LDLIBS) $(CMOCKA)

$(BUILD)/tests/%: tests/coord/%.c $(COORD_SIDE_A) $(CMOCKA_FILTER) | $(BUILD)/tests $(BUILD)/inc/cmd
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(COORD_SIDE_A) -o $@ $(LDLIBS) $(CMOCKA)

$(BUILD)/tests/%: tests/integ/%.c $(COORD_SIDE_A) $(CMOCKA_FILTER) | $(BUILD)/tests $(BUILD)/inc/cmd
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(COORD_SIDE_A) -o $@ $(LDLIBS) $(CMOCKA)

$(BUILD)/tests/obj/%.o: tests/bpf/%.c | $(BUILD)/tests/obj $(BUILD)/inc/cmd $(SKEL)
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(TEST_INC) -c $< -o $@

$(TEST_A): $(TESTLIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: tests/bpf/%.c $(TEST_A) $(AGENT_A) $(LIB_A) $(CMOCKA_FILTER) | $(BUILD)/tests $(BUILD)/inc/cmd $(SKEL)
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(TEST_A) $(AGENT_A) $(LIB_A) -o $@ $(LDLIBS) $(CMOCKA)

# The reference limiter's test loads the benchmark's program.
$(BUILD)/tests/test_reflim: $(BUILD)/reflim.skel.h

$(BUILD)/bench/%: bench/%.c $(ALL_A) | $(BUILD)/bench $(BUILD)/inc/cmd $(SKEL) $(BENCH_SKELS)
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(ALL_A) -o $@ $(LDLIBS)

$(BUILD)/bench/%: bench/coord/%.c $(COORD_SIDE_A) | $(BUILD)/bench $(BUILD)/inc/cmd
	$(call msg,CC,$@)
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) $(LDFLAGS) $(TEST_INC) $< $(COORD_SIDE_A) -o $@ $(LDLIBS)

# Each directory its own target: $(BUILD) alone exists as soon as any layer
# made its folder, and would not stand for the others.
$(BUILD) $(BUILD)/user $(BUILD)/tests $(BUILD)/tests/obj $(BUILD)/bench:
	$(Q)mkdir -p $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Sanitizers and fuzzing: the userspace, its unit and integration tests and
# the libFuzzer harnesses of tests/fuzz built again with clang, ASan and
# UBSan (plus libFuzzer's coverage) under $(BUILD)/san; `make check` runs
# them (scripts/run-tests.sh, suite san), `make fuzz` runs the fuzzers long.
SAN_BUILD  := $(BUILD)/san
SAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	      -fno-sanitize-recover=all -fsanitize=fuzzer-no-link
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
FUZZ_SECONDS ?= 600

san-all: $(BUILD)/leaseline $(BUILD)/pass.bpf.o $(UNIT_BINS) $(COORDT_BINS) $(INTEG_BINS) $(FUZZ_BINS)

$(BUILD)/fuzz/%: tests/fuzz/%.c $(ALL_A) | $(BUILD) $(BUILD)/inc/cmd
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(BUILD)/fuzz
	$(Q)$(CC) $(LL_CFLAGS) $(DEP_FLAGS) $(CFLAGS) -fsanitize=fuzzer $(TEST_INC) $< \
		$(ALL_A) -o $@ $(LDLIBS)

san:
	$(Q)$(MAKE) --no-print-directory BUILD=$(SAN_BUILD) CC=$(CLANG) CFLAGS="$(SAN_CFLAGS)" \
		LDFLAGS="-fsanitize=address,undefined" san-all

fuzz: deps san
	$(Q)scripts/run-fuzz.sh $(SAN_BUILD) $(FUZZ_SECONDS)

# The flags one layer compiles with, for tests/build/test_layering.sh.
print-flags:
	@echo $(LL_CFLAGS) $(CFLAGS) $(INC_$(LAYER))

# Tests: unit (no root), integration (the real binary on loopback), BPF
# through bpf_prog_test_run_opts, then namespaces.
check: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(MAKE) --no-print-directory san
	$(Q)scripts/run-tests.sh $(BUILD)

# One test: T=test_wire, T=test_wire:PATTERN (cmocka's filter), T=net/test_reload.
test: all
	$(Q)scripts/run-one.sh $(BUILD) "$(T)"

check-build: all
	$(Q)scripts/run-tests.sh $(BUILD) build

check-unit: all
	$(Q)scripts/run-tests.sh $(BUILD) unit

check-integ: all
	$(Q)scripts/run-tests.sh $(BUILD) integ

check-bpf: all
	$(Q)scripts/run-tests.sh $(BUILD) bpf

check-net: all
	$(Q)scripts/run-tests.sh $(BUILD) net

# The kernel matrix (tests/kernels/README.md): Debian's 6.1, 6.12 and 5.10
# booted in qemu and the host's own kernel, each running the BPF suite, the
# agent on a veth and the multiprog dispatcher; `make check` boots 6.1 only.
check-kernels: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/kernels/run.sh $(BUILD) full

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

# The binary, its man pages, the systemd units (ExecStart pointing at
# SBINDIR) and the monitoring files of deploy/; DESTDIR and PREFIX honoured
# (tests/build/test_install.sh installs into a temporary DESTDIR).
SBINDIR   ?= $(PREFIX)/sbin
MANDIR    ?= $(PREFIX)/share/man
UNITDIR   ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
COMPLDIR  ?= $(PREFIX)/share/bash-completion/completions
DATADIR   ?= $(PREFIX)/share/leaseline
UNITS     := leaseline-agent.service leaseline-coord.service

install: $(BUILD)/leaseline
	install -D -m 0755 $(BUILD)/leaseline $(DESTDIR)$(SBINDIR)/leaseline
	install -D -m 0644 man/leaseline.8 $(DESTDIR)$(MANDIR)/man8/leaseline.8
	install -D -m 0644 man/leaseline.yaml.5 $(DESTDIR)$(MANDIR)/man5/leaseline.yaml.5
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	for u in $(UNITS); do \
		sed 's|@SBINDIR@|$(SBINDIR)|g' deploy/systemd/$$u.in > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -D -m 0644 deploy/prometheus/leaseline-rules.yml $(DESTDIR)$(DATADIR)/prometheus/leaseline-rules.yml
	install -D -m 0644 deploy/grafana/leaseline.json $(DESTDIR)$(DATADIR)/grafana/leaseline.json
	install -D -m 0644 deploy/bash-completion/leaseline $(DESTDIR)$(COMPLDIR)/leaseline
	@# The example files the units read, never over the operator's own.
	for f in agent coord policy; do \
		[ -e $(DESTDIR)$(SYSCONFDIR)/leaseline/$$f.yaml ] || \
			install -D -m 0644 deploy/etc/$$f.yaml $(DESTDIR)$(SYSCONFDIR)/leaseline/$$f.yaml || exit 1; \
	done

# What install put there, and nothing else (state, pins and the files in
# SYSCONFDIR/leaseline are the operator's once installed).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/leaseline $(DESTDIR)$(MANDIR)/man8/leaseline.8 \
		$(DESTDIR)$(MANDIR)/man5/leaseline.yaml.5 \
		$(DESTDIR)$(DATADIR)/prometheus/leaseline-rules.yml \
		$(DESTDIR)$(DATADIR)/grafana/leaseline.json $(DESTDIR)$(COMPLDIR)/leaseline
	for u in $(UNITS); do rm -f $(DESTDIR)$(UNITDIR)/$$u; done
	-rmdir $(DESTDIR)$(DATADIR)/prometheus $(DESTDIR)$(DATADIR)/grafana $(DESTDIR)$(DATADIR) 2>/dev/null

format:
	clang-format -i bpf/*.c bpf/*.h bench/bpf/*.c include/*.h user/*/*.c user/*/*.h \
		tests/*/*.c tests/*/*.h bench/*.c

clean:
	rm -rf $(BUILD)
