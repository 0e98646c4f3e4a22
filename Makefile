# batchfs — build, test, demo, bench, install.
#
#   make deps      install missing Debian packages (apt-get; root or sudo)
#   make           build everything into build/
#   make test      run every test (libcheck suites, CLI and mount scripts, fuzz smoke),
#                  after `make check-layering` (the layers, from the compiler's graph)
#   make demo      the main job on a small generated dataset
#   make bench     benchmarks (print ratios measured in one run; never asserted)
#   make fuzz      run every fuzz target for FUZZ_SECONDS each (clang + libFuzzer)
#   make install PREFIX=/usr/local   |   make uninstall   |   make clean   |   make format
#                  (install: programs, man pages, docs, libbatchfs-gpu, mount helper, all
#                  under PREFIX; SBINDIR=/sbin puts the helper where mount(8) looks)
#   make gpu       only libbatchfs-gpu (build/libbatchfs-gpu.so, .a, batchfs-gpu.pc)
#   make programs  only build/batchfs and build/mkbatchfs (`print-programs` names them):
#                  what `pip install ./python` builds into the Python package
#
#   SANITIZER=address|undefined|thread builds into build/san-$(SANITIZER)/; DEBUG=1 into
#   build/debug/. Both assert the invariants of base/check.h (BFS_ASSERT: job states,
#   reference counts, cache bytes, store entries) and the executor's lock owner
#   (LOCKED), under -DBFS_DEBUG_CHECKS.
#   CI=true adds -Werror.
#
# Layout: every module directory (base cache engine engine/dataset mountopts fs programs)
# contributes its *.c files to one static library, except files named *_main.c: the mains
# of the programs, all in programs/ (batchfs_main.c, mkbatchfs_main.c), each linked with
# the library. programs/ is the top layer (docs/architecture.md); its other files (`batchfs
# top`, `batchfs --bench`) sit in the library so tests and fuzzers link them like any
# module. gpu/ builds libbatchfs-gpu (.so, .a, .pc) from its own files and the engine
# objects they use.

PREFIX  ?= /usr/local
CC      ?= cc
CLANG   ?= clang
FUZZ_SECONDS ?= 20

ifneq ($(SANITIZER),)
BUILD   ?= build/san-$(SANITIZER)
else ifneq ($(DEBUG),)
BUILD   ?= build/debug
else
BUILD   ?= build
endif

PKGS    := fuse3 libturbojpeg liblz4 libjpeg hiredis libxxhash jansson libcrypto zlib spng libwebp libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
           -Wformat=2 -Wno-unused-parameter
ifeq ($(CI),true)
WARN    += -Werror
endif
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread -fPIC $(WARN) $(CFLAGS) \
              -I. $(PKG_CFLAGS) -MMD -MP
LDLIBS_ALL := -Wl,--as-needed $(PKG_LIBS) -lm -lpthread -ldl

# invariants (base/check.h) and lock-owner checks (engine/exec_jobs_internal.h, LOCKED):
# sanitizer builds and DEBUG=1
ifneq ($(SANITIZER)$(DEBUG),)
ALL_CFLAGS += -DBFS_DEBUG_CHECKS
endif
ifeq ($(SANITIZER),address)
ALL_CFLAGS += -fsanitize=address -fno-omit-frame-pointer
LDFLAGS    += -fsanitize=address
else ifeq ($(SANITIZER),undefined)
ALL_CFLAGS += -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS    += -fsanitize=undefined
else ifeq ($(SANITIZER),thread)
ALL_CFLAGS += -fsanitize=thread
LDFLAGS    += -fsanitize=thread
else ifneq ($(SANITIZER),)
$(error SANITIZER must be address, undefined or thread, not '$(SANITIZER)')
endif

