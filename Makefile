# ddpdbg -- the only build file. `make help` lists the targets.
CC       ?= cc
CXX      ?= c++
OPT      ?= -O2
SAN      ?=
CFLAGS   ?= $(OPT) -g
CFLAGS   += $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Werror=implicit-function-declaration \
            -Wno-unused-parameter -fopenmp
CPPFLAGS += -I. -I/usr/include/x86_64-linux-gnu -MMD -MP
LDFLAGS  += -fopenmp $(SAN)
LDLIBS   += -lyaml -lpng -ljpeg -lgloo -lsqlite3 -lm -lpthread -ldl

# --- optional features: detected from files, printed once; force with CUDA=0|1, NCCL=0|1 -----
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
CUDA_FOUND = $(if $(NVCC),1,0)
# No CUDA kernels exist yet: the build is CPU-only whatever is found, and says so.
BUILD    ?= build/cpu
BIN      ?= bin
# NCCL, the process group's second backend (trainer/dist/comm_nccl.c): in when all of these
# exist; without it comm_nccl.c compiles to a stub whose pg_new("nccl") says so.
NCCL_FILES := $(CUDA_HOME)/include/nccl.h $(CUDA_HOME)/include/cuda_runtime.h \
              $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib64/libcudart.so
NCCL_MISSING := $(filter-out $(wildcard $(NCCL_FILES)),$(NCCL_FILES))
NCCL     ?= $(if $(NCCL_MISSING),0,1)
ifeq ($(filter 0 1,$(NCCL)),)
  $(error NCCL=$(NCCL): expected 0 or 1)
endif
ifeq ($(NCCL)$(if $(NCCL_MISSING),x),1x)
  $(error NCCL=1 but $(CUDA_HOME) lacks $(NCCL_MISSING))
endif
ifeq ($(NCCL),1)
  # Only the two files that include nccl.h see CUDA's headers; every binary may link NCCL,
  # --as-needed keeps it out of those that never call it.
  $(BUILD)/trainer/dist/comm_nccl.o $(BUILD)/tests/test_comm_nccl.o: \
    CPPFLAGS += -DDDPDBG_HAVE_NCCL -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,--as-needed -lnccl -lcudart \
              -Wl,--no-as-needed
endif
# Switching NCCL in or out dates the objects it compiles differently back to 1970, so they are
# rebuilt (removing them would not do: .SECONDARY). The setting is kept in $(BUILD)/nccl.setting.
$(shell s=$(BUILD)/nccl.setting; [ "$$(cat $$s 2>/dev/null)" = $(NCCL) ] || { \
  touch -c -d @0 $(BUILD)/trainer/dist/comm_nccl.o $(BUILD)/tests/test_comm_nccl.o; \
  mkdir -p $(BUILD) && echo $(NCCL) > $$s; })
CONFIG_NVCC := $(if $(NVCC),found at $(NVCC) (no CUDA kernels yet: CPU build),not found: CPU build)
CONFIG_NCCL := $(if $(filter 1,$(NCCL)),in ($(CUDA_HOME)),out \
               ($(if $(NCCL_MISSING),no $(firstword $(NCCL_MISSING)),NCCL=0)))
ifeq ($(MAKELEVEL),0)
  $(info config: nvcc $(CONFIG_NVCC); NCCL $(CONFIG_NCCL) -> $(BUILD))
endif

