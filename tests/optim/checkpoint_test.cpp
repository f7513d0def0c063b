// Checkpoints: bit-exact round trip that resumes training to identical losses; a file truncated
// at every byte offset, random bit flips, a crash between write and rename, and mismatched
// models, versions and dtypes all raise checkpoint_error and leave memory untouched. (`make asan`
// runs these under AddressSanitizer.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <precis/optim/all.hpp>
#include <precis/precis.hpp>
#include <random>
#include <string>
#include <vector>

using namespace precis;
namespace pol = precis::policy;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("precis_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<unsigned char>& b, std::size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(n));
}

template <class P>
struct task {
  nn::MLP<P> net;
  optim::MixedPrecisionOptimizer<P, optim::Adam, optim::DynamicLossScaler> opt;
  Tensor<float> x{Shape{32, 4}};
  std::vector<std::int64_t> y = std::vector<std::int64_t>(32);
  Tape<P> tape;

  explicit task(std::uint64_t seed)
      : net({4, 16, 3}, nn::activation::tanh, seed), opt(net, optim::Adam{.lr = 0.01}, optim::DynamicLossScaler{}) {
    fill_uniform(x, -1, 1, 99);
    for (index_t i = 0; i < 32; ++i) y[static_cast<std::size_t>(i)] = (x(i, 0) > 0) + (x(i, 1) > 0);
  }
  double step() {
    tape.reset();
    opt.zero_grad();
    auto loss = cross_entropy(net(tape.input(x)), y);
    opt.backward(tape, loss);
    opt.step();
    return loss.item();
  }
  /// Every byte of the parameters and masters, for "nothing changed" checks.
  std::vector<double> snapshot() {
    std::vector<double> s;
    std::size_t i = 0;
    for (auto* p : net.parameters()) {
      for (auto v : p->value) s.push_back(static_cast<double>(static_cast<float>(v)));
      const auto m = opt.master(i);
      for (index_t k = 0; k < m.size(); ++k) s.push_back(static_cast<double>(m.data()[k]));
      ++i;
    }
    s.push_back(opt.loss_scale());
    s.push_back(static_cast<double>(opt.steps_taken()));
    return s;
  }
};

using P16 = pol::named<"16-mixed">;

TEST(Checkpoint, RoundTripIsBitExactAndResumesToIdenticalLosses) {
  const auto path = temp_path("roundtrip.ckpt");
  task<P16> a(1);
  for (int i = 0; i < 5; ++i) a.step();
  a.opt.save(path);
  const auto saved = a.snapshot();
  std::vector<double> la;
  for (int i = 0; i < 5; ++i) la.push_back(a.step());

  task<P16> b(2);  // other initial weights
  b.opt.load(path);
  EXPECT_EQ(b.snapshot(), saved);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.step(), la[static_cast<std::size_t>(i)]) << "step " << i;
  EXPECT_EQ(b.snapshot(), a.snapshot());
}

TEST(Checkpoint, TruncationAtEveryOffsetAndBitFlipsAreRejected) {
  using P = pol::named<"bf16-mixed">;
  const auto path = temp_path("small.ckpt"), bad = temp_path("bad.ckpt");
  task<P> a(3);
  a.step();
  a.opt.save(path);
  const auto bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 100u);
  task<P> b(4);
  const auto before = b.snapshot();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(bad, bytes, n);
    EXPECT_THROW(b.opt.load(bad), optim::checkpoint_error) << "truncated at " << n;
  }
  std::mt19937 g(5);
  for (int trial = 0; trial < 300; ++trial) {
    auto flipped = bytes;
    flipped[g() % flipped.size()] ^= static_cast<unsigned char>(1u << (g() % 8));
    write_bytes(bad, flipped, flipped.size());
    EXPECT_THROW(b.opt.load(bad), optim::checkpoint_error) << "flip " << trial;
  }
  EXPECT_EQ(b.snapshot(), before);
  write_bytes(bad, bytes, bytes.size());  // the intact file still loads
  b.opt.load(bad);
  EXPECT_EQ(b.snapshot(), a.snapshot());
}

TEST(Checkpoint, ACrashBetweenWriteAndRenameKeepsThePreviousCheckpoint) {
  const auto path = temp_path("crash.ckpt");
  task<P16> a(6);
  a.step();
  a.opt.save(path);
  const auto first = a.snapshot();
  a.step();
  optim::detail::checkpoint_before_rename = [](const std::string&) { throw std::runtime_error("simulated crash"); };
  EXPECT_THROW(a.opt.save(path), std::runtime_error);
  optim::detail::checkpoint_before_rename = nullptr;
  task<P16> b(7);
  b.opt.load(path);
  EXPECT_EQ(b.snapshot(), first);
}

