# ddpdbg -- the only build file. `make help` lists the targets.
CC       ?= cc
CXX      ?= c++
OPT      ?= -O2
SAN      ?=
# ARCH: the CPU the C code is compiled for. native (the default): the machine that builds is the
# one that runs, and the kernels' loops use its widest vectors (AVX-512 here: rtdetr-l's step
# 7 % faster than on the x86-64 baseline). x86-64 (or x86-64-v3, ...) for binaries that run on
# other machines; `make gpu-carry` builds its kit so. -std=c11 keeps a * b + c two roundings
# on every ARCH (GCC contracts into FMA only outside ISO C), so results differ between ARCHes
# only where a vectorised reduction sums in another order.
ARCH     ?= native
CFLAGS   ?= $(OPT) -g
CFLAGS   += -march=$(ARCH) $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Werror=implicit-function-declaration \
            -Wno-unused-parameter -fopenmp
CPPFLAGS += -I. -I/usr/include/x86_64-linux-gnu -MMD -MP
LDFLAGS  += -fopenmp $(SAN)
LDLIBS   += -lyaml -lpng -ljpeg -lgloo -lsqlite3 -lm -lpthread -ldl

# --- optional features: detected from files, printed once; force with CUDA=0|1, NCCL=0|1, CUPTI=0|1
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls $(CUDA_HOME)/bin/nvcc 2>/dev/null)
# CUDA=1: the CUDA backend (kernels/cuda/, cuBLAS) too, built into its own folder (build/cuda,
# its binaries in build/cuda/bin) for Hopper (sm_90) plus PTX, which later GPUs compile at
# start. The default stays the CPU build (build/cpu, bin/): CUDA=1 is asked for, never implied.
CUDA     ?= 0
ifeq ($(filter 0 1,$(CUDA)),)
  $(error CUDA=$(CUDA): expected 0 or 1)
endif
ifeq ($(CUDA)$(NVCC),1)
  $(error CUDA=1 but nvcc was not found (in PATH or $(CUDA_HOME)/bin); pass NVCC=/path/to/nvcc)
endif
BUILD    ?= build/$(if $(filter 1,$(CUDA)),cuda,cpu)
BIN      ?= $(if $(filter 1,$(CUDA)),$(BUILD)/bin,bin)
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
  # Only the files that include nccl.h or ask which build this is see CUDA's headers; every binary may link NCCL,
  # --as-needed keeps it out of those that never call it.
  $(BUILD)/trainer/dist/comm_nccl.o $(BUILD)/tests/test_comm_nccl.o $(BUILD)/tests/test_comm_device.o: \
    CPPFLAGS += -DDDPDBG_HAVE_NCCL -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,--as-needed -lnccl -lcudart \
              -Wl,--no-as-needed
endif
# CUPTI, the GPU activity in the probe's trace (probe/cupti.c): in when NCCL is (its CUDA runtime
# and the collectives the activity is tied to) and these exist; without it probe/cupti.c
# compiles to stubs whose start says so.
CUPTI_FILES := $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/lib64/libcupti.so
CUPTI_MISSING := $(filter-out $(wildcard $(CUPTI_FILES)),$(CUPTI_FILES))
CUPTI    ?= $(if $(CUPTI_MISSING)$(filter 0,$(NCCL)),0,1)
ifeq ($(filter 0 1,$(CUPTI)),)
  $(error CUPTI=$(CUPTI): expected 0 or 1)
endif
ifeq ($(CUPTI)$(if $(CUPTI_MISSING),x),1x)
  $(error CUPTI=1 but $(CUDA_HOME) lacks $(CUPTI_MISSING))
endif
ifeq ($(CUPTI)$(NCCL),10)
  $(error CUPTI=1 needs NCCL=1 (the CUDA runtime and the collectives it records))
endif
ifeq ($(CUPTI),1)
  $(BUILD)/probe/cupti.o $(BUILD)/tests/test_probe_cupti.o: \
    CPPFLAGS += -DDDPDBG_HAVE_CUPTI -I$(CUDA_HOME)/include
  LDLIBS   += -Wl,--as-needed -lcupti -Wl,--no-as-needed