# --- sources: one list per top-level folder ----------------------------------------------------
KERNELS  := kernels/backend.c $(wildcard kernels/cpu/*.c)
TRAINER  := $(filter-out trainer/main.c,$(wildcard trainer/*.c trainer/*/*.c)) \
            $(wildcard trainer/dist/*.cc)
PROBE    := $(wildcard probe/*.c)
TESTLIB  := $(filter-out tests/test_% tests/bench_% tests/fuzz_%,$(wildcard tests/*.c))
obj       = $(patsubst %,$(BUILD)/%.o,$(basename $(1)))
MODELS   := $(sort $(wildcard trainer/models/*.yaml))
LIBOBJ   := $(call obj,$(TRAINER) $(KERNELS) $(PROBE)) $(BUILD)/gen/models.o $(BUILD)/gen/schema.o
# The trainer and kernels as one archive: a binary links only the objects it uses.
LIB      := $(BUILD)/libddpdbg.a
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
BENCHES  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/bench_*.c))
TRAIN    := $(BIN)/ddpdbg-train
TUI      := $(wildcard tui/*.c)
VIEWER   := $(if $(TUI),$(BIN)/ddpdbg)

.PHONY: all test debug bench deps golden clean help format demo examples
all: $(TRAIN) $(VIEWER) $(TESTS)

$(LIB): $(LIBOBJ)
	$(call Q,AR)rm -f $@ && ar rcs $@ $^
$(TRAIN): $(call obj,trainer/main.c) $(LIB)
	@mkdir -p $(@D)
	$(call Q,LINK)$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@
# bin/ddpdbg: the launcher and viewer; from the library it takes only the probe (traces).
$(BIN)/ddpdbg: $(call obj,$(TUI)) $(LIB)
	@mkdir -p $(@D)
	$(call Q,LINK)$(CC) $(LDFLAGS) $^ -lsqlite3 -lm -lpthread -o $@
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(call obj,$(TESTLIB)) $(LIB)
	$(call Q,LINK)$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@

# Each test binary: 0 pass, 77 skip, anything else fail. The last line is the CI summary.
test: all
	@bash tests/run_tests.sh $(BUILD)/tests $(TRAIN) $(T)

debug:
	$(MAKE) BUILD=build/debug BIN=build/debug/bin OPT="-O1 -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

bench: $(TRAIN) $(BENCHES)
	@bash tests/run_bench.sh $(BUILD)/tests $(TRAIN)

# The main job on its embedded default, the field report by itself: a synthetic dataset with
# background images, then 2 ranks of rtdetr-tiny at batch 1 under `ddpdbg run`. A rank whose
# batch holds no box fails DDP's reduction as in the field report (live in the TUI on a
# terminal); the trace stays in $(DEMO)/trace for `bin/ddpdbg report` and `bin/ddpdbg tui`.
DEMO ?= build/demo
demo: $(TRAIN) $(VIEWER)
	@[ -f $(DEMO)/synth/data.yaml ] || $(TRAIN) synth out=$(DEMO)/synth n=64 imgsz=96 classes=3 empty=0.25 seed=0
	-$(BIN)/ddpdbg run --nproc-per-node 2 --trace $(DEMO)/trace -- train model=rtdetr-tiny.yaml \
	  data=$(DEMO)/synth/data.yaml imgsz=96 batch=1 epochs=1 val=false out=$(DEMO)/run
	@echo "demo: the trace is in $(DEMO)/trace; see it again with: bin/ddpdbg report $(DEMO)/trace"

# Installs the Debian packages the build needs; a no-op when they are present.
DEB_PKGS := build-essential libopenblas-dev libopenblas0-openmp libyaml-dev libsqlite3-dev sqlite3 libncurses-dev \
            libpng-dev libjpeg-dev libgloo-dev clang tmux
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi

# Regenerates the committed PyTorch reference vectors (needs Debian's python3-torch).
golden:
	/usr/bin/python3 tests/golden/make_golden.py tests/golden
	/usr/bin/python3 tests/golden/make_optim.py tests/golden
	/usr/bin/python3 tests/golden/make_scipy.py tests/golden
	/usr/bin/python3 tests/golden/make_loss.py tests/golden
	/usr/bin/python3 tests/golden/ddp/make_ddp.py

# Example traces, committed under traces/examples/<scenario>/: short real 2-rank runs of
# rtdetr-tiny (96 px, batch 1, 6 training images, so 3 iterations an epoch) recorded by
# `ddpdbg run --trace`, then VACUUMed. What each shows: `ddpdbg report traces/examples/X`.
# A run's own exit status is the scenario's (the field report fails, the hang exits 124), so
# it is not checked; that every rank wrote its database is.
EXAMPLES     ?= traces/examples
, := ,
EXAMPLE_DATA := build/examples/data
EXAMPLE_RUN   = rm -rf $(EXAMPLES)/$(1) && timeout -k 5 180 $(BIN)/ddpdbg run --nproc-per-node 2 \
  --master-port $(2) --no-tui --trace $(EXAMPLES)/$(1) $(3) -- train model=rtdetr-tiny.yaml \
  data=$(EXAMPLE_DATA)/data.yaml imgsz=96 batch=1 val=false out=build/examples/run-$(1) $(4) \
  >build/examples/$(1).log 2>&1; \
  for db in $(EXAMPLES)/$(1)/rank0.db $(EXAMPLES)/$(1)/rank1.db; do \
    [ -s $$db ] || { echo "examples: $(1): no $$db (log: build/examples/$(1).log)" >&2; exit 1; }; \
    sqlite3 $$db VACUUM || exit 1; done; \
  echo "  $(1): $$(du -cb $(EXAMPLES)/$(1)/rank*.db | tail -1 | cut -f1) bytes"
examples: $(TRAIN) $(BIN)/ddpdbg
	@command -v sqlite3 >/dev/null || { echo "examples: needs the sqlite3 command (make deps)" >&2; exit 1; }
	@mkdir -p build/examples
	@[ -f $(EXAMPLE_DATA)/data.yaml ] || $(TRAIN) synth out=$(EXAMPLE_DATA) n=8 imgsz=96 classes=3 empty=0 seed=1 >/dev/null
	@$(call EXAMPLE_RUN,healthy,29611,,epochs=1)
	@$(call EXAMPLE_RUN,field_report,29612,,epochs=1 fault=nogt:rank=0$(,)iter=1)
	@$(call EXAMPLE_RUN,find_unused,29613,,epochs=1 fault=nogt:rank=0$(,)iter=1 find_unused_parameters=true)
	@$(call EXAMPLE_RUN,hang_skip_backward,29614,--hang-timeout 3,epochs=2 fault=skip_backward:rank=1$(,)iter=1)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build bin

help:
	@echo 'make            build bin/ddpdbg-train and the tests (build/cpu)'
	@echo 'make demo       the field report by itself: 2 DDP ranks, a batch without boxes, traced'
	@echo 'make test [T=x] run every test (or tests/test_x) ; last line "N passed, N failed"'
	@echo 'make debug      the tests under ASan+UBSan (build/debug)'
	@echo 'make bench      benchmarks (timings are printed, never asserted)'
	@echo 'make examples   record the example traces in traces/examples/ (2-rank rtdetr-tiny runs)'
	@echo 'make deps       apt-get the Debian packages the build needs'
	@echo 'make golden     regenerate tests/golden with python3-torch'
	@echo 'switches: V=1 (verbose) OPT=-O3 BUILD=dir'

$(BUILD)/gen/models.c: $(MODELS) trainer/models/embed.sh
	@mkdir -p $(@D)
	$(call Q,GEN)sh trainer/models/embed.sh $@ $(MODELS)
$(BUILD)/gen/models.o: $(BUILD)/gen/models.c
	$(call Q,CC)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The revision recorded in every trace's metadata (trainer/trace.c).
REVISION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/trainer/trace.o: CPPFLAGS += -DDDPDBG_REVISION='"$(REVISION)"'

# The trace schema, compiled into the probe from traces/schema.sql (its one definition).
$(BUILD)/gen/schema.c: traces/schema.sql probe/embed_schema.sh
	@mkdir -p $(@D)
	$(call Q,GEN)sh probe/embed_schema.sh $@ traces/schema.sql
$(BUILD)/gen/schema.o: $(BUILD)/gen/schema.c
	$(call Q,CC)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

ifndef V
  Q = @printf '  %-5s %s\n' $(1) $@;
endif
$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(call Q,CC)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	$(call Q,CXX)$(CXX) $(CPPFLAGS) $(OPT) -g $(SAN) -std=c++17 -Wall -Wextra -c $< -o $@
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
