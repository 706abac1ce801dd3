# deepinfer build. One Makefile, no generated config:
#   make            build/deepinfer (optimised)
#   make test       every test: unit tests under ASan+UBSan, reference and conformance suites
#   make bench      benchmarks (figures and their fraction of the machine's limits)
#   make run        build, make the default model if missing, and generate from it
# Files named *_avx2.c are compiled with AVX2/FMA/F16C enabled, *_avx512.c with
# AVX-512 (F, BW, VL) too; both are only entered through runtime
# CPU-feature dispatch; everything else is portable x86-64.

CC      ?= cc
BUILD   ?= build
PY      := /usr/bin/python3
CSTD    := -std=c11 -D_GNU_SOURCE -pthread -MMD -MP
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
INC     := -Isrc -Itests/unit
OPT     ?= -O2 -g
SANFL   := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LIBS    := -ljansson -lpcre2-8 -lxxhash -lutf8proc -lmicrohttpd -lm
AVX2FL  := -mavx2 -mfma -mf16c
AVX512FL := $(AVX2FL) -mavx512f -mavx512bw -mavx512vl

LIB_SRC  := $(sort $(shell find src -name '*.c' ! -path 'src/cli/*'))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/*.c))

obj = $(patsubst %.c,$(1)/obj/%.o,$(2))
ISA = $(if $(findstring _avx512,$(1)),$(AVX512FL),$(if $(findstring _avx2,$(1)),$(AVX2FL)))

DEPS_OK := $(BUILD)/.deps-ok

.PHONY: all test bench run models clean format format-check asan train-default fuzz fuzz-json
all: $(BUILD)/deepinfer

$(DEPS_OK): scripts/deps.sh
	@mkdir -p $(BUILD)
	@scripts/deps.sh
	@touch $@

# --- optimised build -------------------------------------------------------
$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(INC) $(OPT) $(call ISA,$<) -c $< -o $@

$(BUILD)/deepinfer: $(call obj,$(BUILD),$(LIB_SRC) $(CLI_SRC))
	$(CC) $(OPT) -pthread $^ -o $@ $(LIBS)

$(BUILD)/test_unit: $(call obj,$(BUILD),$(LIB_SRC) $(TEST_SRC))
	$(CC) $(OPT) -pthread $^ -o $@ $(LIBS)

# --- sanitised build (ASan + UBSan) ----------------------------------------
$(BUILD)/asan/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(INC) $(SANFL) $(call ISA,$<) -c $< -o $@

$(BUILD)/asan/deepinfer: $(call obj,$(BUILD)/asan,$(LIB_SRC) $(CLI_SRC))
	$(CC) $(SANFL) -pthread $^ -o $@ $(LIBS)

$(BUILD)/asan/test_unit: $(call obj,$(BUILD)/asan,$(LIB_SRC) $(TEST_SRC))
	$(CC) $(SANFL) -pthread $^ -o $@ $(LIBS)

asan: $(BUILD)/asan/deepinfer $(BUILD)/asan/test_unit

# --- fuzzing (clang + libFuzzer): the API server's request/response conversion
FUZZ_CC   ?= clang
FUZZ_TIME ?= 60
FUZZFL    := -O1 -g -fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer
$(BUILD)/fuzz/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CSTD) -Wall -Wextra -Wno-unused-parameter $(INC) $(FUZZFL) $(call ISA,$<) -c $< -o $@

FUZZ_SRC  := $(filter src/base/% src/recipe/% src/server/% src/engine/json_% src/engine/grammar%,$(LIB_SRC)) \
             tests/fuzz/fuzz_request.c tests/fuzz/engine_stub.c
$(BUILD)/fuzz/fuzz_request: $(call obj,$(BUILD)/fuzz,$(FUZZ_SRC))
	$(FUZZ_CC) $(FUZZFL) -fsanitize=fuzzer -pthread $^ -o $@ $(LIBS)

# Constrained decoding: schemas, patterns and grammars and the bytes that follow them.
$(BUILD)/fuzz/fuzz_json: $(call obj,$(BUILD)/fuzz,$(filter src/base/% src/engine/json_% src/engine/grammar%,$(LIB_SRC)) \
                          tests/fuzz/fuzz_json.c)
	$(FUZZ_CC) $(FUZZFL) -fsanitize=fuzzer -pthread $^ -o $@ $(LIBS)

fuzz-json: $(BUILD)/fuzz/fuzz_json
	@mkdir -p $(BUILD)/fuzz/corpus-json
	$(BUILD)/fuzz/fuzz_json -max_total_time=$(FUZZ_TIME) -max_len=4096 -timeout=10 \
		$(BUILD)/fuzz/corpus-json tests/fuzz/corpus-json

# Long runs: new inputs go to build/fuzz/corpus; the seed corpus (replayed by
# `make test` through the unit test server_fuzz_corpus_replays_cleanly) stays as is.
fuzz: $(BUILD)/fuzz/fuzz_request
	@mkdir -p $(BUILD)/fuzz/corpus
	$(BUILD)/fuzz/fuzz_request -max_total_time=$(FUZZ_TIME) -max_len=16384 -timeout=10 \
		$(BUILD)/fuzz/corpus tests/fuzz/corpus

# --- tests, models, benchmarks ---------------------------------------------
test: $(BUILD)/deepinfer $(BUILD)/test_unit asan
	@scripts/deps.sh test
	@tests/run.sh

models: $(BUILD)/deepinfer
	@scripts/deps.sh test
	@$(PY) tools/make_model.py --preset all-tiny --out $(BUILD)/models

# --- the bundled default model ---------------------------------------------
# make train-default: rebuilds models/deepinfer-tiny-moe from scratch with seed
# 1234 (tools/train/): corpus from the Debian text on this machine + generated
# dialogues, BPE tokenizer, DeepSeek-V3-style MoE training, evaluation and
# model card, then its test. Two phases: 700 general steps (60 % dialogue
# windows, peak lr 3e-3), then resumed to step 2100 at half the peak lr on
# 85 % dialogue windows with assistant-answer tokens weighted 3x in the loss
# (tool calls and JSON). The lr at each step depends only on the step and the
# flags. No time cap: the run is defined by its steps, and on one torch and one
# OpenBLAS thread (two threads ran 7x slower on the shared 2-core machine, and
# threads change the summation order) it rebuilds the same weights from the same
# Debian files. About 70-80 min on a loaded 2-core machine (data ~1 min,
# training ~1 h, evaluation ~10 min); the model card gives the measured time.
# OpenBLAS is fetched into build/openblas (no system change) when the system
# BLAS is the slow reference one.
DEFAULT_MODEL := models/deepinfer-tiny-moe
TRAIN_ENV := LD_LIBRARY_PATH=$(BUILD)/openblas OPENBLAS_NUM_THREADS=1
train-default: $(BUILD)/deepinfer
	-@tools/train/openblas.sh $(BUILD)/openblas
	$(TRAIN_ENV) $(PY) tools/train/train.py --out $(DEFAULT_MODEL) --work $(BUILD)/train --seed 1234 \
		--steps 700 --lr 3e-3 --p-dialogue 0.6 --batch 3 --seq 512 --threads 1
	$(TRAIN_ENV) $(PY) tools/train/train.py --out $(DEFAULT_MODEL) --work $(BUILD)/train --seed 1234 --resume \
		--steps 2100 --lr 1.5e-3 --p-dialogue 0.85 --answer-weight 3 --batch 3 --seq 512 --threads 1
	$(TRAIN_ENV) $(PY) tools/train/evaluate.py $(DEFAULT_MODEL) --work $(BUILD)/train --seed 1234 --threads 1
	$(PY) tests/reference/test_default_model.py

bench: $(BUILD)/deepinfer
	@scripts/deps.sh test
	@scripts/bench.sh

run: $(BUILD)/deepinfer
	@scripts/run.sh

format:
	clang-format -i $$(find src tests/unit -name '*.[ch]')

format-check:
	clang-format --dry-run --Werror $$(find src tests/unit -name '*.[ch]')

clean:
	rm -rf $(BUILD)

# Header dependencies recorded by -MMD at each compile.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