endif
# The CUDA build: kernels/backend.c's registry (USE_CUDA), the table and test_parity see CUDA's
# headers; every binary links cuBLAS and the runtime (--as-needed drops them where unused).
# nvcc: -fmad=false keeps a*b+c two roundings, as the CPU's kernels round (tight parity);
# -lineinfo maps compute-sanitizer's reports to source lines; warnings are errors.
CUDA_ARCH ?= -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= -O2 -g -lineinfo
NVCCFLAGS += -std=c++17 $(CUDA_ARCH) -fmad=false -Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror -I. -MMD -MP
ifeq ($(CUDA),1)
  $(BUILD)/kernels/backend.o $(BUILD)/kernels/cuda/backend_cuda.o $(BUILD)/tests/test_parity.o: \
    CPPFLAGS += -DUSE_CUDA -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,--as-needed -lcublas -lcudart \
              -Wl,--no-as-needed
endif
# Switching NCCL or CUPTI in or out dates the objects it compiles differently back to 1970, so
# they are rebuilt (removing them would not do: .SECONDARY); switching ARCH dates every object.
# The settings are kept in $(BUILD)/nccl.setting, $(BUILD)/cupti.setting and $(BUILD)/arch.setting.
$(shell s=$(BUILD)/nccl.setting; [ "$$(cat $$s 2>/dev/null)" = $(NCCL) ] || { \
  touch -c -d @0 $(BUILD)/trainer/dist/comm_nccl.o $(BUILD)/tests/test_comm_nccl.o $(BUILD)/tests/test_comm_device.o; \
  mkdir -p $(BUILD) && echo $(NCCL) > $$s; })
$(shell s=$(BUILD)/arch.setting; [ "$$(cat $$s 2>/dev/null)" = $(ARCH) ] || { \
  [ -d $(BUILD) ] && find $(BUILD) -name '*.o' -exec touch -c -d @0 {} +; \
  mkdir -p $(BUILD) && echo $(ARCH) > $$s; })
$(shell s=$(BUILD)/cupti.setting; [ "$$(cat $$s 2>/dev/null)" = $(CUPTI) ] || { \
  touch -c -d @0 $(BUILD)/probe/cupti.o $(BUILD)/tests/test_probe_cupti.o; \
  mkdir -p $(BUILD) && echo $(CUPTI) > $$s; })
CONFIG_NVCC := $(if $(filter 1,$(CUDA)),$(NVCC): CUDA build,$(if $(NVCC),found at $(NVCC) (CPU \
               build; CUDA=1 adds the CUDA backend),not found: CPU build))
CONFIG_NCCL := $(if $(filter 1,$(NCCL)),in ($(CUDA_HOME)),out \
               ($(if $(NCCL_MISSING),no $(firstword $(NCCL_MISSING)),NCCL=0)))
CONFIG_CUPTI := $(if $(filter 1,$(CUPTI)),in,out ($(if $(CUPTI_MISSING),no \
                $(firstword $(CUPTI_MISSING)),$(if $(filter 0,$(NCCL)),no NCCL,CUPTI=0))))
ifeq ($(MAKELEVEL),0)
  $(info config: nvcc $(CONFIG_NVCC); NCCL $(CONFIG_NCCL); CUPTI $(CONFIG_CUPTI) -> $(BUILD))
endif