TEST(Checkpoint, MismatchedModelsDtypesAndVersionsAreNamed) {
  const auto path = temp_path("mismatch.ckpt"), bad = temp_path("version.ckpt");
  task<P16> a(8);
  a.opt.save(path);
  // another architecture
  nn::MLP<P16> wide({4, 32, 3}, nn::activation::tanh, 1);
  optim::MixedPrecisionOptimizer<P16, optim::Adam, optim::DynamicLossScaler> wide_opt(wide, optim::Adam{});
  try {
    wide_opt.load(path);
    ADD_FAILURE() << "expected checkpoint_error";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"param/layer0.weight\" is fp16 [16, 4]; the model expects fp16 [32, 4]"), std::string::npos) << e.what();
  }
  // another policy: bf16 parameters
  task<pol::named<"bf16-mixed">> other(9);
  try {
    other.opt.load(path);
    ADD_FAILURE() << "expected checkpoint_error";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("the model expects bf16"), std::string::npos) << e.what();
  }
  // another rule: SGD without momentum keeps no state arrays
  optim::MixedPrecisionOptimizer<P16, optim::SGD, optim::DynamicLossScaler> sgd(a.net, optim::SGD{});
  EXPECT_THROW(sgd.load(path), optim::checkpoint_error);
  // a future format version, with a valid checksum
  auto bytes = read_bytes(path);
  bytes[8] = 2;
  const std::size_t body = bytes.size() - 12;
  const std::uint32_t crc = optim::detail::crc32(bytes.data(), body);
  std::memcpy(bytes.data() + body, &crc, 4);
  write_bytes(bad, bytes, bytes.size());
  try {
    a.opt.load(bad);
    ADD_FAILURE() << "expected checkpoint_error";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("format version 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.opt.load(temp_path("does_not_exist.ckpt")), optim::checkpoint_error);
}

/// Replaces the payload of record `name` (same size) and fixes the checksum, so only the
/// semantic checks can reject the file.
void patch_record(const std::string& path, const std::string& name, const void* payload, std::size_t n) {
  auto bytes = read_bytes(path);
  const auto u32 = [&](std::size_t at) {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  // find "<u32 length><name>"
  std::size_t at = 0;
  for (; at + 4 + name.size() <= bytes.size(); ++at) {
    if (u32(at) == name.size() && std::memcmp(bytes.data() + at + 4, name.data(), name.size()) == 0) break;
  }
  ASSERT_LT(at + 4 + name.size(), bytes.size()) << name;
  at += 4 + name.size();
  at += 4 + u32(at);                  // dtype
  at += 4 + 8 * std::size_t{u32(at)};  // rank and extents
  std::uint64_t size;
  std::memcpy(&size, bytes.data() + at, 8);
  ASSERT_EQ(size, n) << name;
  std::memcpy(bytes.data() + at + 8, payload, n);
  const std::size_t body = bytes.size() - 12;
  const std::uint32_t crc = optim::detail::crc32(bytes.data(), body);
  std::memcpy(bytes.data() + body, &crc, 4);
  write_bytes(path, bytes, bytes.size());
}

template <class T>
void expect_rejected_unchanged(task<T>& t, const std::string& path, const std::string& needle) {
  const auto before = t.snapshot();
  try {
    t.opt.load(path);
    ADD_FAILURE() << "expected checkpoint_error containing \"" << needle << "\"";
  } catch (const optim::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.snapshot(), before);
}

TEST(Checkpoint, SemanticallyImpossibleStatesAreRejected) {
  const auto good = temp_path("good.ckpt"), bad = temp_path("bad.ckpt");
  task<P16> a(11);
  for (int i = 0; i < 3; ++i) a.step();
  a.opt.save(good);
  task<P16> b(12);
  // an all-zero random state: xoshiro256++ would emit zeros forever
  fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
  const std::uint64_t zero_rng[4] = {0, 0, 0, 0};
  patch_record(bad, "rng", zero_rng, sizeof zero_rng);
  expect_rejected_unchanged(b, bad, "all-zero random state");
  // negative counters: the step count, and the scaler's floor hits
  const std::int64_t negative_steps[6] = {-1, 0, 1, 3, 0, 0};
  fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
  patch_record(bad, "optimizer/counters", negative_steps, sizeof negative_steps);
  expect_rejected_unchanged(b, bad, "negative step count");
  const std::int64_t negative_hits[6] = {3, 0, 1, 3, 0, -2};
  fs::copy_file(good, bad, fs::copy_options::overwrite_existing);
  patch_record(bad, "optimizer/counters", negative_hits, sizeof negative_hits);
  expect_rejected_unchanged(b, bad, "holds a scaler state this scaler rejects");
  // a non-finite master weight
  {
    task<P16> c(13);
    c.net.parameters()[1]->value.data()[2] = half(std::numeric_limits<float>::quiet_NaN());
    c.opt.refresh_masters();
    c.opt.save(bad);
  }
  expect_rejected_unchanged(b, bad, "record master/layer0.bias holds a non-finite value at index 2");
  // not a regular file: /dev/zero would be read until memory runs out
  if (fs::exists("/dev/zero")) expect_rejected_unchanged(b, "/dev/zero", "is not a regular file");
  // and the untouched file still loads
  b.opt.load(good);
  EXPECT_EQ(b.snapshot(), a.snapshot());
}

TEST(Checkpoint, ConstantScalersCheckTheirWholeState) {
  optim::StaticLossScaler s(128);
  optim::scaler_state st = s.state();
  st.steps = 5;
  st.skipped = 2;
  s.load_state(st);
  EXPECT_EQ(s.skipped_steps(), 2);
  for (auto bad : {optim::scaler_state{128, 0, 1, -1, 0, 0}, optim::scaler_state{128, 0, 1, 2, 3, 0},
                   optim::scaler_state{128, 4, 1, 5, 0, 0}, optim::scaler_state{128, 0, 1, 5, 0, 1}}) {
    optim::NoLossScaler n;
    bad.scale = 1;
    EXPECT_THROW(n.load_state(bad), invalid_argument);
    bad.scale = 128;
    EXPECT_THROW(s.load_state(bad), invalid_argument);
  }
  EXPECT_EQ(s.state().steps, 5);
}

}  // namespace
