#!/usr/bin/env bash
# tools/gpu_bundle_run.sh on a bundle of one test program, in two checkouts in turn: it unpacks
# the payload, fills in the build and source paths of ctest's files for the checkout it is in,
# and runs ctest with the test's label, pass expression and arguments; a bundle outside a
# checkout is refused. Usage: gpu_bundle_run_test.sh PRECIS_SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work/tmp  # where run.sh unpacks
mkdir -p "$TMPDIR"

# the payload: a program that needs a file of the checkout and prints where it ran
mkdir -p "$work/stage/tree/sub" "$work/stage/lib"
cat >"$work/stage/tree/sub/prog" <<'P'
#!/usr/bin/env bash
[[ -f "$1" ]] && echo "prog ran in $PWD with $1"
P
chmod +x "$work/stage/tree/sub/prog"
echo 'subdirs("sub")' >"$work/stage/tree/CTestTestfile.cmake"
cat >"$work/stage/tree/sub/CTestTestfile.cmake" <<'C'
add_test(bundle.prog "@BUNDLE@/sub/prog" "@SOURCE@/input.txt")
set_tests_properties(bundle.prog PROPERTIES LABELS gpu PASS_REGULAR_EXPRESSION "prog ran in @BUNDLE@/sub with @SOURCE@/input.txt" WORKING_DIRECTORY "@BUNDLE@/sub")
add_test(bundle.other "@BUNDLE@/sub/prog" "@SOURCE@/missing.txt")
set_tests_properties(bundle.other PROPERTIES LABELS unit WORKING_DIRECTORY "@BUNDLE@/sub")
C
mkdir -p "$work/a/.bundle"
for c in a b; do
  mkdir -p "$work/$c"
  : >"$work/$c/CMakeLists.txt"
  echo input >"$work/$c/input.txt"
done
b=$work/a/.bundle
tar -C "$work/stage" -cf - . | xz >"$b/payload.tar.xz"
echo .bundle >"$b/PLACE"
printf '0123abc\n' >"$b/COMMIT"
cp "$src/tools/gpu_bundle_run.sh" "$b/run.sh"

fail() { echo "FAIL: $*"; exit 1; }
out=$(bash "$b/run.sh" 2>&1) || fail "run.sh in checkout a: $out"
grep -q "100% tests passed, 0 tests failed out of 1" <<<"$out" || fail "checkout a: expected the one gpu test to pass: $out"
grep -q "^bundle: 0123abc" <<<"$out" || fail "checkout a: the commit is not printed: $out"
# moved to another checkout: unpacked again, paths filled in for that one
mv "$b" "$work/b/.bundle"
rm -rf "$work/a"  # paths left from checkout a would now fail
out=$(bash "$work/b/.bundle/run.sh" 2>&1) || fail "run.sh in checkout b: $out"
grep -q "100% tests passed, 0 tests failed out of 1" <<<"$out" || fail "checkout b: $out"
# other ctest arguments replace -L gpu: the unit test's file is missing, so it fails
out=$(bash "$work/b/.bundle/run.sh" -L unit 2>&1) && fail "run.sh -L unit passed a test whose input is missing: $out"
grep -q "bundle.other" <<<"$out" || fail "run.sh -L unit did not run bundle.other: $out"
# sourced: the environment only
env=$(bash -c "source '$work/b/.bundle/run.sh' && echo \"\$BUNDLE|\$TREE|\$SOURCE\"")
[[ "$env" =~ ^$TMPDIR/precis-gpu-bundle-[0-9a-f]{12}\|$TMPDIR/precis-gpu-bundle-[0-9a-f]{12}/tree\|$work/b$ ]] \
  || fail "sourced run.sh: BUNDLE|TREE|SOURCE = $env"
# nothing unpacked into the folder that travels
[[ -z "$(find "$work/b/.bundle" -mindepth 1 -not -name COMMIT -not -name PLACE -not -name run.sh -not -name payload.tar.xz)" ]] \
  || fail "run.sh wrote into the bundle's folder: $(ls -A "$work/b/.bundle")"
# outside a checkout: refused with the reason
mkdir -p "$work/c"
cp -r "$work/b/.bundle" "$work/c/elsewhere"
out=$(bash "$work/c/elsewhere/run.sh" 2>&1) && fail "run.sh outside its place ran: $out"
grep -q "the bundle must be at .bundle in a precis checkout" <<<"$out" || fail "outside its place: $out"
echo "gpu_bundle run.sh: unpacked, filled in and run in two checkouts; refused outside one"