# --- sources: one list per top-level folder ----------------------------------------------------
KERNELS  := kernels/backend.c $(wildcard kernels/cpu/*.c) \
            $(if $(filter 1,$(CUDA)),$(wildcard kernels/cuda/*.c kernels/cuda/*.cu))
TRAINER  := $(filter-out trainer/main.c,$(wildcard trainer/*.c trainer/*/*.c)) \
            $(wildcard trainer/dist/*.cc)
PROBE    := $(wildcard probe/*.c)
TESTLIB  := $(filter-out tests/test_% tests/bench_% tests/fuzz_% tests/parity%,$(wildcard tests/*.c))
obj       = $(patsubst %,$(BUILD)/%.o,$(basename $(1)))
MODELS   := $(sort $(wildcard trainer/models/*.yaml))
LIBOBJ   := $(call obj,$(TRAINER) $(KERNELS) $(PROBE)) $(BUILD)/gen/models.o $(BUILD)/gen/schema.o
# The trainer and kernels as one archive: a binary links only the objects it uses.
LIB      := $(BUILD)/libddpdbg.a
# (The CUDA build runs the real kernels' parity, test_parity, not the emulation's: both tables
# would define the same symbols.)
TESTS    := $(filter-out $(if $(filter 1,$(CUDA)),$(BUILD)/tests/test_parity_emu), \
              $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c)))
BENCHES  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/bench_*.c))
TRAIN    := $(BIN)/ddpdbg-train
TUI      := $(wildcard tui/*.c tui/*/*.c)
VIEWER   := $(if $(TUI),$(BIN)/ddpdbg)
# libddpdbg_probe.so: the probe with its C ABI for foreign processes (probe/abi.h; the Python
# attach in python/ddpdbg loads it). Position-independent copies of the probe's objects, built
# without $(SAN): a sanitizer runtime cannot be loaded into a Python that lacks it.
PROBE_SO     := $(BUILD)/lib/libddpdbg_probe.so
PROBE_SO_OBJ := $(patsubst %.c,$(BUILD)/pic/%.o,probe/abi.c probe/probe.c probe/ring.c \
                probe/tracedb.c) $(BUILD)/pic/gen/schema.o

.PHONY: all test debug bench deps golden clean help format demo examples fake-table
# The benchmarks are built too (not run): one that no longer compiles shows at once.
all: $(TRAIN) $(VIEWER) $(PROBE_SO) $(TESTS) $(BENCHES)

$(PROBE_SO): $(PROBE_SO_OBJ)
	@mkdir -p $(@D)
	$(call Q,LINK)$(CC) -shared -Wl,-z,defs -Wl,-rpath,'$$ORIGIN' $^ -lsqlite3 -lpthread -o $@
$(BUILD)/pic/gen/schema.o: $(BUILD)/gen/schema.c
	@mkdir -p $(@D)
	$(call Q,CC)$(CC) $(CPPFLAGS) $(OPT) -g -std=c11 -D_GNU_SOURCE -fPIC -c $< -o $@
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(call Q,CC)$(CC) $(CPPFLAGS) $(OPT) -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow \
	  -Wno-unused-parameter -fvisibility=default -fPIC -c $< -o $@

$(LIB): $(LIBOBJ)
	$(call Q,AR)rm -f $@ && ar rcs $@ $^
$(TRAIN): $(call obj,trainer/main.c) $(LIB)
	@mkdir -p $(@D)
	$(call Q,LINK)$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@
# bin/ddpdbg: the launcher and viewer; from the library it takes only the probe (traces).
$(BIN)/ddpdbg: $(call obj,$(TUI)) $(LIB)
	@mkdir -p $(@D)
	$(call Q,LINK)$(CC) $(LDFLAGS) $^ -lncurses -lsqlite3 -lm -lpthread -o $@
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(call obj,$(TESTLIB)) $(LIB)
	$(call Q,LINK)$(CXX) $(LDFLAGS) $^ $(LDLIBS) -o $@
