# precis front door. `make test` and `make demo` work on a fresh Debian machine.
.PHONY: all test demo demo-full bench numerics asan cuda format clean fuzz

JOBS ?= 2

all: test

test:
	tools/deps.sh test
	cmake --preset dev
	cmake --build --preset dev -j $(JOBS)
	ctest --preset dev

# Fashion-MNIST under every precision policy (examples/train_fashion_mnist): prints the table,
# writes build/demo/results.{json,csv}, and build/demo/demo.md with its plots. CPU-only: with
# PRECIS_CUDA=OFF, configure skips finding and probing nvcc (8 of its 11 s on a 2-core Zen 3).
demo:
	tools/deps.sh demo
	cmake --preset release -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_CUDA=OFF
	cmake --build --preset release -j $(JOBS) --target train_fashion_mnist
	./build/release/examples/train_fashion_mnist --out build/demo
	python3 bench/demo_report.py build/demo/results.json build/demo

# The full table: every model under every policy, for more epochs (the emulated 16-bit
# "-true" policies make it take an hour or more on a 2-core machine), from the program that has
# every run compiled in (train_fashion_mnist has the default plan's).
demo-full:
	tools/deps.sh demo
	cmake --preset release -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=OFF -DPRECIS_CUDA=OFF
	cmake --build --preset release -j $(JOBS) --target train_fashion_mnist_full
	./build/release/examples/train_fashion_mnist_full --full --out build/demo-full
	python3 bench/demo_report.py build/demo-full/results.json build/demo-full

bench:
	tools/deps.sh bench
	cmake --preset release -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=ON
	cmake --build --preset release -j $(JOBS) --target bench_convert bench_gemm bench_elementwise bench_reduce bench_tape bench_optimizer bench_ops \
	  $$(grep -q '^MPIEXEC_EXECUTABLE:FILEPATH=/' build/release/CMakeCache.txt && echo bench_allreduce)
	mkdir -p build/bench
	for b in convert gemm elementwise reduce tape optimizer ops; do \
	  ./build/release/bench/perf/bench_$$b --benchmark_repetitions=5 \
	    --benchmark_report_aggregates_only=true --benchmark_format=json > build/bench/$$b.json || exit 1; \
	done
	python3 bench/ratios.py build/bench/convert.json
	python3 bench/ratios.py --gemm build/bench/gemm.json
	python3 bench/ratios.py --stream build/bench/elementwise.json
	python3 bench/ratios.py --stream build/bench/reduce.json
	python3 bench/ratios.py --tape build/bench/tape.json
	@if [ -x build/release/bench/perf/bench_allreduce ]; then \
	  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 build/release/bench/perf/bench_allreduce \
	    --benchmark_repetitions=7 --benchmark_report_aggregates_only=true --benchmark_format=json > build/bench/allreduce.json \
	  && python3 bench/ratios.py --allreduce build/bench/allreduce.json; \
	else echo "bench_allreduce not built (no MPI found): skipped"; fi

# The rounding-error and underflow suite: runs bench/numerics and regenerates docs/numerics.md
# and its plots from the JSON.
NUMERICS := formats stagnation stochastic summation dot_gemm underflow tensor_core gradients
numerics:
	tools/deps.sh numerics
	cmake --preset release -DPRECIS_BUILD_TESTS=OFF -DPRECIS_BUILD_BENCHMARKS=ON
	cmake --build --preset release -j $(JOBS) --target $(addprefix numerics_,$(NUMERICS))
	mkdir -p build/numerics
	for p in $(NUMERICS); do \
	  ./build/release/bench/numerics/numerics_$$p --benchmark_format=json > build/numerics/$$p.json || exit 1; \
	done
	python3 bench/numerics_report.py build/numerics docs

asan:
	tools/deps.sh test
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan

cuda:
	tools/deps.sh test
	cmake --preset cuda
	cmake --build --preset cuda -j $(JOBS)
	ctest --preset cuda

format:
	find include tests bench examples -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \
	  | xargs clang-format -i

clean:
	rm -rf build

# The fuzz targets (tests/fuzz) for FUZZ_SECONDS each (default 600), two at a time, with
# clang++ and libFuzzer; the corpora grow in build/fuzz. `make test` runs them for 10 s each.
FUZZ_SECONDS ?= 600
fuzz:
	tools/deps.sh fuzz
	cmake -S tests/fuzz -B build/fuzz -DPRECIS_SOURCE_DIR=$(CURDIR) -DCMAKE_CXX_COMPILER=clang++
	cmake --build build/fuzz -j $(JOBS)
	cd build/fuzz && (cmake -DFUZZ_SECONDS=$(FUZZ_SECONDS) -DCORPUS_DIR=$(CURDIR)/tests/fuzz/corpus -DTARGETS="idx;policy" -P $(CURDIR)/tests/fuzz/run.cmake > run1.log 2>&1 & \
	  cmake -DFUZZ_SECONDS=$(FUZZ_SECONDS) -DCORPUS_DIR=$(CURDIR)/tests/fuzz/corpus -DTARGETS="checkpoint;shape;ops" -P $(CURDIR)/tests/fuzz/run.cmake > run2.log 2>&1; \
	  r2=$$?; wait $$!; r1=$$?; grep -h '^fuzz_' run1.log run2.log; test $$r1 -eq 0 && test $$r2 -eq 0)