MODULES  := base engine engine/dataset engine/remote cache mountopts fs programs
LIB_SRC  := $(filter-out %_main.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libbatchfs.a

PROGS    := $(BUILD)/mkbatchfs $(BUILD)/batchfs
TEST_SRC := $(wildcard tests/check_*.c)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TESTUTIL_OBJ := $(BUILD)/obj/tests/testutil.o
TOOLS    := $(patsubst tests/%_main.c,$(BUILD)/tests/%,$(wildcard tests/*_main.c))
BENCHES  := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/bench_*.c))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS  := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)

.PHONY: all deps test demo bench fuzz fuzz-build install uninstall clean format check-format \
        check-layering programs print-programs
# keep intermediate objects (tests/*_main.o etc.): no rebuilds on every make
.SECONDARY:

all: $(PROGS) $(TOOLS) gpu

# the two programs alone, and their absolute paths (python/setup.py copies them into the
# package it builds, from whatever BUILD this make uses)
programs: $(PROGS)
print-programs:
	@echo $(abspath $(PROGS))

# ---- dependencies ------------------------------------------------------------------------
# Debian packages: build (fuse3 headers, libjpeg-turbo both APIs, lz4, xxhash, jansson, hiredis,
# OpenSSL's libcrypto for remote_key= (HMAC-SHA256, Poly1305), zlib for compressed
# TFRecords, SentencePiece for mkbatchfs --tokenize, libspng and libwebp for PNG and WebP
# samples, libcurl for s3:// and https:// sources, check, pkg-config),
# run (fuse3 for fusermount3), test (clang + compiler-rt for libFuzzer, python3-venv for
# test clients, clang-format for make check-format, groff-base to render the man pages,
# nginx, openssl and curl for the servers and uploads of the remote-source tests).
# Installed only when missing.
DEB_PKGS := build-essential pkg-config libfuse3-dev fuse3 libjpeg62-turbo-dev libturbojpeg0-dev \
            liblz4-dev check clang libclang-rt-dev clang-format python3 python3-venv \
            libhiredis-dev redis-server iproute2 libxxhash-dev libjansson-dev groff-base libssl-dev \
            zlib1g-dev libsentencepiece-dev sentencepiece libspng-dev libwebp-dev \
            libcurl4-openssl-dev nginx openssl curl
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' \
	    || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; exit 0; fi; \
	echo "deps: installing$$missing"; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	else echo "deps: need root (or sudo) to run: apt-get install$$missing" >&2; exit 1; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $$missing

# ---- library and programs ----------------------------------------------------------------
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# programs/spm.cc: SentencePiece's C++ API behind C (mkbatchfs --tokenize), the one C++
# object, linked into mkbatchfs alone
CXX     ?= c++
ALL_CXXFLAGS := -std=c++17 -D_GNU_SOURCE -pthread -fPIC -Wall -Wextra $(filter -W%,$(WARN)) \
                $(CFLAGS) $(filter -fsanitize% -fno-%,$(ALL_CFLAGS)) -I. -MMD -MP
ALL_CXXFLAGS := $(filter-out -Wstrict-prototypes -Wmissing-prototypes,$(ALL_CXXFLAGS))
$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(ALL_CXXFLAGS) -c $< -o $@

$(BUILD)/mkbatchfs: $(BUILD)/obj/programs/mkbatchfs_main.o $(BUILD)/obj/programs/spm.o $(LIB)
	$(CXX) $(LDFLAGS) $^ $(LDLIBS_ALL) -lsentencepiece -o $@

$(BUILD)/batchfs: $(BUILD)/obj/programs/batchfs_main.o $(LIB)
	$(CC) $(LDFLAGS) $^ $(LDLIBS_ALL) -o $@

# ---- libbatchfs-gpu ------------------------------------------------------------------------
# build/libbatchfs-gpu.so (soname .so.1; exports bfsg_* only), build/libbatchfs-gpu.a (one
# relocatable object with the engine code it needs, bfsg_* global, the rest local),
# build/batchfs-gpu.pc. No CUDA at build or link time: the driver is dlopen'ed.
GPU_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard gpu/*.c)) $(BUILD)/obj/gen/convert_ptx.o
GPU_SO   := $(BUILD)/libbatchfs-gpu.so
GPU_A    := $(BUILD)/libbatchfs-gpu.a
GPU_PC   := $(BUILD)/batchfs-gpu.pc
FAKE_CUDA := $(BUILD)/tests/fakecuda/libcuda.so.1
.PHONY: gpu
gpu: $(GPU_SO) $(GPU_A) $(GPU_PC)

# the kernel's PTX text, embedded as a C string (gpu/convert.ptx is the source)
$(BUILD)/gen/convert_ptx.c: gpu/convert.ptx Makefile
	@mkdir -p $(@D)
	{ echo '/* generated from gpu/convert.ptx by the Makefile: do not edit */'; \
	  echo '#include "gpu/convert.h"'; echo 'const char bfsgi_convert_ptx[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $<; echo '    ;'; } >$@
$(BUILD)/obj/gen/convert_ptx.o: $(BUILD)/gen/convert_ptx.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(GPU_SO).1: $(GPU_OBJ) $(LIB) gpu/libbatchfs-gpu.map
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libbatchfs-gpu.so.1 -Wl,--version-script=gpu/libbatchfs-gpu.map \
	  -Wl,--no-undefined $(GPU_OBJ) $(LIB) -Wl,--as-needed -lxxhash -lm -lpthread -ldl -o $@
$(GPU_SO): $(GPU_SO).1
	ln -sf libbatchfs-gpu.so.1 $@
$(GPU_A): $(GPU_OBJ) $(LIB)
	$(CC) -r -nostdlib $(GPU_OBJ) $(LIB) -o $(BUILD)/obj/gpu/libbatchfs-gpu-all.o
	objcopy -w --keep-global-symbol='bfsg_*' $(BUILD)/obj/gpu/libbatchfs-gpu-all.o
	rm -f $@ && ar rcs $@ $(BUILD)/obj/gpu/libbatchfs-gpu-all.o
# the pkg-config file for PREFIX (make install writes it again for its own PREFIX)
gpu_pc = printf '%s\n' 'prefix=$(1)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: batchfs-gpu' 'Description: batches of a batchfs mount into GPU memory (CUDA loaded at run time)' \
	  'Version: 0.1.0' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lbatchfs-gpu' \
	  'Libs.private: -lxxhash -lm -lpthread -ldl'
$(GPU_PC): Makefile
	@mkdir -p $(@D)
	$(call gpu_pc,$(PREFIX)) >$@

# the test suite's fake CUDA driver (host memory behind the driver API)
$(FAKE_CUDA): tests/gpu/fake_cuda.c gpu/cuda_api.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -shared -Wl,-soname,libcuda.so.1 $< -lpthread -o $@

GPU_TOOL := $(BUILD)/tests/gpu_tool
$(GPU_TOOL): $(BUILD)/obj/tests/gpu/gpu_tool.o $(TESTUTIL_OBJ) $(LIB) $(GPU_SO)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(BUILD)/obj/tests/gpu/gpu_tool.o $(TESTUTIL_OBJ) $(LIB) -L$(BUILD) -lbatchfs-gpu \
	  -Wl,-rpath,$(abspath $(BUILD)) $(LDLIBS_ALL) -o $@

# ---- tests -------------------------------------------------------------------------------
$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -c $< -o $@

$(BUILD)/tests/check_%: $(BUILD)/obj/tests/check_%.o $(TESTUTIL_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(CHECK_LIBS) $(LDLIBS_ALL) -o $@

# check_gpu links the built shared library itself (the artifact users get)
$(BUILD)/tests/check_gpu: $(BUILD)/obj/tests/check_gpu.o $(TESTUTIL_OBJ) $(LIB) $(GPU_SO) $(FAKE_CUDA)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(BUILD)/obj/tests/check_gpu.o $(TESTUTIL_OBJ) $(LIB) -L$(BUILD) -lbatchfs-gpu \
	  -Wl,-rpath,$(abspath $(BUILD)) $(CHECK_LIBS) $(LDLIBS_ALL) -o $@

# check_fault links tests/fault.c and redirects the calls fault injection reaches to its
# shims (-Wl,--wrap: calls from the static objects only; tests/fault.h lists the classes)
FAULT_WRAP := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign \
  -Wl,--wrap=aligned_alloc,--wrap=strdup,--wrap=strndup,--wrap=asprintf \
  -Wl,--wrap=open64,--wrap=openat64,--wrap=mkostemp64,--wrap=opendir,--wrap=fdopendir \
  -Wl,--wrap=memfd_create,--wrap=read,--wrap=pread64,--wrap=write,--wrap=pwrite64 \
  -Wl,--wrap=sendmsg \
  -Wl,--wrap=ftruncate64,--wrap=fsetxattr,--wrap=fsync,--wrap=fdatasync,--wrap=readdir64 \
  -Wl,--wrap=mmap64,--wrap=rename,--wrap=renameat,--wrap=linkat,--wrap=mkdir,--wrap=mkdirat \
  -Wl,--wrap=pthread_create
$(BUILD)/tests/check_fault: $(BUILD)/obj/tests/check_fault.o $(BUILD)/obj/tests/fault.o $(TESTUTIL_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(FAULT_WRAP) $^ $(CHECK_LIBS) $(LDLIBS_ALL) -o $@

$(BUILD)/tests/%: $(BUILD)/obj/tests/%_main.o $(TESTUTIL_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS_ALL) -o $@

test: deps
	$(MAKE) --no-print-directory all-tests
	$(MAKE) --no-print-directory check-layering
	BUILD=$(BUILD) FUZZ_SECONDS=$${FUZZ_SECONDS:-5} bash tests/run.sh

.PHONY: all-tests
all-tests: all $(TESTS) $(TOOLS) $(FAKE_CUDA) $(GPU_TOOL)

# ---- fuzzing (clang, libFuzzer + ASan/UBSan; own object dir) -------------------------------
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread -g -O1 -I. $(PKG_CFLAGS) \
               -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -MMD -MP
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CLANG) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/obj/tests/fuzz/fuzz_%.o $(LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
	@mkdir -p $(@D)
	$(CLANG) -fsanitize=fuzzer,address,undefined $^ $(LDLIBS_ALL) -o $@

# ---- layering: the compiler's include and call graph keeps the layers ----------------------
# tests/check_layering.sh reads the .d files and symbols (nm) of every object of the
# library, the programs and libbatchfs-gpu (so it builds them first); tests/layering.allow
# lists today's known rule-breaking edges. A prerequisite of `make test`.
LAYER_OBJ := $(LIB_OBJ) $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard programs/*_main.c)) \
             $(BUILD)/obj/programs/spm.o $(GPU_OBJ)
check-layering: $(LAYER_OBJ)
	@BUILD=$(BUILD) CC="$(CC)" bash tests/check_layering.sh

fuzz-build: $(FUZZERS)
fuzz: deps
	$(MAKE) --no-print-directory fuzz-build
	@for f in $(FUZZERS); do FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh $$f || exit 1; done

# ---- demo and benchmarks -------------------------------------------------------------------
DEMO_DIR ?= $(BUILD)/demo
demo: deps
	$(MAKE) --no-print-directory all
	BUILD=$(BUILD) DEMO_DIR=$(DEMO_DIR) bash tests/demo.sh

$(BUILD)/bench/%: tests/bench/%.c $(TESTUTIL_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $^ $(LDLIBS_ALL) -o $@

bench: deps
	$(MAKE) --no-print-directory all $(BENCHES)
	BUILD=$(BUILD) bash tests/bench/run.sh

# ---- install -----------------------------------------------------------------------------
# Everything goes under $(DESTDIR)$(PREFIX). mount -t fuse.batchfs / fstab: util-linux runs
# mount.fuse.batchfs, found only in /sbin (and /sbin/fs.d, /sbin/fs): the helper goes to
# $(SBINDIR), $(PREFIX)/sbin unless given (`make install SBINDIR=/sbin` for mount(8) to
# find it); it runs libfuse's mount.fuse3 ($(MOUNT_FUSE3)), which runs `batchfs SOURCE MNT
# -o OPTIONS` found on PATH.
SBINDIR ?= $(PREFIX)/sbin
MOUNT_FUSE3 ?= $(firstword $(wildcard /sbin/mount.fuse3 /usr/sbin/mount.fuse3) /sbin/mount.fuse3)
# batchfs(1), mkbatchfs(1): troff in docs/man/ (checked against --help by
# tests/cli/man_pages.sh)
MANDIR  ?= $(PREFIX)/share/man
MAN_PAGES := docs/man/batchfs.1 docs/man/mkbatchfs.1
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/doc/batchfs
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/batchfs/
	install -d $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(GPU_SO).1 $(DESTDIR)$(PREFIX)/lib/
	ln -sf libbatchfs-gpu.so.1 $(DESTDIR)$(PREFIX)/lib/libbatchfs-gpu.so
	install -m 644 $(GPU_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 gpu/batchfs_gpu.h $(DESTDIR)$(PREFIX)/include/
	$(call gpu_pc,$(PREFIX)) >$(DESTDIR)$(PREFIX)/lib/pkgconfig/batchfs-gpu.pc
	@# mount(8)'s helper for type fuse.batchfs: mount.fuse3 runs `batchfs ...` through
	@# /bin/sh, and mount(8) gives helpers no PATH, so the helper puts PREFIX/bin first
	@if [ -x $(MOUNT_FUSE3) ]; then \
	  install -d $(DESTDIR)$(SBINDIR) && rm -f $(DESTDIR)$(SBINDIR)/mount.fuse.batchfs && \
	  printf '%s\n' '#!/bin/sh' \
	    '# mount -t fuse.batchfs / fstab: installed by batchfs (make install PREFIX=$(PREFIX))' \
	    'PATH="$(PREFIX)/bin:$${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"' \
	    'export PATH' 'exec "$(MOUNT_FUSE3)" "$$@" -t fuse.batchfs' \
	    >$(DESTDIR)$(SBINDIR)/mount.fuse.batchfs && chmod 755 $(DESTDIR)$(SBINDIR)/mount.fuse.batchfs && \
	  echo "installed $(DESTDIR)$(SBINDIR)/mount.fuse.batchfs (runs $(PREFIX)/bin/batchfs via $(MOUNT_FUSE3))"; \
	  case "$(SBINDIR)" in /sbin|/sbin/fs.d|/sbin/fs) ;; \
	  *) echo "note: mount(8) looks for mount.fuse.batchfs in /sbin only: for mount -t fuse.batchfs and fstab, install with SBINDIR=/sbin (or link it there)";; esac; \
	else echo "note: $(MOUNT_FUSE3) not found (package fuse3; MOUNT_FUSE3= names it): mount -t fuse.batchfs needs it"; fi

uninstall:
	rm -f $(PROGS:$(BUILD)/%=$(DESTDIR)$(PREFIX)/bin/%)
	rm -f $(DESTDIR)$(PREFIX)/lib/libbatchfs-gpu.so $(DESTDIR)$(PREFIX)/lib/libbatchfs-gpu.so.1 \
	  $(DESTDIR)$(PREFIX)/lib/libbatchfs-gpu.a $(DESTDIR)$(PREFIX)/include/batchfs_gpu.h \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/batchfs-gpu.pc
	@# the mount helper only if it is this PREFIX's (another install may own it), or the
	@# link to mount.fuse3 that earlier versions installed
	h="$(DESTDIR)$(SBINDIR)/mount.fuse.batchfs"; \
	if [ "$$(readlink "$$h")" = mount.fuse3 ] || grep -qs '^PATH="$(PREFIX)/bin:' "$$h"; then \
	  rm -f "$$h"; fi
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/batchfs
	rm -f $(MAN_PAGES:docs/man/%=$(DESTDIR)$(MANDIR)/man1/%)

clean:
	rm -rf build python/build python/batchfs.egg-info

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
check-format:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

-include $(shell find $(BUILD)/obj $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)