# The tests and benchmark of the viewer's model, diagnosis and report also link those (no ncurses).
TUI_CORE := $(call obj,$(wildcard tui/model/*.c tui/diagnosis/*.c))
$(BUILD)/tests/test_tracemodel $(BUILD)/tests/test_diagnose $(BUILD)/tests/bench_report: $(TUI_CORE)
# ... and the model test the teaching mode's loader, on the example traces.
$(BUILD)/tests/test_tracemodel: $(call obj,tui/teach/teach.c tui/teach/teach_load.c tui/views/facts.c)
# The kernel parity tests link the parity harness and its case table.
$(BUILD)/tests/test_parity $(BUILD)/tests/test_parity_harness $(BUILD)/tests/test_parity_emu: \
  $(call obj,tests/parity.c tests/parity_cases.c)
# The CUDA emulation (tests/cuda_emu/emu.h), in every build: kernels/cuda/*.cu compiled by the
# host C++ compiler once their launches are rewritten (chevrons.pl), with stand-in CUDA and
# cuBLAS headers, never contracting a * b + c (as nvcc's -fmad=false); test_parity_emu runs the
# parity table against them.
EMU_OBJ  := $(patsubst kernels/cuda/%.cu,$(BUILD)/emu/%.o,$(wildcard kernels/cuda/*.cu)) \
            $(BUILD)/emu/backend_cuda.o $(BUILD)/tests/cuda_emu/emu.o
$(BUILD)/tests/test_parity_emu: $(EMU_OBJ)
$(BUILD)/emu/%.cc: kernels/cuda/%.cu tests/cuda_emu/chevrons.pl
	@mkdir -p $(@D)
	$(call Q,EMU)perl -0p tests/cuda_emu/chevrons.pl $< >$@
$(BUILD)/emu/%.o: $(BUILD)/emu/%.cc
	$(call Q,CXX)$(CXX) $(CPPFLAGS) -Itests/cuda_emu -include tests/cuda_emu/emu.h -DCUDA_THREADS=32 \
	  $(OPT) -g $(SAN) -ffp-contract=off \
	  -std=c++17 -Wall -Wextra -Wno-unused-parameter -c $< -o $@
$(BUILD)/emu/backend_cuda.o: kernels/cuda/backend_cuda.c
	@mkdir -p $(@D)
	$(call Q,CC)$(CC) $(CPPFLAGS) -Itests/cuda_emu $(CFLAGS) -c $< -o $@
# The post-mortem readers' tests: the pickle and Flight Recorder readers, the log scanner.
$(BUILD)/tests/test_pickle: $(call obj,tui/postmortem/pickle.c tui/postmortem/flightrec.c tui/postmortem/readall.c)
$(BUILD)/tests/test_logscan: $(call obj,tui/postmortem/logscan.c)
# Where `ddpdbg run` and `ddpdbg env` find the attach's Python package and probe library.
$(BUILD)/tui/launch/foreign.o: CPPFLAGS += -DDDPDBG_PYTHON_DIR='"$(abspath python)"' \
  -DDDPDBG_PROBE_LIB='"$(abspath $(PROBE_SO))"'
$(BIN)/ddpdbg: | $(PROBE_SO)
$(BUILD)/tests/test_torchrun_args: $(call obj,tui/launch/torchrun_args.c)
# test_probe_abi dlopens the shared library, as Python's ctypes does.
$(BUILD)/tests/test_probe_abi.o: CPPFLAGS += -DPROBE_SO_PATH='"$(abspath $(PROBE_SO))"'
$(BUILD)/tests/test_probe_abi: | $(PROBE_SO)
# The views' render test and benchmark build Models by hand; they link the model's accessors.
$(BUILD)/tests/test_tui_render $(BUILD)/tests/bench_tui: $(call obj,tui/model/model_fold.c)
$(BUILD)/tests/test_watchdog: $(call obj,tui/launch/watchdog.c)
# the first screen on a recorded trace: the model, the diagnosis and its short form
$(BUILD)/tests/test_tui_render: $(call obj,tui/model/model.c tui/diagnosis/diagnose.c \
  tui/diagnosis/diagnose_grad.c tui/diagnosis/diagnose_setup.c tui/diagnosis/rootcause.c)

# Each test binary: 0 pass, 77 skip, anything else fail. The last line is the CI summary.
# DEVICE=fake (or cpu): the trainer's default device for the run (DDPDBG_DEVICE, read by
# trainer/device.c), so training, DDP, fault and trace tests run on that device.
test: all
	@$(if $(DEVICE),DDPDBG_DEVICE=$(DEVICE) )bash tests/run_tests.sh $(BUILD)/tests $(TRAIN) $(T)

debug:
	$(MAKE) BUILD=build/debug BIN=build/debug/bin OPT="-O1 -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

bench: $(TRAIN) $(BENCHES) $(VIEWER) $(PROBE_SO)
	@bash tests/run_bench.sh $(BUILD)/tests $(TRAIN)
	@echo "==== bench_attach (tests/pytorch/bench_attach.py)"
	@/usr/bin/python3 tests/pytorch/bench_attach.py --ddpdbg $(BIN)/ddpdbg

# The main job on its embedded default, the field report by itself: a synthetic dataset with
# background images, then 2 ranks of rtdetr-tiny at batch 1 under `ddpdbg run`. A rank whose
# batch holds no box (mosaic=0: a mosaic would give the background image its partners' boxes)
# fails DDP's reduction as in the field report (live in the TUI on a
# terminal); the trace stays in $(DEMO)/trace for `bin/ddpdbg report` and `bin/ddpdbg tui`.
DEMO ?= build/demo
demo: $(TRAIN) $(VIEWER)
	@[ -f $(DEMO)/synth/data.yaml ] || $(TRAIN) synth out=$(DEMO)/synth n=64 imgsz=96 classes=3 empty=0.25 seed=0
	-$(BIN)/ddpdbg run --nproc-per-node 2 --trace $(DEMO)/trace -- train model=rtdetr-tiny.yaml \
	  data=$(DEMO)/synth/data.yaml imgsz=96 batch=1 epochs=1 val=false mosaic=0 out=$(DEMO)/run
	@echo "demo: the trace is in $(DEMO)/trace; see it again with: bin/ddpdbg report $(DEMO)/trace"

# Installs the Debian packages the build needs; a no-op when they are present.
DEB_PKGS := build-essential libopenblas-dev libopenblas0-openmp libyaml-dev libsqlite3-dev sqlite3 libncurses-dev \
            libpng-dev libjpeg-dev libgloo-dev clang tmux iproute2 python3-torch python3-yaml python3-numpy python3-pil
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: all present"; fi

# Regenerates the fake device's table (kernels/cpu/backend_fake.c) after a Backend field is added.
fake-table:
	python3 kernels/cpu/gen_backend_fake.py > kernels/cpu/backend_fake.c

# Regenerates the committed PyTorch reference vectors (needs Debian's python3-torch).
golden:
	/usr/bin/python3 tests/golden/make_golden.py tests/golden
	/usr/bin/python3 tests/golden/make_optim.py tests/golden
	/usr/bin/python3 tests/golden/make_scipy.py tests/golden
	/usr/bin/python3 tests/golden/make_loss.py tests/golden
	/usr/bin/python3 tests/golden/ddp/make_ddp.py

# Example traces, committed under traces/examples/<scenario>/: every scenario of the failure
# catalog (`ddpdbg scenario list`, tui/teach/scenario.c: rtdetr-tiny, 2 ranks, 96 px, batch 1) run by
# `ddpdbg scenario run NAME --trace`, its dataset and checkpoints kept in build/examples/, then
# each rank's database VACUUMed. A scenario whose diagnosis misses its cause fails the target,
# and so does a trace above EXAMPLE_MAX_BYTES (all ranks together): they are committed, and read
# by the post-mortem tests (tests/cli/report.sh, test_diagnose, test_tracemodel). What each one
# shows: `ddpdbg report traces/examples/NAME`.
EXAMPLES          ?= traces/examples
EXAMPLE_MAX_BYTES := 1000000
examples: $(TRAIN) $(BIN)/ddpdbg
	@command -v sqlite3 >/dev/null || { echo "examples: needs the sqlite3 command (make deps)" >&2; exit 1; }
	@mkdir -p build/examples && for s in $$($(BIN)/ddpdbg scenario list | cut -d' ' -f1); do \
	  rm -rf $(EXAMPLES)/$$s build/examples/$$s/run; \
	  timeout -k 5 300 $(BIN)/ddpdbg scenario run $$s --no-tui --trace $(EXAMPLES)/$$s \
	    --work build/examples/$$s >build/examples/$$s.log 2>&1 || \
	    { echo "examples: $$s: the diagnosis missed its cause (log: build/examples/$$s.log)" >&2; exit 1; }; \
	  for db in $(EXAMPLES)/$$s/rank*.db; do sqlite3 $$db VACUUM || exit 1; done; \
	  bytes=$$(du -cb $(EXAMPLES)/$$s/rank*.db | tail -1 | cut -f1); echo "  $$s: $$bytes bytes"; \
	  [ $$bytes -le $(EXAMPLE_MAX_BYTES) ] || \
	    { echo "examples: $$s: $$bytes bytes, above EXAMPLE_MAX_BYTES=$(EXAMPLE_MAX_BYTES)" >&2; exit 1; }; \
	done

# --- fuzzing: `make fuzz` -----------------------------------------------------------------------
# libFuzzer targets (tests/fuzz_<name>.c) under ASan+UBSan, built by Debian's clang into
# $(FUZZ). Each links only the sources it tests, compiled by clang into $(FUZZ)/obj: the
# library's objects are gcc's with OpenMP, and none of these need Gloo. Each runs FUZZ_SECONDS
# from its seeds (the repo's own files, real rings and a small trace made by fuzz_seeds, and any
# reproducer kept in tests/fixtures/fuzz/<name>/) plus what earlier runs found
# ($(FUZZ)/corpus/<name>). A crash, leak, undefined behaviour, timeout or broken contract fails
# the target; its input stays in $(FUZZ)/crash/<name>/ (rerun: $(FUZZ)/fuzz_<name> FILE); a
# crash worth keeping becomes a seed in tests/fixtures/fuzz/<name>/. FUZZ_SEED=N fixes
# libFuzzer's random seed, so that the same inputs are tried first on every run (CI's setting:
# its verdict on a commit does not depend on the draw); unset, every run explores afresh.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 20
FUZZ_SEED    ?=
FUZZ         := build/fuzz
FUZZ_NAMES   := yaml labels fault trace ring pickle log
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := -O1 -g -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -Wall -Wextra \
                -Wno-unused-parameter -I. -MMD -MP $(FUZZ_SAN)
fuzz_probe     := probe/probe.c probe/ring.c probe/tracedb.c $(FUZZ)/gen/schema.c
fuzz_src_yaml   := trainer/nn/yaml_model.c $(FUZZ)/gen/models.c
fuzz_src_labels := trainer/data/labels.c
fuzz_src_fault  := trainer/fault.c
fuzz_src_trace  := $(fuzz_probe)
fuzz_src_ring   := $(fuzz_probe)
fuzz_src_pickle := tui/postmortem/pickle.c tui/postmortem/flightrec.c
fuzz_src_log    := tui/postmortem/logscan.c
fuzz_libs_yaml  := -lyaml -lm
fuzz_libs_trace := -lsqlite3 -lpthread
fuzz_libs_ring  := -lsqlite3 -lpthread
fuzz_max_len_yaml   := 16384
fuzz_max_len_labels := 4096
fuzz_max_len_fault  := 512
fuzz_max_len_trace  := 32768
fuzz_max_len_ring   := 16384
fuzz_max_len_pickle := 16384
fuzz_max_len_log    := 16384
# A few specs of every kind, the fault target's seeds.
FUZZ_FAULT_SEEDS := nogt:rank=0,iter=1 unused:param=model.28.dec_score_head.*,rank=1 \
  skip_backward:rank=1,iter=1 uneven:rank=1,batches=2 no_sync:rank=0,iter=3 \
  bucket_cap:rank=1,mb=0.5 kill:rank=1,iter=1,phase=backward kill:rank=0,iter=0,phase=allreduce \
  slow:rank=0,ms=200 shape:rank=1 kill:rank=1,iter=2 nogt:rank=x,iter=1
# Dictionaries (libFuzzer -dict): words a mutation would seldom spell, one list per target.
FUZZ_NUMBERS := 0 -1 1e300 -1e300 1e-300 2147483647 -2147483648 2147483648 \
  9223372036854775807 18446744073709551616 nan inf
fuzz_dict_yaml   := $(FUZZ_NUMBERS) .inf -.inf .nan None True False nc [] {} &a *a !!str !!int \
  scales depth_multiple width_multiple scale_factor nearest nn.Upsample Concat RTDETRDecoder \
  RepC3 AIFI ResNetLayer HGBlock HGStem DWConv Conv
fuzz_dict_labels := $(FUZZ_NUMBERS) 0.5 1.0 -0 0x1p-1 1e-45
fuzz_dict_fault  := $(FUZZ_NUMBERS) 1e6 rank= iter= batches= ms= mb= phase= param=
fuzz_dict_pickle := version entries pg_config pg_status record_id collective_seq_id \
  profiling_name time_created_ns state input_sizes process_group completed nccl:all_reduce 2.4
fuzz_dict_log    := [rank0]: [rank1]: Parameters Parameter indices which did not receive grad \
  for rank In addition, Expected to have finished reduction Connection closed by peer \
  Timed out waiting ms for recv operation WorkNCCL(SeqNum= OpType= NumelIn= Timeout(ms)= \
  monitoredBarrier params[ in this process with sizes Instances Epoch world_size: Parameter:
fuzz_obj = $(patsubst %.c,$(FUZZ)/obj/%.o,$(patsubst $(FUZZ)/%,%,$(1)))
FUZZ_BINS := $(patsubst %,$(FUZZ)/fuzz_%,$(FUZZ_NAMES))

define FUZZ_TARGET
$(FUZZ)/fuzz_$(1): $(FUZZ)/obj/tests/fuzz_$(1).o $(call fuzz_obj,$(fuzz_src_$(1)))
	$$(call Q,LINK)$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $$^ $(fuzz_libs_$(1)) -o $$@
endef
$(foreach t,$(FUZZ_NAMES),$(eval $(call FUZZ_TARGET,$(t))))
$(FUZZ)/fuzz_seeds: $(call fuzz_obj,tests/fuzz_seeds.c $(fuzz_probe))
	$(call Q,LINK)$(FUZZ_CC) $(FUZZ_SAN) $^ -lsqlite3 -lpthread -o $@
$(FUZZ)/obj/tests/fuzz_seeds.o: tests/fuzz_seeds.c
	@mkdir -p $(@D)
	$(call Q,CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ)/obj/gen/%.o: $(FUZZ)/gen/%.c
	@mkdir -p $(@D)
	$(call Q,CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(call Q,CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ)/gen/models.c: $(MODELS) trainer/models/embed.sh
	@mkdir -p $(@D)
	$(call Q,GEN)sh trainer/models/embed.sh $@ $(MODELS)
$(FUZZ)/gen/schema.c: traces/schema.sql probe/embed_schema.sh
	@mkdir -p $(@D)
	$(call Q,GEN)sh probe/embed_schema.sh $@ traces/schema.sql
-include $(shell find $(FUZZ)/obj -name '*.d' 2>/dev/null)

.PHONY: fuzz
fuzz: $(FUZZ_BINS) $(FUZZ)/fuzz_seeds
	@rm -rf $(FUZZ)/seed && for t in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ)/seed/$$t $(FUZZ)/corpus/$$t $(FUZZ)/crash/$$t; \
	  [ -d tests/fixtures/fuzz/$$t ] && cp tests/fixtures/fuzz/$$t/* $(FUZZ)/seed/$$t/; done; \
	cp trainer/models/*.yaml tests/fixtures/bad_yaml/*.yaml $(FUZZ)/seed/yaml/ && \
	for f in $$(find tests/fixtures -name '*.txt'); do cp $$f $(FUZZ)/seed/labels/$$(echo $$f | tr / _); done && \
	for f in tests/fixtures/postmortem/fr/*/*; do cp $$f $(FUZZ)/seed/pickle/$$(echo $$f | tr / _); done && \
	for f in tests/fixtures/postmortem/logs/* tests/fixtures/postmortem/*.txt; do \
	  head -c 16384 $$f >$(FUZZ)/seed/log/$$(echo $$f | tr / _); done && \
	i=0; set -f; for s in $(FUZZ_FAULT_SEEDS); do i=$$((i+1)); printf '%s' "$$s" >$(FUZZ)/seed/fault/$$i; done; \
	set +f; $(foreach t,$(FUZZ_NAMES),printf '%s\n' $(foreach w,$(fuzz_dict_$(t)),'"$(w)"') \
	  >$(FUZZ)/seed/$(t).dict;) \
	$(FUZZ)/fuzz_seeds $(FUZZ)/seed/ring $(FUZZ)/seed/trace || exit 1; \
	base=/dev/shm; [ -d $$base ] && [ -w $$base ] || base=$${TMPDIR:-/tmp}; \
	failed=; run() { t=$$1; scratch=$$(mktemp -d -p $$base ddpdbg-fuzz-run.XXXXXX) || exit 1; \
	  TMPDIR=$$scratch ASAN_OPTIONS=detect_leaks=1 $(FUZZ)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	    $(if $(FUZZ_SEED),-seed=$(FUZZ_SEED)) -rss_limit_mb=2048 -max_len=$$2 $$(grep -q . $(FUZZ)/seed/$$t.dict && echo -dict=$(FUZZ)/seed/$$t.dict) \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ)/crash/$$t/ \
	    $(FUZZ)/corpus/$$t $(FUZZ)/seed/$$t >$(FUZZ)/$$t.log 2>&1; \
	  rc=$$?; rm -rf $$scratch; runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ)/$$t.log); \
	  cov=$$(grep -o 'cov: [0-9]*' $(FUZZ)/$$t.log | tail -1); \
	  if [ $$rc -eq 0 ]; then echo "  FUZZ  $$t: $${runs:-?} inputs in $(FUZZ_SECONDS) s, $$cov, no failure"; \
	  else echo "  FUZZ  $$t: FAILED (exit $$rc; log $(FUZZ)/$$t.log, input in $(FUZZ)/crash/$$t/)"; \
	    grep -m1 -A30 '^==[0-9]*==\|FUZZ_CHECK\|runtime error\|ALARM' $(FUZZ)/$$t.log | head -40 | sed 's/^/    /'; \
	    failed="$$failed $$t"; fi; }; \
	$(foreach t,$(FUZZ_NAMES),run $(t) $(fuzz_max_len_$(t));) \
	[ -z "$$failed" ] || { echo "fuzz: failed:$$failed" >&2; exit 1; }

# The GPU machine's kit (tests/gpu/pack.sh): the CUDA build's binaries, the GPU tests and every
# non-system shared library they load, in build/gpu-carry/kit.tar.xz (ignored; well under the
# device tool's 64 MiB). tests/gpu/check.sh, run there, unpacks it. GPU_TESTS: the test
# binaries it carries (test_NAME). Built for the x86-64 baseline (ARCH=x86-64): that machine's
# CPU is not this one.
GPU_TESTS ?= parity parity_harness comm_nccl probe_cupti device_step
.PHONY: gpu-carry
gpu-carry:
	$(MAKE) CUDA=1 ARCH=x86-64
	bash tests/gpu/pack.sh build/cuda build/gpu-carry $(GPU_TESTS)

# The soak (not part of make test: about 10 minutes on 2 cores): 4 traced ranks of rtdetr-tiny
# for 2000 iterations; fails on any lost event or more than 5 % memory growth (tests/soak.sh).
.PHONY: soak
soak: $(TRAIN) $(BIN)/ddpdbg
	@bash tests/soak.sh $(TRAIN)

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
	@echo 'make fuzz       each libFuzzer target for FUZZ_SECONDS (default 20) under ASan+UBSan'
	@echo 'make soak       4 ranks x 2000 traced iterations: no lost event, flat memory (minutes)'
	@echo 'make CUDA=1     the CUDA build too (build/cuda, its binaries in build/cuda/bin)'
	@echo 'make gpu-carry  the CUDA build packed for the GPU machine (tests/gpu/check.sh)'
	@echo 'make deps       apt-get the Debian packages the build needs'
	@echo 'make golden     regenerate tests/golden with python3-torch'
	@echo 'make fake-table regenerate kernels/cpu/backend_fake.c from kernels/backend.h'
	@echo 'make test DEVICE=fake  the suite with the trainer on the fake device (DDPDBG_DEVICE)'
	@echo 'switches: V=1 (verbose) OPT=-O3 ARCH=native|x86-64|... BUILD=dir CUDA=0|1 NCCL=0|1 CUPTI=0|1 CUDA_ARCH=...'

$(BUILD)/gen/models.c: $(MODELS) trainer/models/embed.sh
	@mkdir -p $(@D)
	$(call Q,GEN)sh trainer/models/embed.sh $@ $(MODELS)
$(BUILD)/gen/models.o: $(BUILD)/gen/models.c
	$(call Q,CC)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The optimizer's host loops (trainer/optim/host_loop.h): sqrtf without its errno branch, so that
# AdamW's loop vectorises (errno is all that -fno-math-errno drops), and never a * and a + fused
# into one FMA, which would change the float32 results that tests/test_optim.c pins.
$(BUILD)/trainer/optim/%.o: CFLAGS += -fno-math-errno -ffp-contract=off

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
$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(call Q,NVCC)$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	$(call Q,CXX)$(CXX) $(CPPFLAGS) $(OPT) -g $(SAN) -std=c++17 -Wall -Wextra -c $< -o $@
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
